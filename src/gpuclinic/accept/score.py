"""Pure judgement: measurements + NVML facts + spec rows -> scorecard items.

Why pure: the same functions judge a live run, a CPU run and a simulated scenario, and tests can
check them against hand-computed numbers.  Every threshold comes from ``knowledge/data/accept.json``.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gpuclinic.accept.model import Item, skipped
from gpuclinic.accept.specs import GpuSpec, match_spec, pcie_gbs, threshold, threshold_source
from gpuclinic.facts.gpu import GpuFacts

_RANK = {"pass": 0, "warn": 1, "fail": 2}


@dataclass
class Measurements:
    """What the workload (or the scenario model) measured, keyed by scorecard GPU label."""

    matmul: dict[tuple[str, str], float] = field(default_factory=dict)  # (gpu, dtype) -> TFLOPS
    hbm: dict[str, float] = field(default_factory=dict)  # gpu -> GB/s (read + write)
    pcie: dict[tuple[str, str], float] = field(default_factory=dict)  # (gpu, "h2d"|"d2h") -> GB/s
    p2p: dict[str, tuple[float, bool]] = field(default_factory=dict)  # "0-1" -> (GB/s, peer access)
    allreduce: float | None = None  # bus bandwidth GB/s
    allreduce_ndev: int = 0
    skips: list[dict[str, Any]] = field(default_factory=list)  # {"test", "gpu", "why", ...}

    def skip_why(self, test: str, gpu: str | None = None, **match: Any) -> str | None:
        for s in self.skips:
            if s.get("test") == test and (gpu is None or s.get("gpu") in (gpu, None)) and all(
                    s.get(k, v) == v for k, v in match.items()):
                return str(s.get("why"))
        return None


def ratio_status(ratio: float, warn: str, fail: str) -> str:
    if ratio < threshold(fail):
        return "fail"
    if ratio < threshold(warn):
        return "warn"
    return "pass"


def worst(statuses: Iterable[str]) -> str:
    return max(statuses, key=lambda s: _RANK.get(s, -1), default="pass")


def peer_median(values: list[float]) -> float | None:
    """Median of identical GPUs' values; peers need at least 3 GPUs to outvote one bad one."""
    return statistics.median(values) if len(values) >= 3 else None


def _pct(x: float) -> str:
    return f"{x * 100:.0f}%"


def judge(measured: float, spec: float | None, spec_basis: str, spec_source: str, peers: float | None,
          spec_keys: tuple[str, str] | None, peer_keys: tuple[str, str] = ("peer_warn", "peer_fail"),
          npeers: int = 0) -> tuple[str, float | None, str, str, str]:
    """(status, expected, basis, source, why) from the spec and the peer comparison, worst wins."""
    parts: list[tuple[str, float, str, str, str]] = []
    if spec and spec_keys:
        r = measured / spec
        st = ratio_status(r, *spec_keys)
        why = (f"{_pct(r)} of {spec_basis} (warn < {_pct(threshold(spec_keys[0]))}, fail < "
               f"{_pct(threshold(spec_keys[1]))})")
        parts.append((st, spec, spec_basis, spec_source, why))
    if peers:
        r = measured / peers
        st = ratio_status(r, *peer_keys)
        why = f"{_pct(r)} of the median of {npeers} identical GPUs (fail < {_pct(threshold(peer_keys[1]))})"
        parts.append((st, peers, f"peer median ({npeers} GPUs)", threshold_source(peer_keys[1]), why))
    if not parts:
        return "pass", None, "no spec or peers to compare with", "", "measured only"
    st = worst(p[0] for p in parts)
    chosen = next(p for p in reversed(parts) if p[0] == st) if st != "pass" else parts[0]
    whys = "; ".join(p[4] for p in [chosen] + [p for p in parts if p is not chosen])  # the deciding one first
    return st, round(chosen[1], 1), chosen[2], chosen[3], whys


