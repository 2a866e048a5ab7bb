"""GPU memory health: ECC counters, row remapping (Ampere+) and page retirement (older GPUs).

NVML state is preferred over log lines here: the counters say what the memory *is*, a log line
only what happened once.  Thresholds live in ``gpu_thresholds.json`` with their sources.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuclinic.checks import check
from gpuclinic.checks._hw import (
    THRESHOLDS_SOURCE,
    kernel_lines,
    median,
    readable,
    ref,
    threshold,
)
from gpuclinic.facts.gpu import GpuFacts
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.knowledge.codes import finding
from gpuclinic.model import Finding

_XID_MEM = ("xid",)
# Xids about GPU memory: DBE, row remap/page retirement event and failure, contained/uncontained ECC
MEM_XIDS = (48, 63, 64, 92, 94, 95, 140)


@check("memory.ecc_uncorrectable", codes=["memory.ecc_uncorrectable"], what="uncorrectable ECC errors")
def ecc_uncorrectable(snap: Snapshot) -> Iterable[Finding]:
    out = []
    for g in readable(snap):
        vol, agg = g.ecc_volatile_uncorrected, g.ecc_aggregate_uncorrected
        if vol:
            ev = [f"ecc.errors.uncorrected.volatile.total = {vol} (since the driver loaded; threshold > 0)"]
            if agg is not None:
                ev.append(f"ecc.errors.uncorrected.aggregate.total = {agg} (lifetime)")
            ev += _remap_lines(g.remapped_rows_pending, g.remapped_rows_uncorrectable)
            ev += kernel_lines(snap, g.pci_bus_id, _XID_MEM, xids=MEM_XIDS)
            out.append(
                finding(
                    "memory.ecc_uncorrectable",
                    title=f"GPU {g.index} had {vol} uncorrectable memory (ECC) error(s) since the driver "
                          "loaded",
                    evidence=ev,
                    gpu=ref(g),
                    data={"volatile": vol, "aggregate": agg},
                    source="nvml",
                )
            )
        elif agg:
            out.append(
                finding(
                    "memory.ecc_uncorrectable",
                    when="aggregate_only",
                    title=f"GPU {g.index} has {agg} uncorrectable ECC error(s) in its lifetime (none since "
                          "the driver loaded)",
                    evidence=[
                        f"ecc.errors.uncorrected.aggregate.total = {agg} (lifetime)",
                        f"ecc.errors.uncorrected.volatile.total = {vol if vol is not None else '?'}",
                    ],
                    gpu=ref(g),
                    data={"volatile": vol, "aggregate": agg},
                    source="nvml",
                )
            )
    return out


def _remap_lines(pending: bool | None, unc: int | None) -> list[str]:
    out = []
    if pending:
        out.append("remapped_rows.pending = yes (applies at the next GPU reset)")
    if unc:
        out.append(f"remapped_rows.uncorrectable = {unc}")
    return out


@check(
    "memory.ecc_correctable_rate", codes=["memory.ecc_correctable_rate"], what="correctable ECC error counts"
)
def ecc_correctable(snap: Snapshot) -> Iterable[Finding]:
    gpus = [g for g in readable(snap) if g.ecc_volatile_corrected is not None]
    warn = threshold("ecc_corrected_volatile_warn")
    factor, floor = threshold("ecc_corrected_peer_factor"), threshold("ecc_corrected_peer_min")
    med = median(float(g.ecc_volatile_corrected or 0) for g in gpus) if len(gpus) >= 3 else None
    out = []
    for g in gpus:
        n = g.ecc_volatile_corrected or 0
        outlier = med is not None and n >= floor and n >= factor * max(med, 1.0)
        if n < warn and not outlier:
            continue
        ev = [f"ecc.errors.corrected.volatile.total = {n} (warn at {warn:.0f}; {THRESHOLDS_SOURCE})"]
        if med is not None:
            ev.append(f"node median of corrected errors = {med:.0f} over {len(gpus)} GPUs")
        if g.ecc_aggregate_corrected is not None:
            ev.append(f"ecc.errors.corrected.aggregate.total = {g.ecc_aggregate_corrected} (lifetime)")
        ev += _remap_lines(g.remapped_rows_pending, None)
        out.append(
            finding(
                "memory.ecc_correctable_rate",
                title=f"GPU {g.index} has many corrected memory errors ({n} since the driver loaded)",
                evidence=ev,
                gpu=ref(g),
                data={"volatile": n, "node_median": med},
                source="nvml",
            )
        )
    return out


@check(
    "memory.row_remap",
    codes=["memory.row_remap_pending", "memory.row_remap_failed", "memory.row_remap_spares_low"],
    what="HBM row remapping",
)
def row_remap(snap: Snapshot) -> Iterable[Finding]:
    out = []
    limit = threshold("remapped_rows_max")
    warn_unc = threshold("remapped_rows_uncorrectable_warn")
    for g in readable(snap):
        counts = (
            f"remapped_rows.correctable = {g.remapped_rows_correctable}, "
            f"remapped_rows.uncorrectable = {g.remapped_rows_uncorrectable}"
        )
        if g.remapped_rows_failure:
            title = f"GPU {g.index}: HBM row remapping failed (no spare rows left): RMA condition"
            out.append(_flagged(snap, g, "memory.row_remap_failed", "remapped_rows.failure", counts, title))
        elif g.memory_unrepairable:  # 575+ drivers: the memory repair ran out (the same RMA condition)
            title = f"GPU {g.index}: the driver reports memory it cannot repair (Unrepairable Memory): RMA"
            out.append(_flagged(snap, g, "memory.row_remap_failed", "ecc.unrepairable_memory", counts, title))
        elif g.remapped_rows_pending:
            title = f"GPU {g.index}: an HBM row is waiting to be remapped; reset the GPU when convenient"
            out.append(_flagged(snap, g, "memory.row_remap_pending", "remapped_rows.pending", counts, title))
        elif g.memory_repair_pending or g.tpc_repair_pending:  # 575+: a channel/TPC repair waits for a reset
            what = "channel" if g.memory_repair_pending else "TPC"
            title = f"GPU {g.index}: a {what} repair is waiting for a GPU reset; reset it when convenient"
            flag = "ecc.channel_repair_pending" if g.memory_repair_pending else "ecc.tpc_repair_pending"
            out.append(_flagged(snap, g, "memory.row_remap_pending", flag, counts, title))
        unc = g.remapped_rows_uncorrectable
        if unc is not None and unc >= warn_unc and not g.remapped_rows_failure:
            out.append(
                finding(
                    "memory.row_remap_spares_low",
                    title=f"GPU {g.index} has used {unc} of {limit:.0f} row remaps for uncorrectable errors",
                    evidence=[counts, f"warn at {warn_unc:.0f}, limit {limit:.0f} ({THRESHOLDS_SOURCE})"],
                    gpu=ref(g),
                    data={"uncorrectable": unc},
                    source="nvml",
                )
            )
    return out


def _flagged(snap: Snapshot, g: GpuFacts, code: str, flag: str, counts: str, title: str) -> Finding:
    """A memory repair NVML flags as failed or pending: the flag, the counters and the GPU's memory Xids."""
    evidence = [f"{flag} = yes", counts] + kernel_lines(snap, g.pci_bus_id, _XID_MEM, xids=MEM_XIDS)
    return finding(code, title=title, evidence=evidence, gpu=ref(g), source="nvml")


