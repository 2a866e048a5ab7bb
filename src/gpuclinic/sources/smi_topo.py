"""``nvidia-smi topo -m``: how GPUs (and NICs) connect, and each GPU's CPU/NUMA affinity.

The matrix names no fault by itself, so it adds notes to the report (which GPU pairs talk over NVLink,
a PCIe switch or the CPU interconnect) rather than GPU facts: it names GPUs only as ``GPU<n>``, which
would not join a table or ``-q`` dump reliably.  Recognising it keeps a pasted matrix from being an
"unrecognised input" error.
"""

from __future__ import annotations

import re

from gpuclinic import lazyre
from gpuclinic.record import field, record
from gpuclinic.sources import sniffgates

# (one pass over the line: the old "(?:\s+(?:GPU\d+|NIC\d+|\S+))*" tried 2^columns splits on each matrix
# row, and the 25-column matrix of 8 GPUs and 17 NICs never finished)
_HEAD_RE = lazyre.compile(r"^[ \t]*GPU0[ \t][^\n]*?CPU Affinity", re.M)
_ROW_RE = lazyre.compile(r"^\s*GPU0\s+X\b", re.M)
_LINK = lazyre.compile(r"^(?:X|SYS|NODE|PHB|PXB|PIX|NV\d+|SOC|N/A)$")
# On a terminal nvidia-smi underlines the header row (ESC[4m ... ESC[0m); pastes keep the escapes, or lose
# only the ESC byte and show "[4m" / "[0m"
_SGR = lazyre.compile(r"\x1b?\[[0-9;]*m")


# legend printed under the matrix by nvidia-smi
_MEANING = {
    "X": "self",
    "SYS": "PCIe + the CPU interconnect between NUMA nodes",
    "NODE": "PCIe + host bridges within a NUMA node",
    "PHB": "PCIe + a host bridge",
    "PXB": "several PCIe bridges",
    "PIX": "one PCIe bridge",
    "NV": "bonded NVLinks",
}


# PCIe distance between a GPU and a NIC, nearest first (the legend's order)
_NIC_RANK = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4}


def _is_nic(name: str) -> bool:
    return name.startswith(("NIC", "mlx")) or "_" in name


@record
class Topology:
    """An ``nvidia-smi topo -m`` matrix: its devices and the link between each pair."""

    devices: list[str] = field(default_factory=list)  # column names: GPU0.., NIC0../mlx5_0..
    links: dict[tuple[str, str], str] = field(default_factory=dict)  # (GPU0, GPU1) -> "NV12"
    cpu_affinity: dict[str, str] = field(default_factory=dict)
    numa_affinity: dict[str, str] = field(default_factory=dict)

    def notes(self) -> list[str]:
        gpus = [d for d in self.devices if d.startswith("GPU")]
        kinds: dict[str, list[str]] = {}
        for (a, b), k in self.links.items():
            if a.startswith("GPU") and b.startswith("GPU") and int(a[3:]) < int(b[3:]):
                kinds.setdefault(k, []).append(f"{a}-{b}")
        parts = []
        for k, pairs in sorted(kinds.items()):
            what = _MEANING.get(k[:2] if k.startswith("NV") else k, "")
            shown = ", ".join(pairs[:4]) + (f" and {len(pairs) - 4} more" if len(pairs) > 4 else "")
            parts.append(f"{k}{f' ({what})' if what else ''}: {shown}")
        out = [
            f"nvidia-smi topo -m: {len(gpus)} GPU(s)" + (f"; GPU pairs {'; '.join(parts)}" if parts else "")
        ]
        if kinds and not any(k.startswith("NV") for k in kinds):
            out.append("no NVLink between the GPUs in this matrix: GPU-to-GPU traffic goes over PCIe")
        aff = [
            f"{g} CPUs {self.cpu_affinity[g]}"
            + (f" (NUMA {self.numa_affinity[g]})" if g in self.numa_affinity else "")
            for g in gpus
            if g in self.cpu_affinity
        ]
        if aff:
            out.append("GPU CPU affinity: " + "; ".join(aff[:16]))
        out.extend(self._nic_notes(gpus))
        return out

    def _nic_notes(self, gpus: list[str]) -> list[str]:
        """Each GPU's nearest NIC; the GPUs whose nearest NIC is beyond their PCIe switch are named."""
        near: dict[str, tuple[str, str]] = {}
        for g in gpus:
            cands = [
                (self.links[(g, n)], n)
                for n in self.devices
                if _is_nic(n) and self.links.get((g, n)) in _NIC_RANK
            ]
            if cands:
                kind, nic = min(cands, key=lambda c: _NIC_RANK[c[0]])
                near[g] = (nic, kind)
        if not near:
            return []
        out = ["GPU nearest NIC: " + "; ".join(f"{g} {n} ({k})" for g, (n, k) in list(near.items())[:16])]
        far = [f"{g} ({k})" for g, (_, k) in near.items() if _NIC_RANK[k] >= _NIC_RANK["PHB"]]
        if far:
            out.append(
                "GPUs with no NIC on their PCIe switch: " + ", ".join(far[:16])
                + ": their inter-node traffic crosses the host bridge or the CPU interconnect "
                "(GPUDirect RDMA slower, or off at NCCL's NCCL_NET_GDR_LEVEL)"
            )
        return out


def _plain(text: str) -> str:
    """``text`` without terminal colour/underline codes (only when it holds one: the test is cheap)."""
    return _SGR.sub("", text) if "[0m" in text or "\x1b[" in text else text


def looks_like(sample: str) -> bool:
    """True for the ``topo -m`` matrix (its header line and a ``GPU0  X`` row)."""
    if sniffgates.SMI_TOPO[0] not in sample:  # ("GPU0": both patterns need it)
        return False
    sample = _plain(sample)
    return bool(_HEAD_RE.search(sample) and _ROW_RE.search(sample))


def parse(text: str) -> Topology:
    topo = Topology()
    lines = _plain(text).splitlines()
    for i, line in enumerate(lines):
        if _HEAD_RE.match(line):
            head = line.split("CPU Affinity")[0].split()
            topo.devices = head
            extra = line.split("CPU Affinity", 1)[1]
            has_numa = "NUMA Affinity" in extra
            for row in lines[i + 1 :]:
                toks = row.split()
                if not toks or toks[0] not in head:
                    if toks and toks[0].startswith("Legend"):
                        break
                    continue
                name, cells = toks[0], toks[1:]
                links = cells[: len(head)]
                if len(links) < len(head) or not all(_LINK.match(x) for x in links):
                    continue
                for other, kind in zip(head, links, strict=True):
                    if other != name and kind != "X":
                        topo.links[(name, other)] = kind
                rest = cells[len(head) :]
                if name.startswith("GPU") and rest:
                    topo.cpu_affinity[name] = rest[0]
                    if has_numa and len(rest) > 1:
                        topo.numa_affinity[name] = rest[1]
            break
    return topo
