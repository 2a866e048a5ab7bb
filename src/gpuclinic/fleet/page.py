"""The fleet page of an agent given peers (`watch --peers`): this node plus the peers' APIs, cached.

The agent answers for itself from memory and asks each peer like `fleet --agents` does, at most
once per ``CACHE_S`` however often the page refreshes, so a dashboard left open cannot turn into a
request storm across the fleet.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from gpuclinic.fleet.agents import collect, parse_agents
from gpuclinic.fleet.model import Fleet, FleetIncident, NodeView, verdict_name

if TYPE_CHECKING:
    from gpuclinic.watch.agent import Agent

CACHE_S = 10.0


def self_view(agent: Agent, now: float) -> NodeView:
    st = agent.status_snapshot()
    n = NodeView(node=str(agent.host), address="this agent", verdict=verdict_name(st.verdict_code))
    n.gpus_seen = sum(1 for g in st.gpus if not g.lost)
    n.gpus_expected = st.gpus_expected
    for ev in st.open_events:
        sev = ev.severity.label
        if sev not in ("critical", "warning"):
            continue
        gpu = None if ev.gpu is None else str(ev.gpu)
        if not any(i.code == ev.code and i.gpu == gpu for i in n.incidents):
            n.incidents.append(
                FleetIncident(code=ev.code, severity=sev, gpu=gpu, age_s=max(0.0, st.now - ev.opened))
            )
    return n


class FleetPage:
    def __init__(self, agent: Agent, peers: list[str], token: str | None, timeout_s: float = 3.0) -> None:
        self.agent = agent
        self.peers = parse_agents(peers)
        self.token = token
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._at = 0.0
        self._doc: dict[str, Any] | None = None

    def json(self) -> dict[str, Any]:
        with self._lock:
            if self._doc is None or time.monotonic() - self._at > CACHE_S:
                now = time.time()
                peers = collect(self.peers, token=self.token, timeout_s=self.timeout_s, now=now)
                fleet = Fleet(
                    source=f"{self.agent.host} and {len(self.peers)} peers",
                    window_s=0.0,
                    nodes=[self_view(self.agent, now), *peers.nodes],
                    generated_at=now,
                    took_s=peers.took_s,
                )
                self._doc = fleet.to_dict()
                self._at = time.monotonic()
            return self._doc