@check(
    "memory.retired_pages",
    codes=["memory.retired_pages_pending", "memory.retired_pages"],
    what="retired memory pages (pre-Ampere)",
)
def retired_pages(snap: Snapshot) -> Iterable[Finding]:
    out = []
    crit, dbe_crit = threshold("retired_pages_critical"), threshold("retired_pages_dbe_critical")
    for g in readable(snap):
        sbe, dbe = g.retired_pages_sbe or 0, g.retired_pages_dbe or 0
        counts = f"retired_pages.sbe = {g.retired_pages_sbe}, retired_pages.dbe = {g.retired_pages_dbe}"
        if g.retired_pages_pending:
            title = f"GPU {g.index}: memory pages are waiting to be retired; reload the driver or reboot"
            out.append(
                _flagged(snap, g, "memory.retired_pages_pending", "retired_pages.pending", counts, title)
            )
        if sbe + dbe >= crit or dbe > dbe_crit:
            out.append(
                finding(
                    "memory.retired_pages",
                    title=f"GPU {g.index} has retired {sbe + dbe} memory pages ({dbe} for double-bit errors)",
                    evidence=[
                        counts,
                        f"fail at >= {crit:.0f} total or > {dbe_crit:.0f} DBE pages ({THRESHOLDS_SOURCE})",
                    ],
                    gpu=ref(g),
                    data={"sbe": sbe, "dbe": dbe},
                    source="nvml",
                )
            )
    return out
