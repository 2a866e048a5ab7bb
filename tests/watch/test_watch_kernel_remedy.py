"""watch's kernel-log conditions advise exactly what the code's runbook says, with the code's severity."""

from __future__ import annotations

import pytest

from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.knowledge import codes as K
from gpuclinic.knowledge.runbooks import first_step, get
from gpuclinic.model import GpuRef
from gpuclinic.watch.kernel import LineParser, condition_for

BUS = "0000:17:00.0"


def _parsed(line: str) -> KernelEvent:
    """A line as the kernel-log parser reads it (watch and doctor share that reading)."""
    (ev,) = LineParser().feed([line])
    return ev


GPUS: dict[str, tuple[int, str | None]] = {BUS: (2, "GPU-2b3c")}
EVENTS = [
    (KernelEvent(kind="fallen_off_bus", line="NVRM: GPU 0000:17:00.0: GPU has fallen off the bus.",
                 pci_bus_id=BUS), "gpu.fallen_off_bus", None),
    (_parsed("pcieport 0000:17:00.0: AER: Corrected error received: 0000:17:00.0"),
     "pcie.aer_corrected", "few"),
    (_parsed("pcieport 0000:17:00.0: AER: Uncorrected (Fatal) error received: 0000:17:00.0"),
     "pcie.aer_uncorrected", None),
    (_parsed("pcieport 0000:17:00.0: AER: Uncorrected (Non-Fatal) error received: 0000:17:00.0"),
     "pcie.aer_uncorrected", "non_fatal"),
    (KernelEvent(kind="gsp", line="NVRM: _kgspRpcRecvPoll: GSP RPC timeout", pci_bus_id=BUS),
     "gsp.error", None),
    (KernelEvent(kind="xid", line="NVRM: Xid (PCI:0000:17:00): 79, pid=1234, GPU has fallen off the bus.",
                 xid=79, pci_bus_id=BUS), "xid.79", "catalog"),
]


@pytest.mark.parametrize(("ev", "code", "when"), EVENTS, ids=[c for _, c, _ in EVENTS])
def test_watch_remedy_is_the_runbooks_first_step(ev: KernelEvent, code: str, when: str | None) -> None:
    c = condition_for(ev, GPUS, 60.0)
    assert c is not None and c.code == code and c.gpu == 2
    gpu = GpuRef(index=2, pci_bus_id=BUS, uuid="GPU-2b3c")
    step = first_step(code, gpu)
    rb = get(code)
    assert rb is not None and step and rb.steps[0].do.split("{")[0][:30] in step
    # the runbook's first step, filled in for this GPU, then where the rest is: no text of watch's own
    assert c.remedy == f"{step} All steps: `gpuclinic runbook {code} --gpu 2`."
    if when != "catalog":
        assert c.severity == K.severity(code, when)


def test_an_aer_recovery_report_is_no_error_in_watch_or_doctor() -> None:
    """'device recovery successful' follows an AER error; neither doctor nor watch calls it one."""
    from gpuclinic.checks.pcie import aer_errors
    from gpuclinic.facts.snapshot import Snapshot

    ev = _parsed("pcieport 0000:17:00.0: AER: device recovery successful")
    assert condition_for(ev, GPUS, 60.0) is None
    assert aer_errors(Snapshot(kernel_events=[ev], kernel_log_read=True)) == []
