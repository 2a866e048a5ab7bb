"""Pasted network figures (sources/net_paste.py: ping, mtr, iperf3, transfer meters) judged with the
thresholds ``gpuclinic net`` uses, as the same codes (not a check module: the name starts with _)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Any

from gpuclinic.knowledge import load_data
from gpuclinic.knowledge.codes import finding
from gpuclinic.model import Finding

THRESHOLDS_FILE = "network_thresholds.json"


@cache
def net_threshold(name: str) -> float:
    """A threshold of the network checks from ``network_thresholds.json`` (each entry with its source)."""
    return float(load_data(THRESHOLDS_FILE)[name]["value"])


def _rate(bps: float) -> str:
    if bps >= 1e6:
        return f"{bps / 1e6:.1f} MB/s"
    return f"{bps / 1e3:.0f} kB/s"


def _where(f: dict[str, Any]) -> str:
    return f"{f['tool']}" + (f" to {f['target']}" if f.get("target") else "") + f" (line {f['line_no']})"


def _big(f: dict[str, Any]) -> bool:
    """A transfer meter's rate counts once enough has moved, or when the file is big enough to be hurt."""
    least = net_threshold("transfer_min_bytes")
    if (f.get("done") or 0.0) >= least:
        return True
    started = f.get("elapsed_s") is not None and f["elapsed_s"] < net_threshold("transfer_min_seconds")
    return not started and (f.get("total") or 0.0) >= least


def latency(figs: list[dict[str, Any]]) -> Iterator[Finding]:
    """Loss at the destination (0 < loss < 100 %) and a high average RTT."""
    lossy = [f for f in figs if f.get("loss_pct") is not None
             and net_threshold("path_loss_warn_pct") <= f["loss_pct"] < 100.0]
    if lossy:
        worst = max(lossy, key=lambda f: f["loss_pct"])
        yield finding(
            "network.lossy",
            title=f"Packet loss on the path: {worst['loss_pct']:g}% lost in the pasted {_where(worst)}",
            evidence=[f"{_where(f)}: {f['line']}" for f in lossy],
            data={"pasted": lossy},
        )
    high = [f for f in figs if (f.get("rtt_avg_ms") or 0.0) >= net_threshold("high_latency_ms")]
    if high:
        yield finding(
            "network.high_latency",
            title=f"High round-trip time in the pasted {high[0]['tool']}: average "
                  f"{max(f['rtt_avg_ms'] for f in high):.0f} ms",
            evidence=[f"{_where(f)}: average RTT {f['rtt_avg_ms']:g} ms" for f in high],
            data={"pasted": high},
        )


def throughput(figs: list[dict[str, Any]]) -> Iterator[Finding]:
    """A measured link (iperf3) under the slow-link rate, or one transfer crawling under the crawl rate."""
    slow = [
        f for f in figs if f.get("bps") is not None
        and (f.get("scope") == "link" or _big(f))
        and f["bps"] < net_threshold("slow_link_bps" if f.get("scope") == "link" else "transfer_crawl_bps")
    ]
    if not slow:
        return
    link = any(f.get("scope") == "link" for f in slow)
    yield finding(
        "network.slow_link",
        title=(
            f"Slow path in the pasted {slow[0]['tool']}: {_rate(min(f['bps'] for f in slow))}"
            + ("" if link else " for one transfer")
        ),
        evidence=[f"{_where(f)}: {f['line']}" for f in slow],
        data={"pasted": slow},
    )
