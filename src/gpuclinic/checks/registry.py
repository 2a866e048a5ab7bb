"""Registry checks: can this host pull container images, how fast, and through which mirror.

They read the registry probes that ``gpuclinic net``, ``doctor --net`` (and ``net --registries``)
store under ``facts.network.extra["registries"]`` (built by ``registry_doc`` in
sources/registry_run.py): one
dict per registry or mirror probed, the host's mirror configuration, and the switch lines for
the fastest working mirror.  Silent without those probes, and when the host is offline
(``network.offline`` alone speaks then).  Thresholds live in knowledge/data/registries.json.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpuclinic.checks import check
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.knowledge.codes import finding
from gpuclinic.model import Finding

MiB = 1024 * 1024


def _registries(snap: Snapshot) -> dict[str, Any] | None:
    nf = snap.network
    if nf is None or nf.offline:
        return None
    reg = nf.extra.get("registries")
    return reg if isinstance(reg, dict) and reg.get("probes") else None


def _thresholds() -> dict[str, Any]:
    from gpuclinic.knowledge import load_data

    return dict(load_data("registries.json")["thresholds"])


def remaining_pulls(value: str | None) -> tuple[int, int | None] | None:
    """Docker Hub's ``ratelimit-remaining: 76;w=21600`` -> (76, 21600)."""
    import re

    m = re.match(r"\s*(\d+)(?:\s*;\s*w=(\d+))?", value or "")
    return (int(m.group(1)), int(m.group(2)) if m.group(2) else None) if m else None


def _speed(p: dict[str, Any]) -> float:
    return float(max(p.get("n_conn") or 0.0, p.get("one_conn") or 0.0))


@check(
    "network.registries",
    codes=[
        "network.registry_unreachable",
        "network.registry_mirror_down",
        "network.registry_config_invalid",
        "network.registry_ratelimit_low",
    ],
    what="container registry reachability and configuration",
)
def registries(snap: Snapshot) -> Iterator[Finding]:
    reg = _registries(snap)
    if reg is None:
        return
    yield from registry_findings(reg)


def registry_findings(reg: dict[str, Any]) -> Iterator[Finding]:
    probes: list[dict[str, Any]] = reg["probes"]
    cfg: dict[str, Any] = reg.get("config") or {}
    origins = [p for p in probes if not p.get("ok") and not p.get("mirror_of") and not p.get("configured_in")]
    if origins and any(p.get("ok") for p in probes):  # all failing is the offline/proxy story
        yield finding(
            "network.registry_unreachable",
            title=f"Cannot pull from {len(origins)} container registr{'y' if len(origins) == 1 else 'ies'}: "
            + ", ".join(p["id"] for p in origins[:5]),
            evidence=[f"{p['url']}: {p.get('stage') or 'probe'}: {p.get('error')}" for p in origins],
            data={"registries": [p["id"] for p in origins]},
        )
    for p in probes:
        if not p.get("ok") and p.get("configured_in"):
            where = ", ".join(sorted(set(p["configured_in"])))
            yield finding(
                "network.registry_mirror_down",
                title=f"configured mirror {p['url']} (in {where}) does not work",
                evidence=[f"{p['url']}: {p.get('stage') or 'probe'}: {p.get('error')}"],
                remedy=f"Remove it from {where} or fix it: the runtime tries it first on every pull and "
                "waits for its timeout before falling back.",
                data={"mirror": p["url"], "configured_in": sorted(set(p["configured_in"]))},
            )
    for problem in cfg.get("problems") or []:
        yield finding(
            "network.registry_config_invalid",
            title=f"Container runtime registry config cannot be read: {problem}",
            evidence=[problem],
        )
    yield from _ratelimits(probes)


def _ratelimits(probes: list[dict[str, Any]]) -> Iterator[Finding]:
    warn_below = int(_thresholds()["ratelimit_remaining_warn"])
    for p in probes:
        rl = remaining_pulls((p.get("ratelimit") or {}).get("ratelimit-remaining"))
        if rl is None or rl[0] >= warn_below:
            continue
        window = f" per {rl[1] // 3600} h" if rl[1] else ""
        yield finding(
            "network.registry_ratelimit_low",
            title=f"{p['id']}: only {rl[0]} pulls left{window} for this address",
            evidence=[f"{p['url']}: ratelimit-remaining: {p['ratelimit']['ratelimit-remaining']}"],
            data={"remaining": rl[0], "window_s": rl[1]},
        )


@check(
    "network.registry_speed",
    codes=["network.registry_mirror_faster", "network.registry_per_connection_cap"],
    what="container registry throughput",
)
def registry_speed(snap: Snapshot) -> Iterator[Finding]:
    reg = _registries(snap)
    if reg is None:
        return
    yield from speed_findings(reg)


def speed_findings(reg: dict[str, Any]) -> Iterator[Finding]:
    probes: list[dict[str, Any]] = reg["probes"]
    gain = float(_thresholds()["mirror_gain"])
    for rec in reg.get("recommendations") or []:
        up = next((p for p in probes if p.get("host") == rec["upstream"] and not p.get("mirror_of")), None)
        mirror = next((p for p in probes if p["url"] == rec["mirror"]), None)
        if mirror is None or (mirror.get("configured_in")):
            continue  # already in use
        up_speed = _speed(up) if up and up.get("ok") else 0.0
        if up_speed and _speed(mirror) < gain * up_speed:
            continue
        lines = [
            f"{sw['file']}: " + " ".join(x.strip() for x in sw["lines"] if x.strip()) for sw in rec["switch"]
        ]
        yield finding(
            "network.registry_mirror_faster",
            title=f"Mirror {rec['mirror']} pulls {rec['upstream']} images "
            + (
                f"{_speed(mirror) / max(up_speed, 1):.1f}x faster" if up_speed else "while the registry fails"
            ),
            evidence=[f"{p['url']}: {_speed(p) / MiB:.1f} MiB/s" for p in (up, mirror) if p],
            remedy="; ".join(lines) + ". Then: " + "; ".join(sw["restart"] for sw in rec["switch"]),
            data={"upstream": rec["upstream"], "mirror": rec["mirror"]},
        )
    for p in probes:
        one, n = p.get("one_conn") or 0.0, p.get("n_conn") or 0.0
        if p.get("ok") and one and n > float(_thresholds()["per_connection_gain"]) * one:
            yield finding(
                "network.registry_per_connection_cap",
                title=f"{p['id']}: one connection gets {one / MiB:.1f} MiB/s, {p.get('n')} get {n / MiB:.1f} "
                "MiB/s: per-connection cap",
                evidence=[
                    f"{p['url']}: 1 connection {one / MiB:.1f} MiB/s, {p.get('n')} connections "
                    f"{n / MiB:.1f} MiB/s"
                ],
                data={"registry": p["id"], "one_conn": one, "n_conn": n},
            )
