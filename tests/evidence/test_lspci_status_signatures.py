"""lspci -vvv fragments without their device line (LnkSta, DevSta, AER UESta/CESta) are read: a narrowed
link or a set error bit is a finding, a speed-only drop at full width is info (idle power saving), a
clean block stays quiet, and a full lspci block is judged once (by the pcie detector, not twice)."""

from __future__ import annotations

from pathlib import Path

from gpuclinic.diagnose import diagnose
from gpuclinic.explain import explain_text
from gpuclinic.sources import evidence

FRAGMENT = (
    "\t\tLnkSta:\tSpeed 5GT/s (downgraded), Width x1 (downgraded)\n"
    "\t\t\tTrErr- Train- SlotClk+ DLActive- BWMgmt- ABWMgmt-\n"
    "\tCapabilities: [100 v2] Advanced Error Reporting\n"
    "\t\tUESta:\tDLP- SDES- TLP- FCP- CmpltTO- CmpltAbrt- UnxCmplt- RxOF- MalfTLP- ECRC- UnsupReq- ACSViol-\n"
    "\t\tCESta:\tRxErr- BadTLP- BadDLLP- Rollover- Timeout- AdvNonFatalErr+\n"
)
DEVICE = (
    "01:00.0 VGA compatible controller [0300]: NVIDIA Corporation TU106 [GeForce RTX 2060] [10de:1f08] "
    "(rev a1)\n"
    "\tCapabilities: [68] Express (v2) Legacy Endpoint, MSI 00\n"
    "\t\tDevSta:\tCorrErr- NonFatalErr- FatalErr- UnsupReq- AuxPwr- TransPend-\n"
    "\t\tLnkCap:\tPort #0, Speed 8GT/s, Width x16, ASPM L0s L1, Exit Latency L0s <1us, L1 <4us\n"
    "\t\tLnkSta:\tSpeed 8GT/s (ok), Width x8 (downgraded)\n"
    "\tCapabilities: [100 v2] Advanced Error Reporting\n"
    "\t\tUESta:\tDLP- SDES- TLP- FCP- CmpltTO+ CmpltAbrt- UnxCmplt- RxOF- MalfTLP- ECRC- UnsupReq- ACSViol-\n"
    "\tKernel driver in use: nvidia\n"
)


def _codes(tmp_path: Path, text: str) -> dict[str, list[str]]:
    p = tmp_path / "lspci.txt"
    p.write_text(text)
    out: dict[str, list[str]] = {}
    for f in diagnose(evidence.load_evidence([str(p)])).findings:
        out.setdefault(f.code, []).append(f.severity.name.lower())
    return out


def test_headerless_fragment_width_drop_and_cesta(tmp_path: Path) -> None:
    got = _codes(tmp_path, FRAGMENT)
    assert got.get("pcie.link_degraded") == ["warning"], got
    assert got.get("pcie.aer_corrected") == ["info"], got
    assert "pcie.aer_uncorrected" not in got
    exp = {f.code: f.severity.name.lower() for f in explain_text(FRAGMENT, "frag").findings}
    assert exp.get("pcie.link_degraded") == "warning", exp


def test_speed_only_drop_is_info_and_devsta_bits(tmp_path: Path) -> None:
    text = (
        "                DevSta: CorrErr+ NonFatalErr- FatalErr- UnsupReq+ AuxPwr- TransPend-\n"
        "                LnkCap: Port #0, Speed 8GT/s, Width x16, ASPM L0s L1\n"
        "                LnkSta: Speed 2.5GT/s (downgraded), Width x16 (ok)\n"
    )
    got = _codes(tmp_path, text)
    assert got == {"pcie.aer_corrected": ["info"], "pcie.link_degraded": ["info"]}, got
    fatal = text.replace("FatalErr- UnsupReq+", "FatalErr+ UnsupReq+")
    assert _codes(tmp_path, fatal).get("pcie.aer_uncorrected") == ["critical"]
    nonfatal = text.replace("NonFatalErr- FatalErr-", "NonFatalErr+ FatalErr-")
    assert _codes(tmp_path, nonfatal).get("pcie.aer_uncorrected") == ["warning"]


def test_full_block_judged_once_and_uesta_read(tmp_path: Path) -> None:
    got = _codes(tmp_path, DEVICE)
    assert got.get("pcie.link_degraded") == ["warning"], got  # the detector's, not a second signature one
    assert got.get("pcie.aer_uncorrected") == ["warning"], got
    clean = DEVICE.replace("CmpltTO+", "CmpltTO-").replace("Width x8 (downgraded)", "Width x16 (ok)")
    got = _codes(tmp_path, clean)
    assert not [c for c, sev in got.items() if "warning" in sev or "critical" in sev], got


NOUVEAU = (
    "01:00.0 VGA compatible controller: NVIDIA Corporation GM204 [GeForce GTX 970] (rev a1) (prog-if 00 [VGA "
    "controller])\n"
    "\tRegion 0: Memory at f2000000 (32-bit, non-prefetchable) [size=16M]\n"
    "\tCapabilities: <access denied>\n"
    "\tKernel driver in use: nouveau\n"
    "\tKernel modules: nouveau, nvidia_drm, nvidia\n"
)


def test_nouveau_bound_gpu_and_unprivileged_lspci(tmp_path: Path) -> None:
    got = _codes(tmp_path, NOUVEAU)
    assert got.get("driver.nouveau_conflict") == ["critical"], got
    assert got.get("evidence.partial") == ["info"], got  # no LnkSta/AER lines: said, not silently absent
    root = NOUVEAU.replace("\tCapabilities: <access denied>\n", "")
    root = root.replace("driver in use: nouveau", "driver in use: nvidia")
    got = _codes(tmp_path, root)
    assert "driver.nouveau_conflict" not in got and "evidence.partial" not in got, got
