"""What the fleet view knows about each node, how nodes rank, and the ``gpuclinic.fleet/1`` JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCHEMA = "gpuclinic.fleet/1"
VERDICTS = ("healthy", "warning", "drain")
#: worst first: a node to drain, then one we cannot see (unknown is not healthy), then warnings
RANK = {"drain": 0, "unreachable": 1, "unknown": 2, "warning": 3, "healthy": 4}
_SEV = {"critical": 0, "warning": 1, "info": 2}


@dataclass
class FleetIncident:
    code: str
    severity: str
    gpu: str | None = None  # index as text (Prometheus labels), None for node-wide
    age_s: float | None = None
    family: str | None = None

    def to_dict(self) -> dict[str, Any]:
        gpu: Any = int(self.gpu) if self.gpu is not None and self.gpu.isdigit() else self.gpu
        return {"code": self.code, "severity": self.severity, "gpu": gpu, "family": self.family,
                "age_s": None if self.age_s is None else round(self.age_s)}


@dataclass
class Trends:
    """Increases over the window; None when the node does not export the counter."""

    ecc_corrected: float | None = None
    remapped_rows: float | None = None
    pcie_replays: float | None = None
    throttle_s: float | None = None
    xids_per_day: float | None = None

    def degrading(self) -> list[str]:
        return [k for k, v in self.to_dict().items() if v]

    def to_dict(self) -> dict[str, Any]:
        return {k: (None if v is None else round(v, 2)) for k, v in self.__dict__.items()}


@dataclass
class NodeView:
    node: str
    address: str | None = None
    verdict: str = "unknown"  # healthy | warning | drain | unreachable | unknown
    error: str | None = None  # why unreachable/unknown
    incidents: list[FleetIncident] = field(default_factory=list)
    gpus_seen: int | None = None
    gpus_expected: int | None = None
    trends: Trends = field(default_factory=Trends)
    idle_gpu_hours: float | None = None
    idle_cost: float | None = None
    interruptions: int | None = None
    goodput: float | None = None  # 0..1 over the ledger window
    room: dict[str, Any] | None = None

    def room_faults(self) -> int:
        r = self.room or {}
        return (
            int(r.get("fans_failed") or 0)
            + int(r.get("psus_failed") or 0)
            + (1 if r.get("bmc_up") is False else 0)
        )

    def sort_key(self) -> tuple[Any, ...]:
        crit = sum(1 for i in self.incidents if i.severity == "critical")
        missing = max(0, (self.gpus_expected or 0) - (self.gpus_seen or 0))
        return (
            RANK.get(self.verdict, 2),
            -crit,
            -missing,
            -len(self.incidents),
            -self.room_faults(),
            -len(self.trends.degrading()),
            -(self.idle_gpu_hours or 0.0),
            self.node,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "address": self.address,
            "verdict": self.verdict,
            "error": self.error,
            "incidents": [
                i.to_dict()
                for i in sorted(self.incidents, key=lambda i: (_SEV.get(i.severity, 3), i.gpu or "", i.code))
            ],
            "gpus_seen": self.gpus_seen,
            "gpus_expected": self.gpus_expected,
            "trends": self.trends.to_dict(),
            "degrading": self.trends.degrading(),
            "idle_gpu_hours": None if self.idle_gpu_hours is None else round(self.idle_gpu_hours, 2),
            "idle_cost": None if self.idle_cost is None else round(self.idle_cost, 2),
            "interruptions": self.interruptions,
            "goodput": None if self.goodput is None else round(self.goodput, 4),
            "room": self.room,
        }


@dataclass
class Fleet:
    source: str
    window_s: float
    nodes: list[NodeView]
    generated_at: float
    price_per_gpu_hour: float | None = None
    took_s: float | None = None

    def sorted_nodes(self) -> list[NodeView]:
        return sorted(self.nodes, key=NodeView.sort_key)

    def summary(self) -> dict[str, Any]:
        by = {v: 0 for v in (*VERDICTS, "unreachable", "unknown")}
        for n in self.nodes:
            by[n.verdict] = by.get(n.verdict, 0) + 1
        idle = [n.idle_gpu_hours for n in self.nodes if n.idle_gpu_hours is not None]
        seen = [n.gpus_seen for n in self.nodes if n.gpus_seen is not None]
        exp = [n.gpus_expected for n in self.nodes if n.gpus_expected is not None]
        codes: dict[str, int] = {}
        for n in self.nodes:
            for i in n.incidents:
                codes[i.code] = codes.get(i.code, 0) + 1
        wall_good = [(n.goodput, n.interruptions) for n in self.nodes if n.goodput is not None]
        out: dict[str, Any] = {
            "nodes": len(self.nodes),
            "by_verdict": by,
            "drain": [n.node for n in self.sorted_nodes() if n.verdict == "drain"],
            "unreachable": [n.node for n in self.sorted_nodes() if n.verdict == "unreachable"],
            "gpus_seen": sum(seen),
            "gpus_expected": sum(exp),
            "incidents_by_code": dict(sorted(codes.items(), key=lambda kv: (-kv[1], kv[0]))),
            "degrading_nodes": sum(1 for n in self.nodes if n.trends.degrading()),
            "idle_gpu_hours": round(sum(idle), 2) if idle else None,
            "interruptions": sum(n.interruptions or 0 for n in self.nodes),
            "mean_goodput": round(sum(g for g, _ in wall_good) / len(wall_good), 4) if wall_good else None,
        }
        if self.price_per_gpu_hour is not None and idle:
            out["idle_cost"] = round(sum(idle) * self.price_per_gpu_hour, 2)
            out["price_per_gpu_hour"] = self.price_per_gpu_hour
        return out

    def exit_code(self) -> int:
        """2 when a node should be drained, 1 for warnings or nodes we cannot see, else 0."""
        vs = {n.verdict for n in self.nodes}
        if "drain" in vs:
            return 2
        return 1 if vs & {"warning", "unreachable", "unknown"} else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "source": self.source,
            "generated_at": self.generated_at,
            "window_s": self.window_s,
            "took_s": None if self.took_s is None else round(self.took_s, 3),
            "nodes": [n.to_dict() for n in self.sorted_nodes()],
            "summary": self.summary(),
        }


def verdict_name(v: float | int | None) -> str:
    if v is None:
        return "unknown"
    i = int(round(float(v)))
    return VERDICTS[i] if 0 <= i < len(VERDICTS) else "unknown"
