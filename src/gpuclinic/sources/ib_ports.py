"""InfiniBand/RoCE port listings as users paste them: ``ibstat``, ``ibstatus``, ``ibv_devinfo`` and
``rdma link``.

Why a reader and not only signatures: a paste of healthy ports must be *read* (doctor says what it saw,
not "not recognised"), and a port's rate means something only against its adapter's maximum, which sits
lines above it (``CA type: MT4129``).  The port states that are faults (Down/Polling/Disabled, Init) are
judged by the error signatures ``fabric.ib_port_down``/``fabric.ib_port_init`` on the same lines; this
reader adds the rate check (``fabric.ib_rate_degraded``, thresholds in ``knowledge/data/hca_specs.json``)
and a note listing every port read.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import Any

from gpuclinic import lazyre
from gpuclinic.facts.evidence import Signal
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.knowledge import load_data
from gpuclinic.record import record

RATE_CODE = "fabric.ib_rate_degraded"
MAX_BLOCK = 200  # key: value lines of one adapter's block (ibv_devinfo -v: ~60 plus ~30 a port)
MAX_NOTE_PORTS = 16

_IBSTAT_CA = lazyre.compile(r"^\s*CA '([^']+)'\s*$")
_IBSTATUS = lazyre.compile(r"^\s*Infiniband device '([^']+)' port (\d+) status:\s*$")
_DEVINFO = lazyre.compile(r"^\s*hca_id:\s*(\S+)\s*$")
_RDMA_LINK = lazyre.compile(
    r"^\s*link (\S+)/(\d+)\b.*?\bstate (\w+) physical_state (\w+)", need="physical_state"
)
_KV = lazyre.compile(r"^\s*([A-Za-z_][A-Za-z0-9_ ]{0,30}?)\s*:\s*(.*?)\s*$")
_NUM = lazyre.compile(r"(\d+(?:\.\d+)?)")


@record
class IbPort:
    """One port as a listing shows it (states lower-case, without the numbers ibstatus/ibv_devinfo add)."""

    ca: str
    port: str
    lineno: int  # 1-based line of the port's state (or header)
    state: str = ""
    phys: str = ""
    rate_gbps: float | None = None
    link_layer: str = ""
    ca_type: str = ""


def _word(value: str) -> str:
    """'4: ACTIVE' -> 'active', 'PORT_ACTIVE (4)' -> 'active', 'LINK_UP (5)' -> 'linkup'."""
    v = value.split(":", 1)[1] if ":" in value else value
    v = v.split("(", 1)[0].strip().lower()
    return v.removeprefix("port_").replace("_", "")


def _rate(value: str) -> float | None:
    m = _NUM.search(value)
    return float(m.group(1)) if m else None


def _block(lines: list[str], k: int) -> list[tuple[int, str, str]]:
    """The key: value lines after header line ``k`` (0-based), as (0-based index, key, value)."""
    out: list[tuple[int, str, str]] = []
    for j in range(k + 1, min(len(lines), k + 1 + MAX_BLOCK)):
        ln = lines[j]
        if not ln.strip() or _IBSTAT_CA.match(ln) or _IBSTATUS.match(ln) or _DEVINFO.match(ln):
            break
        m = _KV.match(ln)
        if m is None:
            break
        out.append((j, m.group(1).strip(), m.group(2)))
    return out


def _ibstat(ca: str, kv: list[tuple[int, str, str]]) -> list[IbPort]:
    ports: list[IbPort] = []
    ca_type = ""
    for j, key, val in kv:
        if key == "CA type":
            ca_type = val.strip()
        elif key.startswith("Port ") and key[5:].isdigit():
            ports.append(IbPort(ca=ca, port=key[5:], lineno=j + 1, ca_type=ca_type))
        elif ports and key == "State":
            ports[-1].state, ports[-1].lineno = _word(val), j + 1
        elif ports and key == "Physical state":
            ports[-1].phys = _word(val)
        elif ports and key == "Rate":
            ports[-1].rate_gbps = _rate(val)
        elif ports and key == "Link layer":
            ports[-1].link_layer = val.strip()
    return ports


def _ibstatus(ca: str, port: str, k: int, kv: list[tuple[int, str, str]]) -> IbPort:
    p = IbPort(ca=ca, port=port, lineno=k + 1)
    for j, key, val in kv:
        if key == "state":
            p.state, p.lineno = _word(val), j + 1
        elif key == "phys state":
            p.phys = _word(val)
        elif key == "rate":
            p.rate_gbps = _rate(val)
        elif key == "link_layer":
            p.link_layer = val.strip()
    return p


def _devinfo(ca: str, kv: list[tuple[int, str, str]]) -> list[IbPort]:
    ports: list[IbPort] = []
    ca_type = ""
    for j, key, val in kv:
        if key == "vendor_part_id" and val.strip().isdigit():
            ca_type = "MT" + val.strip()
        elif key == "port" and val.strip().isdigit():
            ports.append(IbPort(ca=ca, port=val.strip(), lineno=j + 1, ca_type=ca_type))
        elif ports and key == "state":
            ports[-1].state, ports[-1].lineno = _word(val), j + 1
        elif ports and key == "phys_state":
            ports[-1].phys = _word(val)
        elif ports and key == "link_layer":
            ports[-1].link_layer = val.strip()
    return ports


def parse(lines: list[str], where: Iterable[int] | None = None) -> tuple[list[IbPort], list[int]]:
    """The ports of every listing in ``lines`` and the 1-based lines used.  ``where``: the 0-based lines
    holding a ``segment_readers.IB_KEYS`` literal; the headers are looked for up to 2 lines above them."""
    if where is None:
        cand: Iterable[int] = range(len(lines))
    else:
        cand = sorted({j for k in where for j in (k - 2, k - 1, k) if 0 <= j < len(lines)})
    ports: list[IbPort] = []
    used: list[int] = []
    for k in cand:
        ln = lines[k]
        if "physical_state" in ln and (m := _RDMA_LINK.match(ln)):
            ports.append(
                IbPort(
                    ca=m.group(1),
                    port=m.group(2),
                    lineno=k + 1,
                    state=_word(m.group(3)),
                    phys=_word(m.group(4)),
                )
            )
            used.append(k + 1)
            continue
        if "CA '" in ln and (m := _IBSTAT_CA.match(ln)):
            kv = _block(lines, k)
            got = _ibstat(m.group(1), kv)
        elif "Infiniband device" in ln and (m := _IBSTATUS.match(ln)):
            kv = _block(lines, k)
            got = [_ibstatus(m.group(1), m.group(2), k, kv)] if kv else []
        elif "hca_id:" in ln and (m := _DEVINFO.match(ln)):
            kv = _block(lines, k)
            got = _devinfo(m.group(1), kv)
        else:
            continue
        if got:
            ports.extend(got)
            used.append(k + 1)
            used.extend(j + 1 for j, _, _ in kv)
    return ports, sorted(set(used))


@cache
def _specs() -> dict[str, Any]:
    data: dict[str, Any] = load_data("hca_specs.json")
    return data


def _describe(p: IbPort) -> str:
    parts = [f"{p.ca}/{p.port}", p.state or "?", p.phys]
    if p.rate_gbps is not None:
        parts.append(f"{p.rate_gbps:g} Gb/s")
    if p.link_layer:
        parts.append(p.link_layer)
    return " ".join(x for x in parts if x)


def degraded(p: IbPort) -> tuple[str, float] | None:
    """(adapter name, its max rate) when Active port ``p`` runs below the knowledge-data fraction of it."""
    spec = _specs()["adapters"].get(p.ca_type)
    if p.state != "active" or p.rate_gbps is None or spec is None:
        return None
    top = float(spec["max_rate_gbps"])
    return (str(spec["name"]), top) if p.rate_gbps < top * float(_specs()["rate_degraded_fraction"]) else None


def apply(snap: Snapshot, ports: list[IbPort], origin: str) -> None:
    """A note naming every port read, and a signal for each Active port below its adapter's rate."""
    shown = "; ".join(_describe(p) for p in ports[:MAX_NOTE_PORTS])
    more = f"; ... {len(ports) - MAX_NOTE_PORTS} more" if len(ports) > MAX_NOTE_PORTS else ""
    snap.notes.append(f"{origin}: InfiniBand/RDMA ports read ({len(ports)}): {shown}{more}")
    from gpuclinic.knowledge import codes  # (not on explain's start-up path)

    for p in ports:
        got = degraded(p)
        if got is None:
            continue
        name, top = got
        snap.signals.append(
            Signal(
                code=RATE_CODE,
                severity=codes.severity(RATE_CODE).name.lower(),
                family=codes.family(RATE_CODE).value,
                title=f"InfiniBand/RoCE port {p.ca}/{p.port} runs at {p.rate_gbps:g} Gb/s, "
                f"below its {name}'s {top:g} Gb/s",
                line=f"{p.ca} port {p.port}: {p.state}, rate {p.rate_gbps:g} Gb/s ({p.ca_type} {name})",
                input=origin,
                lineno=p.lineno,
                source="knowledge/data/hca_specs.json",
                data={
                    "signature": "ib_port_rate",
                    "ca": p.ca,
                    "port": p.port,
                    "rate_gbps": p.rate_gbps,
                    "max_rate_gbps": top,
                },
            )
        )
