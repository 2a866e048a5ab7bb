"""``evidence_text.detect_structured`` (the run labeller of the segmenting reader, issue 14) against the
path it replaces: ``detect`` kept when it gives a structured kind, None otherwise.  It asks the kernel-log
sniff last, so every order case is covered: a kernel log that quotes an nvidia-smi error or lspci lines
(``detect`` stops at the kernel log), and those formats alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuclinic.sources import evidence_text as E
from gpuclinic.sources import sniffgates
from gpuclinic.sources.segments import _structured

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
IPMI = (FIXTURES / "realworld/corpus/ipmitool_sensor_row_ambient_46c_status_ok_openbmc_3743.txt").read_text()
# two NVRM lines: a kernel log to the sniff, short enough that the formats after it claim the sample too
KERNEL = "".join((FIXTURES / "kernel_log" / "bumblebee-554-fallen-old-format.log").open().readlines()[:2])


def _expected(sample: str) -> str | None:
    kind = E.detect(sample)
    return kind if _structured(kind) else None


def _samples() -> list[str]:
    out: list[str] = []
    for p in sorted(FIXTURES.rglob("*")):
        if not p.is_file() or p.suffix in (".md", ".gz"):
            continue
        text = p.read_bytes()[: 64 * 1024].decode("utf-8", "replace")
        out += [text, text[:16384], text[len(text) // 3 :]]
    return out


def test_every_fixture_gets_the_label_detect_gives() -> None:
    samples = _samples()
    assert len(samples) > 1000
    kinds = set()
    for s in samples:
        want = _expected(s)
        assert E.detect_structured(s) == want, s[:200]
        kinds.add(want)
    # the fixtures reach the structured kinds, the server-room ones and the non-structured ones
    assert {None, "smi_text", "smi_table", "smi_xml", "lspci"} <= kinds
    assert any(k and k.startswith("room:") for k in kinds)


@pytest.mark.parametrize(
    "tail",
    [
        "No devices were found\n",  # smi_table.has_errors
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
        "01:00.0 3D controller [0302]: NVIDIA Corporation GA100 [A100 SXM4 40GB] [10de:20b0] (rev a1)\n",
        IPMI,
    ],
)
def test_the_kernel_log_still_wins_over_what_follows_it(tail: str) -> None:
    with_kernel = KERNEL + tail
    assert E.detect(with_kernel) == "kernel_log"
    assert E.detect_structured(with_kernel) is None
    prose = "step 1 loss 0.5\n" + tail
    assert E.detect_structured(prose) == _expected(prose) is not None


# `sensors -j` (lm-sensors 3.6 JSON output; no fixture file holds one)
SENSORS_J = """{
   "coretemp-isa-0000":{
      "Adapter": "ISA adapter",
      "Package id 0":{
         "temp1_input": 45.000,
         "temp1_max": 84.000,
         "temp1_crit": 100.000
      }
   }
}
"""


# `ipmitool fru print` (its layout; no fixture file holds one)
FRU = """FRU Device Description : Builtin FRU Device (ID 0)
 Chassis Type          : Rack Mount Chassis
 Board Mfg Date        : Mon Jan  1 00:00:00 2018
 Board Mfg             : Supermicro
 Board Product         : X11DPG-OT-CPU
 Product Manufacturer  : Supermicro
 Product Name          : SYS-4029GP-TRT2
"""


def _absent(sample: str) -> frozenset[str]:
    """The sniffgates literals ``sample`` lacks, ASCII case folded (what the big-log index finds)."""
    low = sample.encode("utf-8", "surrogatepass").lower()
    return frozenset(g for g in sniffgates.ALL if g.lower().encode() not in low)


def test_skipping_the_sniffers_whose_literals_are_absent_changes_no_label() -> None:
    """The gates are sound on every fixture: a sniffer never claims a sample that lacks all its literals
    (issue 14: the big-log reader skips those sniffers)."""
    skipped = 0
    for s in _samples():
        absent = _absent(s)
        skipped += len(absent)
        assert E.detect_structured(s, absent) == E.detect_structured(s), s[:200]
    assert skipped > 1000  # (the gates did rule sniffers out)


@pytest.mark.parametrize(
    "name,looks,gate",
    [
        ("bugreport", "gpuclinic.sources.bugreport:looks_like", "BUGREPORT"),
        ("smi_xml", "gpuclinic.sources.smi_xml:looks_like", "SMI_XML"),
        ("smi_topo", "gpuclinic.sources.smi_topo:looks_like", "SMI_TOPO"),
        ("lspci", "gpuclinic.sources.lspci:looks_like", "LSPCI"),
        ("smi -q", "gpuclinic.sources.smi_text:looks_like", "SMI_TEXT"),
        ("nvlink", "gpuclinic.sources.smi_nvlink:looks_like", "SMI_NVLINK"),
        ("smi errors", "gpuclinic.sources.smi_table:has_errors", "SMI_ERRORS"),
        ("redfish", "gpuclinic.sources.bmc.redfish:claims", "REDFISH"),
        ("sensors -j", "gpuclinic.sources.bmc.lmsensors:claims_json", "SENSORS_JSON"),
        ("sensors -u", "gpuclinic.sources.bmc.lmsensors:claims_raw", "SENSORS_TEXT"),
        ("sensors", "gpuclinic.sources.bmc.lmsensors:claims_text", "SENSORS_TEXT"),
        ("log-util", "gpuclinic.sources.bmc.logutil:claims", "OPENBMC_LOGUTIL"),
        ("vendor log", "gpuclinic.sources.bmc.vendorlog:claims", "VENDOR_LOG"),
        ("ipmitool sensor get", "gpuclinic.sources.bmc.ipmitool:claims_verbose", "IPMI_VERBOSE"),
        ("ipmitool chassis", "gpuclinic.sources.bmc.ipmitool:claims_chassis", "IPMI_CHASSIS"),
        ("ipmitool fru", "gpuclinic.sources.bmc.ipmitool:claims_fru", "IPMI_FRU"),
        ("ipmitool sel info", "gpuclinic.sources.bmc.ipmitool:claims_sel_info", "IPMI_SEL_INFO"),
        ("ipmitool sel -v", "gpuclinic.sources.bmc.ipmitool:claims_sel_verbose", "IPMI_SEL_VERBOSE"),
    ],
)
def test_each_gated_sniffer_claims_only_samples_holding_a_literal(name: str, looks: str, gate: str) -> None:
    import importlib

    mod, fn = looks.split(":")
    sniff = getattr(importlib.import_module(mod), fn)
    literals = getattr(sniffgates, gate)
    claimed = 0
    for s in [*_samples(), SENSORS_J, FRU]:
        if sniff(s):
            claimed += 1
            low = s.lower()
            assert any(g.lower() in low for g in literals), (name, s[:200])
    assert claimed, name  # (a fixture of each format exists)