def _label(g: GpuFacts) -> str:
    return str(g.index)


def _group(gpus: list[GpuFacts]) -> dict[str, list[GpuFacts]]:
    """GPUs by SKU (or NVML name), so peers are identical parts."""
    out: dict[str, list[GpuFacts]] = {}
    for g in gpus:
        sp = match_spec(g.name)
        out.setdefault(sp.sku if sp else (g.name or "?"), []).append(g)
    return out


def score_matmul(gpus: list[GpuFacts], m: Measurements) -> list[Item]:
    items: list[Item] = []
    for _sku, group in _group(gpus).items():
        spec = match_spec(group[0].name)
        dtypes = spec.dtypes() if spec else sorted({d for (_, d) in m.matmul})
        for dt in dtypes:
            vals = [m.matmul[(_label(g), dt)] for g in group if (_label(g), dt) in m.matmul]
            med = peer_median(vals)
            for g in group:
                lab = _label(g)
                iid, title = f"gpu.matmul.{dt}", f"dense matmul {dt}"
                v = m.matmul.get((lab, dt))
                if v is None:
                    items.append(
                        skipped(
                            iid,
                            title,
                            "gpu",
                            m.skip_why("matmul", lab, dtype=dt) or "not measured",
                            lab,
                            "TFLOPS",
                        )
                    )
                    continue
                peak = spec.peak_tflops(dt) if spec else None
                st, exp, basis, src, why = judge(
                    v,
                    peak,
                    f"{spec.sku} dense {dt} peak" if spec else "",
                    spec.source if spec else "",
                    med,
                    ("matmul_spec_warn", "matmul_spec_fail"),
                    npeers=len(vals),
                )
                items.append(Item(iid, title, "gpu", st, lab, round(v, 1), exp, "TFLOPS", basis, src, why))
    return items


def score_hbm(gpus: list[GpuFacts], m: Measurements) -> list[Item]:
    items: list[Item] = []
    for _sku, group in _group(gpus).items():
        spec = match_spec(group[0].name)
        vals = [m.hbm[_label(g)] for g in group if _label(g) in m.hbm]
        med = peer_median(vals)
        for g in group:
            lab = _label(g)
            v = m.hbm.get(lab)
            if v is None:
                items.append(
                    skipped(
                        "gpu.hbm",
                        "memory bandwidth (copy)",
                        "gpu",
                        m.skip_why("hbm", lab) or "not measured",
                        lab,
                        "GB/s",
                    )
                )
                continue
            bw = spec.memory_bandwidth_gbs if spec else None
            st, exp, basis, src, why = judge(
                v,
                bw,
                f"{spec.sku} memory bandwidth" if spec else "",
                spec.source if spec else "",
                med,
                ("hbm_spec_warn", "hbm_spec_fail"),
                npeers=len(vals),
            )
            items.append(
                Item(
                    "gpu.hbm",
                    "memory bandwidth (copy)",
                    "gpu",
                    st,
                    lab,
                    round(v, 1),
                    exp,
                    "GB/s",
                    basis,
                    src,
                    why,
                )
            )
    return items


def link_max(g: GpuFacts, spec: GpuSpec | None) -> tuple[int | None, int | None]:
    """The best link this GPU in this slot can train to (NVML max, else the datasheet)."""
    gen = g.pcie_gen_max or (spec.pcie[0] if spec and spec.pcie else None)
    width = g.pcie_width_max or (spec.pcie[1] if spec and spec.pcie else None)
    return gen, width


