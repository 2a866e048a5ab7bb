"""NVLink: links down on an NVLink system, and per-link error counters (replay, recovery, CRC, ECC)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpuclinic.accept.specs import match_spec
from gpuclinic.checks import check
from gpuclinic.checks._hw import THRESHOLDS_SOURCE, kernel_lines, readable, ref, threshold
from gpuclinic.checks._kernel import (
    NVLINK_XIDS,
    _base_data,
    _previous_boot_flags,
    _uuid_map,
    gpu_ref,
    kernel_finding,
)
from gpuclinic.facts.kernel import KernelEvent
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.knowledge.codes import finding, severity
from gpuclinic.model import Family, Finding, Severity


@check("nvlink.error", codes=["nvlink.error"], what="NVLink state and error counters")
def nvlink_error(snap: Snapshot) -> Iterable[Finding]:
    out = list(_all_inactive(snap))
    gpus = [g for g in readable(snap) if g.nvlinks]
    if not gpus:
        return out
    max_active = max(sum(1 for link in g.nvlinks if link.active) for g in gpus)
    crc_warn, rep_warn, rec_warn = (
        threshold("nvlink_crc_warn"),
        threshold("nvlink_replay_warn"),
        threshold("nvlink_recovery_warn"),
    )
    for g in gpus:
        if g.mig_mode_current:
            continue  # DCGM ignores link state in MIG mode; links are reconfigured
        ev: list[str] = []
        sev: Severity | None = None
        active = [link for link in g.nvlinks if link.active]
        down = [link for link in g.nvlinks if link.active is False]
        if down and (active or max_active > 0):
            sev = severity("nvlink.error")
            ev.append(
                f"nvlink links down: {', '.join(str(x.link) for x in down)} "
                f"({len(active)} of {len(g.nvlinks)} active; best GPU on this node has {max_active} active)"
            )
        for link in g.nvlinks:
            parts = []
            if (link.replay_errors or 0) >= rep_warn:
                parts.append(f"replay = {link.replay_errors}")
            if (link.recovery_errors or 0) >= rec_warn:
                parts.append(f"recovery = {link.recovery_errors}")
            crc = (link.crc_flit_errors or 0) + (link.crc_data_errors or 0)
            if crc >= crc_warn:
                parts.append(f"crc flit+data = {crc}")
            if (link.ecc_errors or 0) > 0:
                parts.append(f"ecc = {link.ecc_errors}")
            if parts:
                ev.append(f"nvlink {link.link} error counters: {', '.join(parts)}")
                sev = sev or severity("nvlink.error", "counters_only")
        if sev is None:
            continue
        ev.append(
            f"thresholds: replay >= {rep_warn:.0f}, recovery >= {rec_warn:.0f}, CRC >= {crc_warn:.0f} "
            f"(cumulative since driver load; {THRESHOLDS_SOURCE})"
        )
        ev += kernel_lines(
            snap, g.pci_bus_id, ("xid", "nvlink"), xids=(74, 144, 145, 146, 147, 148, 149, 150)
        )
        title = (
            f"GPU {g.index} has NVLink link(s) down"
            if sev == Severity.CRITICAL
            else f"GPU {g.index} NVLink links are logging errors"
        )
        out.append(
            Finding(
                code="nvlink.error",
                severity=sev,
                family=Family.GPU_FAULT,
                title=title,
                evidence=ev,
                gpu=ref(g),
                source="nvml",
                data={"down": [x.link for x in down], "active": len(active), "links": len(g.nvlinks)},
            )
        )
    return out


def _all_inactive(snap: Snapshot) -> Iterable[Finding]:
    """Every NVLink of a GPU down: ``all links are inActive`` (nvidia-smi) on a part whose spec has
    NVLink (SXM/HGX, GB200), or every link ``D`` in ``dcgmi nvlink --link-status`` (DCGM lists only links
    that exist; a missing one is ``_``).

    A PCIe card prints the nvidia-smi line when it has no NVLink bridge, so there only a part that
    always has NVLink (``nvlink_total_gbs`` in gpu_specs.json, form factor not PCIe) is judged."""
    for g in readable(snap):
        if not g.nvlink_all_inactive:
            continue
        spec = match_spec(g.name)
        form = str(spec.row.get("form_factor", "")) if spec else ""
        listed = bool(g.nvlinks) and all(link.active is False for link in g.nvlinks)
        nvlink_part = bool(spec and spec.row.get("nvlink_total_gbs")) and "pcie" not in form.lower()
        if not (listed or nvlink_part):
            continue
        yield finding(
            "nvlink.error",
            title=f"GPU {g.index}{f' ({g.name})' if g.name else ''}: all NVLink links are inactive",
            evidence=[
                f"dcgmi nvlink --link-status: links {', '.join(str(x.link) for x in g.nvlinks)} down"
                if listed
                else "nvidia-smi nvlink: Unable to retrieve NVLink information as all links are inActive",
            ]
            + ([f"{spec.sku}: {spec.row.get('nvlink_total_gbs')} GB/s of NVLink ({form})"] if spec else []),
            gpu=ref(g),
            source="nvml",
            data={"all_inactive": True, "sku": spec.sku if spec else None},
        )


# --------------------------------------------------------------------------------------------------
# nvlink.error (log side)
# --------------------------------------------------------------------------------------------------


_FATAL_LINK = re.compile(r"(?<![Nn]on)(?<![Nn]on-)\b[Ff]atal error detected on link")


def _names_nvlink(e: KernelEvent) -> bool:
    """An Xid whose text names an NVLink link ("NVLink: fatal error detected on link 6"), whatever its
    number: the AWS HyperPod agent documents one as Xid 71, which the catalog knows as a copy-engine error."""
    return e.kind == "xid" and "link" in e.detail and "nvlink" in (e.message or "").lower()


@check("kernel.nvlink", codes=["nvlink.error"], what="NVLink and NVSwitch errors (kernel log)")
def nvlink_errors(snap: Snapshot) -> list[Finding]:
    evs = [
        e
        for e in snap.kernel_events
        if e.kind in ("nvlink", "sxid") or (e.kind == "xid" and (e.xid in NVLINK_XIDS or _names_nvlink(e)))
    ]
    if not evs:
        return []
    uuids = _uuid_map(snap)
    prev = _previous_boot_flags(evs, snap)
    groups: dict[tuple[str, str | None], list[KernelEvent]] = {}
    for e in evs:
        groups.setdefault(("switch" if e.kind == "sxid" else "gpu", e.pci_bus_id), []).append(e)
    out: list[Finding] = []
    for (where, bus), group in groups.items():
        links = sorted({int(lk) for e in group if (lk := e.detail.get("link")) is not None})
        fatal = any(
            e.detail.get("fatal") is True
            or (e.kind == "xid" and e.xid == 74 and "fatal" in (e.message or "").lower())
            or (_names_nvlink(e) and _FATAL_LINK.search(e.message or "") is not None)
            for e in group
        )
        nonfatal_only = all(e.detail.get("fatal") is False for e in group)
        sev = severity("nvlink.error") if fatal else severity("nvlink.error", "non_fatal")
        if nonfatal_only and len(group) < 10:
            sev = severity("nvlink.error", "non_fatal")
        data = _base_data(group)
        data["links"] = links
        data["fatal"] = fatal
        if all(prev.get(id(e)) for e in group):
            sev = (
                severity("nvlink.error", "before_boot")
                if fatal
                else severity("nvlink.error", "before_boot_minor")
            )
            data["previous_boot"] = True
        if where == "switch":
            sxids = sorted({int(e.detail["sxid"]) for e in group if "sxid" in e.detail})
            switches = sorted({int(s) for e in group if (s := e.detail.get("nvswitch")) is not None})
            data["sxids"] = sxids
            data["nvswitches"] = switches
            title = (
                f"NVSwitch {bus} reported {'fatal ' if fatal else ''}SXid "
                + ", ".join(map(str, sxids))
                + (f" on link(s) {', '.join(map(str, links))}" if links else "")
            )
            ref = None
        else:
            xids = sorted({int(x) for e in group if (x := e.xid) is not None})
            data["xids"] = xids
            ref = gpu_ref(snap, bus, uuids)
            label = ref.label() if ref else "A GPU"
            title = (
                f"{label}: {'fatal ' if fatal else ''}NVLink errors"
                + (f" on link(s) {', '.join(map(str, links))}" if links else "")
                + (f" (Xid {', '.join(map(str, xids))})" if xids else "")
            )
        out.append(kernel_finding("nvlink.error", sev, Family.GPU_FAULT, title, group, ref, data))
    return out
