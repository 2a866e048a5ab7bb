"""NVLink: links down on an NVLink system, and per-link error counters (replay, recovery, CRC, ECC)."""

from __future__ import annotations

from collections.abc import Iterable

from gpuclinic.checks import check
from gpuclinic.checks._hw import THRESHOLDS_SOURCE, kernel_lines, personalize, readable, ref, threshold
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.model import Family, Finding, Severity

_REMEDY = ("Check `nvidia-smi nvlink -s -i <index>` (link state) and `nvidia-smi nvlink -e -i <index>` (error counters); "
           "on NVSwitch systems make sure nvidia-fabricmanager is running (`systemctl status nvidia-fabricmanager`) "
           "and look for SXid lines in `dmesg`. A link that is down or keeps replaying/recovering slows or hangs NCCL: "
           "drain the node, reset the GPU or reboot; if the link stays down or errors return, the GPU/baseboard "
           "needs inspection (RMA via the provider).")


@check("nvlink.error", codes=["nvlink.error"], what="NVLink state and error counters")
def nvlink_error(snap: Snapshot) -> Iterable[Finding]:
    gpus = [g for g in readable(snap) if g.nvlinks]
    if not gpus:
        return []
    max_active = max(sum(1 for link in g.nvlinks if link.active) for g in gpus)
    crc_warn, rep_warn, rec_warn = (threshold("nvlink_crc_warn"), threshold("nvlink_replay_warn"),
                                    threshold("nvlink_recovery_warn"))
    out = []
    for g in gpus:
        if g.mig_mode_current:
            continue  # DCGM ignores link state in MIG mode; links are reconfigured
        ev: list[str] = []
        sev: Severity | None = None
        active = [link for link in g.nvlinks if link.active]
        down = [link for link in g.nvlinks if link.active is False]
        if down and (active or max_active > 0):
            sev = Severity.CRITICAL
            ev.append(f"nvlink links down: {', '.join(str(x.link) for x in down)} "
                      f"({len(active)} of {len(g.nvlinks)} active; best GPU on this node has {max_active} active)")
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
                sev = sev or Severity.WARNING
        if sev is None:
            continue
        ev.append(f"thresholds: replay >= {rep_warn:.0f}, recovery >= {rec_warn:.0f}, CRC >= {crc_warn:.0f} "
                  f"(cumulative since driver load; {THRESHOLDS_SOURCE})")
        ev += kernel_lines(snap, g.pci_bus_id, ("xid", "nvlink"), xids=(74, 144, 145, 146, 147, 148, 149, 150))
        title = (f"GPU {g.index} has NVLink link(s) down" if sev == Severity.CRITICAL
                 else f"GPU {g.index} NVLink links are logging errors")
        out.append(Finding(
            code="nvlink.error", severity=sev, family=Family.GPU_FAULT, title=title, evidence=ev, remedy=_REMEDY,
            gpu=ref(g), source="nvml",
            data={"down": [x.link for x in down], "active": len(active), "links": len(g.nvlinks)},
        ))
    return personalize(out)