def score_pcie(gpus: list[GpuFacts], m: Measurements) -> list[Item]:
    items: list[Item] = []
    for (d, title), g in (
        (dt, g) for dt in (("h2d", "PCIe host->device"), ("d2h", "PCIe device->host")) for g in gpus
    ):
        lab = _label(g)
        spec = match_spec(g.name)
        gen, width = link_max(g, spec)
        exp = pcie_gbs(gen, width)
        iid = f"gpu.pcie.{d}"
        v = m.pcie.get((lab, d))
        if v is None:
            items.append(
                skipped(
                    iid, title, "gpu", m.skip_why("pcie", lab, direction=d) or "not measured", lab, "GB/s"
                )
            )
            continue
        now = (
            f"now Gen{g.pcie_gen} x{g.pcie_width}" if g.pcie_gen and g.pcie_width else "current link unknown"
        )
        if exp is None:
            items.append(
                Item(
                    iid,
                    title,
                    "gpu",
                    "pass",
                    lab,
                    round(v, 1),
                    None,
                    "GB/s",
                    "link generation/width unknown",
                    "",
                    f"measured only ({now})",
                )
            )
            continue
        r = v / exp
        st = ratio_status(r, "pcie_link_warn", "pcie_link_fail")
        why = (
            f"{_pct(r)} of a Gen{gen} x{width} link's {exp:.1f} GB/s per direction ({now}; "
            f"warn < {_pct(threshold('pcie_link_warn'))}, fail < {_pct(threshold('pcie_link_fail'))})"
        )
        items.append(
            Item(
                iid,
                title,
                "gpu",
                st,
                lab,
                round(v, 1),
                round(exp, 1),
                "GB/s",
                f"Gen{gen} x{width} link rate",
                "PCIe base spec: 2.5/5/8/16/32/64 GT/s per lane; 8b/10b to Gen2, 128b/130b from Gen3",
                why,
            )
        )
    return items


def _nvlink_counts(g: GpuFacts) -> tuple[int, int]:
    return sum(1 for x in g.nvlinks if x.active), len(g.nvlinks)


def nvlink_dir_gbs(g: GpuFacts) -> float | None:
    """Per-direction NVLink bandwidth of this GPU with its active links (spec total / 2 x active share)."""
    spec = match_spec(g.name)
    act, tot = _nvlink_counts(g)
    if not spec or not spec.nvlink_total_gbs or not tot or not act:
        return None
    return spec.nvlink_total_gbs / 2 * act / tot


def score_nvlink_state(gpus: list[GpuFacts]) -> list[Item]:
    items = []
    for g in gpus:
        lab = _label(g)
        act, tot = _nvlink_counts(g)
        if not tot:
            items.append(
                skipped("gpu.nvlink", "NVLink links up", "links", "no NVLink reported for this GPU", lab)
            )
            continue
        if g.mig_mode_current:
            st, why = "pass", "MIG mode: links are not used"
        elif act == tot:
            st, why = "pass", "all links active"
        else:
            down = [x.link for x in g.nvlinks if not x.active]
            st, why = "fail", f"link(s) {', '.join(map(str, down))} down while {act} are up"
        items.append(
            Item(
                "gpu.nvlink",
                "NVLink links up",
                "links",
                st,
                lab,
                f"{act}/{tot}",
                f"{tot}/{tot}",
                "links",
                "links the GPU reports",
                "NVML nvmlDeviceGetNvLinkState",
                why,
            )
        )
    return items


