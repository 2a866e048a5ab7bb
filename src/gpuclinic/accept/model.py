"""The scorecard: one :class:`Item` per measured or checked thing, and the run around them.

Why a model of its own: an acceptance item is a number against an expectation (spec or peers),
not a diagnosed fault; doctor's findings enter as one ``health`` item.  ``Scorecard.to_dict`` is
the versioned JSON schema ``gpuclinic.accept/1``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ACCEPT_SCHEMA = "gpuclinic.accept/1"
STATUSES = ("pass", "warn", "fail", "skipped")
_RANK = {"skipped": -1, "pass": 0, "warn": 1, "fail": 2}


@dataclass
class Item:
    """One line of the scorecard.

    ``expected`` is the number the status was judged against; ``basis`` says what it is ("spec",
    "peer median", "link Gen5 x16", ...) and ``source`` where it comes from.  ``why`` explains a
    warn/fail/skipped in one line.
    """

    id: str
    title: str
    category: str  # health | network | gpu (measured) | links (NVLink state, read) | burn | host | dcgm
    status: str
    gpu: str | None = None  # "0", "0-1" (a pair), "all", "cpu", None (host items)
    measured: float | str | None = None
    expected: float | str | None = None
    unit: str = ""
    basis: str = ""
    source: str = ""
    why: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"bad status {self.status!r}")

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "id": self.id, "title": self.title, "category": self.category, "gpu": self.gpu,
            "measured": self.measured, "expected": self.expected, "unit": self.unit, "status": self.status,
            "basis": self.basis, "source": self.source, "why": self.why,
        }
        if self.data:
            d["data"] = self.data
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Item:
        return cls(id=d["id"], title=d.get("title", ""), category=d.get("category", ""), status=d["status"],
                   gpu=d.get("gpu"), measured=d.get("measured"), expected=d.get("expected"),
                   unit=d.get("unit", ""), basis=d.get("basis", ""), source=d.get("source", ""),
                   why=d.get("why", ""), data=dict(d.get("data") or {}))

    @property
    def key(self) -> str:
        """Stable identity across runs (for --compare)."""
        return f"{self.id}@{self.gpu}" if self.gpu is not None else self.id


def skipped(id: str, title: str, category: str, why: str, gpu: str | None = None, unit: str = "") -> Item:
    return Item(id=id, title=title, category=category, status="skipped", gpu=gpu, why=why, unit=unit)


@dataclass
class BurnSeries:
    """Per-GPU samples over the burn (for the HTML plots and the burn items)."""

    gpu: str
    t: list[float] = field(default_factory=list)
    sm_clock_mhz: list[float | None] = field(default_factory=list)
    temperature_c: list[float | None] = field(default_factory=list)
    power_w: list[float | None] = field(default_factory=list)
    reasons: list[list[str]] = field(default_factory=list)
    tflops_t: list[float] = field(default_factory=list)
    tflops: list[float] = field(default_factory=list)
    slowdown_temp_c: float | None = None
    sm_clock_max_mhz: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Scorecard:
    items: list[Item] = field(default_factory=list)
    mode: str = "standard"
    hostname: str | None = None
    origin: str = "live"  # live | scenario
    scenario: str | None = None
    backend: str | None = None  # "torch 2.4.0 (cuda)", "simulated", ...
    device: str = "cuda"
    python: str | None = None
    started_at: str | None = None
    elapsed_s: float | None = None
    gpus: list[dict[str, Any]] = field(default_factory=list)  # index, name, bus id, sku
    burn: list[BurnSeries] = field(default_factory=list)
    burn_stopped: str | None = None  # why the burn ended early
    notes: list[str] = field(default_factory=list)
    run_id: int | None = None

    def add(self, item: Item) -> Item:
        self.items.append(item)
        return item

    def summary(self) -> dict[str, Any]:
        counts = {s: sum(1 for i in self.items if i.status == s) for s in STATUSES}
        worst = max((i.status for i in self.items), key=lambda s: _RANK[s], default="skipped")
        verdict = {"fail": "fail", "warn": "warn", "pass": "pass", "skipped": "could not judge"}[worst]
        if worst != "fail" and not self.gpu_judged:
            verdict = "could not judge"
        return {
            "verdict": verdict,
            "counts": counts,
            "exit_code": self.exit_code,
            "gpus_judged": self.gpu_judged,
            "failed": [i.key for i in self.items if i.status == "fail"],
            "warned": [i.key for i in self.items if i.status == "warn"],
        }

    @property
    def gpu_judged(self) -> bool:
        """Whether any GPU or burn item got a verdict: a box whose GPUs could not be measured has
        not passed acceptance, however good its disk."""
        return any(i.category in ("gpu", "burn") and i.status != "skipped" for i in self.items)

    @property
    def exit_code(self) -> int:
        """2 a failure, 3 no GPU item could be judged, 1 a warning, 0 all pass."""
        st = {i.status for i in self.items}
        if "fail" in st:
            return 2
        if not self.gpu_judged:
            return 3
        return 1 if "warn" in st else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": ACCEPT_SCHEMA,
            "mode": self.mode,
            "hostname": self.hostname,
            "origin": self.origin,
            "scenario": self.scenario,
            "backend": self.backend,
            "device": self.device,
            "python": self.python,
            "started_at": self.started_at,
            "elapsed_s": self.elapsed_s,
            "run_id": self.run_id,
            "gpus": self.gpus,
            "items": [i.to_dict() for i in self.items],
            "summary": self.summary(),
            "burn": {"stopped": self.burn_stopped, "series": [b.to_dict() for b in self.burn]},
            "notes": self.notes,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Scorecard:
        sc = cls(
            items=[Item.from_dict(x) for x in d.get("items", [])],
            mode=d.get("mode", "standard"),
            hostname=d.get("hostname"),
            origin=d.get("origin", "live"),
            scenario=d.get("scenario"),
            backend=d.get("backend"),
            device=d.get("device", "cuda"),
            python=d.get("python"),
            started_at=d.get("started_at"),
            elapsed_s=d.get("elapsed_s"),
            gpus=list(d.get("gpus", [])),
            notes=list(d.get("notes", [])),
            run_id=d.get("run_id"),
        )
        burn = d.get("burn") or {}
        sc.burn_stopped = burn.get("stopped")
        sc.burn = [BurnSeries(**s) for s in burn.get("series", [])]
        return sc
