"""GSP firmware detector: GSP RPC timeouts and firmware errors in the kernel log (Xid 119/120 class)."""

from __future__ import annotations

from collections import Counter

from gpuclinic.checks import check
from gpuclinic.checks._kernel import (
    _base_data,
    _by_bus,
    _previous_boot_flags,
    _uuid_map,
    gpu_ref,
    kernel_finding,
    sole_gpu_bus,
)
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.knowledge.codes import severity
from gpuclinic.model import Family, Finding

# --------------------------------------------------------------------------------------------------
# gsp.error
# --------------------------------------------------------------------------------------------------


@check("kernel.gsp", codes=["gsp.error"], what="GSP firmware errors (kernel log)")
def gsp_error(snap: Snapshot) -> list[Finding]:
    gsp = [e for e in snap.kernel_events if e.kind == "gsp" or (e.kind == "xid" and e.xid in (119, 120))]
    if not gsp:
        return []
    uuids = _uuid_map(snap)
    prev = _previous_boot_flags(gsp, snap)
    by_bus = _by_bus(gsp)
    only = sole_gpu_bus(snap) if None in by_bus else None
    if only:
        # GSP lines that name no GPU ("Cannot initialize GSP firmware RM", a CrashCat report header) on a
        # log whose driver lines name one GPU only: they are that GPU's, not a second GPU's fault
        by_bus.setdefault(only, [])[:0] = by_bus.pop(None)
    out: list[Finding] = []
    for bus, group in by_bus.items():
        kinds = Counter(
            "rpc_timeout" if e.xid == 119 else "error" if e.xid == 120 else str(e.detail.get("gsp"))
            for e in group
        )
        serious = {"rpc_timeout", "error", "crash", "heartbeat", "init", "xid_report"} & set(kinds)
        if not serious:
            continue  # RPC history dumps alone are context, not a fault
        sev = severity("gsp.error")
        data = _base_data(group)
        data["kinds"] = dict(kinds)
        inst = sorted({int(i) for e in group if (i := e.detail.get("gpu_instance")) is not None})
        if inst:
            data["driver_gpu_numbers"] = inst
        if all(prev.get(id(e)) for e in group):
            sev = severity("gsp.error", "before_boot")
            data["previous_boot"] = True
        ref = gpu_ref(snap, bus, uuids)
        label = ref.label() if ref else ("GPU" + (f" (driver GPU{inst[0]})" if inst else ""))
        what = (
            "stopped answering the driver (RPC timeout)"
            if "rpc_timeout" in kinds
            else "crashed"
            if "crash" in kinds
            else "missed its heartbeat"
            if "heartbeat" in kinds
            else "failed to start"
            if "init" in kinds
            else "reported an error"
        )
        xids = sorted({int(x) for e in group if (x := e.xid) is not None})
        if xids:
            data["xids"] = xids
        title = f"{label}: the GPU System Processor (GSP firmware) {what}"
        out.append(kernel_finding("gsp.error", sev, Family.GPU_FAULT, title, group, ref, data))
    return out