def score_p2p(gpus: list[GpuFacts], m: Measurements) -> list[Item]:
    by = {_label(g): g for g in gpus}
    vals = [v for v, _ in m.p2p.values()]
    med = peer_median(vals)
    items: list[Item] = []
    for pair, (v, peer) in sorted(m.p2p.items()):
        a, b = (by.get(x) for x in pair.split("-", 1))
        exp, basis = None, "no link figure"
        if a is not None and b is not None:
            nv = [nvlink_dir_gbs(a), nvlink_dir_gbs(b)]
            if all(nv):
                exp, basis = min(x for x in nv if x), "NVLink per direction (spec total / 2, active links)"
            else:
                spec_a, spec_b = match_spec(a.name), match_spec(b.name)
                la, lb = pcie_gbs(*link_max(a, spec_a)), pcie_gbs(*link_max(b, spec_b))
                if la and lb:
                    exp, basis = min(la, lb), "PCIe link per direction (no NVLink between them)"
        st, expv, basis2, src, why = judge(
            v,
            exp,
            basis,
            "gpu_specs.json nvlink_total_gbs / PCIe link rate",
            med,
            ("p2p_warn", "p2p_fail"),
            npeers=len(vals),
        )
        if not peer:
            st = worst([st, "warn"])
            why = "no peer access (copies bounce through host memory); " + why
        items.append(
            Item(
                "gpu.p2p",
                "GPU<->GPU copy",
                "gpu",
                st,
                pair,
                round(v, 1),
                expv,
                "GB/s",
                basis2,
                src,
                why,
                data={"peer_access": peer},
            )
        )
    if not m.p2p:
        items.append(
            skipped("gpu.p2p", "GPU<->GPU copy", "gpu", m.skip_why("p2p") or "not measured", "all", "GB/s")
        )
    return items


def score_allreduce(gpus: list[GpuFacts], m: Measurements) -> Item:
    iid, title = "gpu.allreduce", "NCCL all-reduce bus bandwidth"
    if m.allreduce is None:
        return skipped(iid, title, "gpu", m.skip_why("allreduce") or "not measured", "all", "GB/s")
    links: list[float] = []
    basis = "slowest link per direction"
    for g in gpus:
        nv = nvlink_dir_gbs(g)
        if nv:
            links.append(nv)
        else:
            pc = pcie_gbs(*link_max(g, match_spec(g.name)))
            if pc:
                links.append(pc)
                basis = "slowest link per direction (PCIe)"
    exp = min(links) if links and len(links) == len(gpus) else None
    st, expv, basis2, src, why = judge(
        m.allreduce,
        exp,
        basis,
        "nccl-tests doc/PERFORMANCE.md (busBw)",
        None,
        ("allreduce_warn", "allreduce_fail"),
    )
    return Item(
        iid,
        title,
        "gpu",
        st,
        "all",
        round(m.allreduce, 1),
        expv,
        "GB/s",
        basis2,
        src,
        f"{m.allreduce_ndev} GPUs; " + why,
    )


def score_gpu_perf(gpus: list[GpuFacts], m: Measurements) -> list[Item]:
    """Every GPU-performance item, in scorecard order."""
    return (
        score_matmul(gpus, m)
        + score_hbm(gpus, m)
        + score_pcie(gpus, m)
        + score_nvlink_state(gpus)
        + score_p2p(gpus, m)
        + [score_allreduce(gpus, m)]
    )


def score_cpu_device(m: Measurements) -> list[Item]:
    """The ``--device cpu`` code-path run: numbers are real, but there is nothing to judge them against."""
    why = "device cpu: the workload's code path on the CPU; no expectation for a CPU"
    items = [
        Item(
            f"gpu.matmul.{dt}",
            f"dense matmul {dt}",
            "gpu",
            "skipped",
            "cpu",
            round(v, 4),
            None,
            "TFLOPS",
            "",
            "",
            why,
        )
        for (lab, dt), v in sorted(m.matmul.items())
        if lab == "cpu"
    ]
    if "cpu" in m.hbm:
        items.append(
            Item(
                "gpu.hbm",
                "memory bandwidth (copy)",
                "gpu",
                "skipped",
                "cpu",
                round(m.hbm["cpu"], 1),
                None,
                "GB/s",
                "",
                "",
                why,
            )
        )
    for s in m.skips:
        if s.get("gpu") in ("cpu", None):
            sid = (
                f"gpu.{s['test']}"
                + (f".{s['dtype']}" if s.get("dtype") else "")
                + (f".{s['direction']}" if s.get("direction") else "")
            )
            items.append(skipped(sid, str(s["test"]), "gpu", str(s["why"]), "cpu"))
    return items
