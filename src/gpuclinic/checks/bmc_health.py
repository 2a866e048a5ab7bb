"""What the BMC says about the health of the server's parts (Redfish ``Status`` of systems, chassis, GPUs,
processors, memory, drives, adapters, and the service's open conditions).

The air, fans, power supplies and sensors have checks of their own (``checks/room.py``); this one reads
:class:`~gpuclinic.facts.room.ComponentHealth`.  A part rated Warning or Critical in its own ``Health`` is a
finding (a GPU under ``room.gpu_unhealthy``).  A ``HealthRollup`` or a service condition only says that
something below is wrong: when the sensor, PSU or part it names is judged already, it adds nothing and is
left out; otherwise those are gathered into one finding, so a fault is said once and never dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpuclinic.checks import CheckSkipped, check
from gpuclinic.facts import room as R
from gpuclinic.facts.room import name_key
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.knowledge.codes import finding
from gpuclinic.model import Finding

_BAD = ("warning", "critical")
_COND = R.CONDITION
_RANK = {None: 0, "ok": 0, "warning": 1, "critical": 2}


def _worst(*levels: str | None) -> str | None:
    return max(levels, key=lambda v: _RANK.get(v, 0))


def _judged(room: R.RoomFacts) -> set[str]:
    """The names of the sensors, PSUs and parts other checks (or this one, by their own Health) report."""
    out = {name_key(s.name) for s in room.sensors if s.level not in ("ok", "unknown")}
    out |= {name_key(s.number) for s in room.sensors if s.number and s.level not in ("ok", "unknown")}
    out |= {name_key(p.name) for p in room.psus if p.health in _BAD or p.failed or p.predictive_failure}
    bad = [c for c in room.components if c.health in _BAD and c.kind != _COND]
    out |= {name_key(c.name.rsplit(" ", 1)[-1]) for c in bad}
    return out - {""}


def _explained(target: str, judged: set[str]) -> bool:
    """Whether the part a condition or rollup names (the last element of its URI) is reported already."""
    k = name_key(target)
    return bool(k) and any(k == j or (len(j) > 3 and (j in k or k in j)) for j in judged)


def _label(c: R.ComponentHealth) -> str:
    if c.gpu:
        name = c.name.removeprefix("Processor ")
        return name if name.lower().startswith("gpu") else f"GPU {name}"
    return c.name if c.kind == _COND or c.name.startswith(c.kind) else f"{c.kind} {c.name}"


def _message(condition: str) -> str:
    """A condition line without its severity and the URI it ends with (both shown in the evidence)."""
    text = re.sub(r"\s*\(/redfish/[^)]*\)\s*$", "", condition)
    return re.sub(r"^(?:OK|Warning|Critical):\s*", "", text)


def _status_line(c: R.ComponentHealth) -> str:
    return (
        f"{c.source or 'redfish'}: Health {c.health or '-'}, HealthRollup {c.rollup or '-'}, "
        f"State {c.state or '-'}"
    )


@check(
    "room.components",
    codes=["room.component_unhealthy", "room.gpu_unhealthy"],
    what="BMC health of the server's parts (Redfish: systems, GPUs, memory, drives ...)",
)
def components(snap: Snapshot) -> Iterable[Finding]:
    room = snap.room
    if room is None or not room.components:
        raise CheckSkipped("no part health from a BMC (Redfish systems, processors, memory ...)")
    out: list[Finding] = []
    for c in room.components:
        if c.kind == _COND or c.health not in _BAD:
            continue
        code = "room.gpu_unhealthy" if c.gpu else "room.component_unhealthy"
        state = f" (State {c.state})" if c.state and c.state != "Enabled" else ""
        out.append(
            finding(
                code,
                when="warning" if c.health == "warning" else None,
                title=f"The BMC rates {_label(c)} {c.health.capitalize()}{state}",
                evidence=[_status_line(c), *c.conditions],
                data={"component": c.name, "kind": c.kind, "health": c.health, "rollup": c.rollup},
            )
        )
    out += _below(room)
    return out


def _below(room: R.RoomFacts) -> list[Finding]:
    """The rollups and service conditions that name nothing reported already, as one finding."""
    judged = _judged(room)
    rest = [
        c
        for c in room.components
        if (c.kind == _COND and c.health in _BAD and not _explained(c.name, judged))
        or (c.kind != _COND and c.health not in _BAD and c.rollup in _BAD)
    ]
    conditions: list[str] = []
    for c in rest:
        conditions += [x for x in c.conditions if x not in conditions]
    # a rollup whose every condition names a part judged already says nothing new
    told = [x for x in conditions if not _explained(_origin_of(x), judged)]
    rollups = [c for c in rest if c.kind != _COND]
    if not told and (conditions or not rollups):
        return []
    worst = _worst(*(c.health if c.kind == _COND else c.rollup for c in rest))
    names = ", ".join(_label(c) for c in rest[:4]) + (" ..." if len(rest) > 4 else "")
    return [
        finding(
            "room.component_unhealthy",
            when="warning" if worst == "warning" else None,
            title=(
                f"The BMC reports a {(worst or 'warning').capitalize()} below {names}"
                if rollups
                else f"The BMC lists {len(rest)} open condition{'s' if len(rest) > 1 else ''}"
            )
            + (f": {_message(told[0])}" if told else " (it names no cause)"),
            evidence=[_status_line(c) for c in rollups] + (told or conditions),
            data={"components": [c.name for c in rest], "rollup": worst},
        )
    ]


def _origin_of(condition: str) -> str:
    """The last element of the URI a condition line ends with, "(/redfish/v1/.../CPU1Temp)" -> CPU1Temp."""
    m = re.search(r"\((/redfish/[^)]*)\)\s*$", condition)
    return m.group(1).rstrip("/").rsplit("/", 1)[-1] if m else ""
