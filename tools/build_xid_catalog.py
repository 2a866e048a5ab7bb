#!/usr/bin/env python3
"""Build ``src/gpuclinic/knowledge/data/xid_catalog.json`` from the research catalog.

Not needed at runtime: the JSON it writes ships with the package.  Run it again when the research
file changes::

    python tools/build_xid_catalog.py [tools/data/xid-catalog.research.json]

The input holds one entry per XID (1-173) gathered from NVIDIA's Xid catalog, the legacy Xid table,
NVSentinel's mapping and fleet tools (each entry names its sources).  This script keeps the fields
gpuclinic uses, and adds the tables that turn NVIDIA's action buckets into steps a person follows,
categories into report families, and the few severity decisions the buckets do not settle.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_IN = ROOT / "tools" / "data" / "xid-catalog.research.json"  # a copy of ../shared/research/xid-catalog.json
OUT = ROOT / "src" / "gpuclinic" / "knowledge" / "data" / "xid_catalog.json"

CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"

# Report family for each catalog category (gpuclinic.model.Family values).
CATEGORY_FAMILY: dict[str, str] = {
    "application": "software",
    "virtualization": "software",
    "pcie_bus": "pcie_power",
    "power": "pcie_power",
    "driver": "gpu_fault",
    "hardware_memory": "gpu_fault",
    "hardware_gpu": "gpu_fault",
    "nvlink": "gpu_fault",
    "c2c_interconnect": "gpu_fault",
    "gsp_firmware": "gpu_fault",
    "copy_engine": "gpu_fault",
    "video_engine": "gpu_fault",
    "security": "gpu_fault",
    "inforom": "gpu_fault",
    "informational": "gpu_fault",
    "unused": "gpu_fault",
    "other": "gpu_fault",
}

# Severity implied by the normalised action: anything that needs a GPU reset, a reboot or a person
# at the machine takes the GPU out of service (critical => "drain").
ACTION_SEVERITY: dict[str, str] = {
    "reset_gpu": "critical",
    "reboot_node": "critical",
    "restart_vm": "critical",
    "drain_and_check_hardware": "critical",
    "drain_and_contact_vendor": "critical",
    "update_driver_firmware": "critical",
    "restart_app": "warning",
    "check_uvm": "warning",
    "contact_support_if_seen": "warning",
    "none": "info",
    "unknown": "warning",
}

# Decisions the action bucket alone gets wrong, each with its reason.
SEVERITY_OVERRIDES: dict[int, tuple[str, str]] = {
    43: ("warning", "the application on that channel was stopped; like Xid 13/31 it is the program's fault "
                    "unless it repeats on one GPU"),
    45: ("warning", "alone it means Fabric Manager or a killed process; after another Xid it is only a "
                    "consequence (the check lowers it to info then)"),
    63: ("warning", "a row was marked for remapping; it takes effect only after a GPU reset"),
    92: ("warning", "a high single-bit ECC rate often precedes uncorrectable errors"),
    94: ("warning", "contained ECC error: the application dies, the GPU keeps serving others"),
    108: ("warning", "NVSentinel treats it as fatal although NVIDIA's bucket is IGNORE"),
    160: ("warning", "NVSentinel treats it as fatal although NVIDIA's bucket is IGNORE"),
    162: ("info", "power smoothing was re-enabled: good news"),
    163: ("warning", "power smoothing disabled: power draw swings reach the facility"),
    164: ("warning", "power smoothing circuitry near end of life"),
    165: ("critical", "power smoothing circuitry exhausted: hardware service needed"),
    166: ("critical", "confidential-computing traffic on an unconfigured NVLink: the GPU must be reset"),
    167: ("critical", "PCIe fatal timeout: the GPU is unreachable until reset"),
    168: ("critical", "reduced memory capacity from errors in the write-protected region"),
    169: ("critical", "SEC2 micro-controller halted: the GPU needs a reset"),
    170: ("warning", "unexpected interrupt in confidential-computing mode"),
    171: ("critical", "uncorrectable DRAM error (companion of Xid 48)"),
    172: ("critical", "uncorrectable SRAM error (companion of Xid 48)"),
    173: ("critical", "chip-to-chip link failed: the superchip cannot work until reset"),
}

# What each NVIDIA resolution bucket asks a person to do (our wording of the catalog's meaning).
IMMEDIATE_STEPS: dict[str, str] = {
    "IGNORE": "No action is needed for this event by itself.",
    "RESTART_APP": "Restart the application that was using the GPU; the GPU itself stays usable.",
    "RESET_GPU": "Stop every process on the GPU and reset it (`nvidia-smi -r -i <index>` as root, with no "
                 "process using it), or reboot the server.",
    "RESTART_BM": "Drain the server and reboot it (power-cycle it if the GPU is still missing afterwards); "
                  "a GPU reset cannot reach a GPU that left the bus.",
    "RESTART_VM": "Restart the virtual machine that owns the GPU.",
    "CONTACT_SUPPORT": "This code is not expected on current GPUs: collect `nvidia-bug-report.sh` output and "
                       "send it to your provider or NVIDIA.",
    "CHECK_MECHANICALS": "Drain the server and check the GPU's auxiliary power cables and seating.",
    "UPDATE_SWFW": "Update the NVIDIA driver and the GPU/VBIOS firmware to a supported pair.",
    "CHECK_UVM": "Check the unified-memory (UVM) module and the application's use of CPU-GPU shared memory.",
    "WORKFLOW_XID_45": "If no other Xid came with it, restart NVIDIA Fabric Manager "
                       "(`systemctl restart nvidia-fabricmanager`); otherwise act on the Xid that caused it.",
    "WORKFLOW_XID_48": "Drain the GPU. If Xid 63 or 64 followed, wait for running jobs to end and reset the GPU "
                       "so the bad row is remapped; if neither followed, run field diagnostics.",
    "WORKFLOW_NVLINK_ERR": "Reset the GPU; if the same link fails again, reseat or replace the NVLink "
                           "bridge/cable or the GPU tray, and run `dcgmi diag -r 3`.",
    "WORKFLOW_NVLINK5_ERR": "Decode the NVLink5 unit and status words with NVIDIA's Xid catalog; fatal "
                            "link errors need a GPU reset, repeated ones a link/cable inspection.",
    "XID_154": "Do what the new recovery action says (none, GPU reset, node reboot, drain peer-to-peer, "
               "or drain and reset).",
}

INVESTIGATORY_STEPS: dict[str, str] = {
    "CONTACT_SUPPORT": "If it happens again, open a ticket with your provider or NVIDIA and attach "
                       "`nvidia-bug-report.sh` output.",
    "INVESTIGATE_SW": "Look for a driver or firmware bug: compare with the driver's release notes and try the "
                      "current recommended driver.",
    "INVESTIGATE_SW_USER": "Check the software that configured the link (Fabric Manager, IMEX, user settings).",
    "CHECK_APP/CUDA": "Check the application and its CUDA version: run it with `compute-sanitizer` or "
                      "`CUDA_LAUNCH_BLOCKING=1` to find the faulting kernel.",
    "IGNORE": "Nothing further to investigate.",
    "IGNORE (sympathetic)": "It follows another error: investigate that one instead.",
    "XID_137_FLOW": "Check NVLink fabric addressing (FLA) setup: Fabric Manager/IMEX and the job's peer mappings.",
    "WORKFLOW_XID_13": "If it repeats on the same GPU (same GPC/TPC) across different programs, run "
                       "`dcgmi diag -r 3` and field diagnostics; if it is one program, debug that program.",
    "WORKFLOW_XID_31": "If MMU faults repeat on the same GPU across different programs, run `dcgmi diag -r 3` "
                       "and field diagnostics; on different GPUs or once, debug the program.",
    "WORKFLOW_XID_48": "If Xid 63/64 did not follow, run field diagnostics; a row-remap failure means RMA.",
    "UPDATE_SWFW": "Use a driver/firmware pair NVIDIA supports for this GPU.",
    "INVESTIGATE_LINK_SI": "Inspect link signal integrity: reseat cables/bridges, check for bent pins.",
    "WORKFLOW_NVLINK5_ERR": "Repeated errors on one link point at the cable, tray or peer device.",
    "SYMPATHETIC_REPORT_SOLO": "Report it only if it appears alone; otherwise follow the other error.",
    "N/A Informational only regarding another Xid": "It reports the recovery action for another Xid.",
    "Solo: RESTART_FM Not Solo: IGNORE (follow other Xid)": "Alone: restart Fabric Manager; with another Xid: "
                                                            "follow that Xid.",
}

# Steps for codes whose NVIDIA buckets are not published yet (newest Xids), by gpuclinic severity.
SEVERITY_STEPS: dict[str, str] = {
    "critical": "Drain the GPU, stop its jobs and reset it (`nvidia-smi -r -i <index>`) or reboot; if it comes "
                "back, send `nvidia-bug-report.sh` output to your provider or NVIDIA.",
    "warning": "Watch whether it repeats; if it does, collect `nvidia-bug-report.sh` output for your provider.",
    "info": "No action is needed for this event by itself.",
}

KEEP = (
    "name", "description", "category", "action", "nvidia_catalog_description", "nvidia_immediate_action",
    "nvidia_investigatory_action", "legacy_name", "legacy_potential_causes", "nvsentinel_action",
    "nvsentinel_fatal", "notes",
)


def build(entries: list[dict[str, Any]]) -> dict[str, Any]:
    xids: list[dict[str, Any]] = []
    for e in sorted(entries, key=lambda x: int(x["xid"])):
        n = int(e["xid"])
        cat = e["category"]
        if cat not in CATEGORY_FAMILY:
            raise SystemExit(f"xid {n}: unknown category {cat!r}: add it to CATEGORY_FAMILY")
        if e["action"] not in ACTION_SEVERITY:
            raise SystemExit(f"xid {n}: unknown action {e['action']!r}: add it to ACTION_SEVERITY")
        out: dict[str, Any] = {"xid": n}
        for k in KEEP:
            if e.get(k) is not None:
                out[k] = e[k]
        sev, why = SEVERITY_OVERRIDES.get(n, (ACTION_SEVERITY[e["action"]], ""))
        out["severity"] = sev
        if why:
            out["severity_reason"] = why
        out["family"] = CATEGORY_FAMILY[cat]
        dt = e.get("fleet_tool_treatment", {}).get("dcgm_health")
        if dt:
            out["dcgm_health"] = dt
        out["source"] = e["source"]
        xids.append(out)
    missing = sorted({x["nvidia_immediate_action"] for x in xids if x.get("nvidia_immediate_action")}
                     - set(IMMEDIATE_STEPS))
    if missing:
        raise SystemExit(f"immediate buckets without steps: {missing}")
    missing = sorted({x["nvidia_investigatory_action"] for x in xids if x.get("nvidia_investigatory_action")}
                     - set(INVESTIGATORY_STEPS))
    if missing:
        raise SystemExit(f"investigatory buckets without steps: {missing}")
    return {
        "schema": "gpuclinic.xid_catalog/1",
        "about": "NVIDIA Xid codes 1-173: meaning, category, NVIDIA's immediate and investigatory action. "
                 "Built by tools/build_xid_catalog.py; each entry names its sources.",
        "catalog_url": CATALOG_URL,
        "category_family": CATEGORY_FAMILY,
        "immediate_steps": IMMEDIATE_STEPS,
        "investigatory_steps": INVESTIGATORY_STEPS,
        "severity_steps": SEVERITY_STEPS,
        "xids": xids,
    }


def main(argv: list[str]) -> int:
    src = Path(argv[1]) if len(argv) > 1 else DEFAULT_IN
    entries = json.loads(src.read_text(encoding="utf-8"))
    data = build(entries)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tmp = OUT.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(OUT)
    print(f"wrote {OUT.relative_to(ROOT)}: {len(data['xids'])} XIDs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
