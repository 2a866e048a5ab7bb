"""Network figures as people paste them: ``ping`` summaries (Linux, BSD/macOS, Windows), ``mtr --report``
tables, ``iperf3`` sender/receiver lines, and the transfer rates of ``git clone``, ``curl``, ``wget``,
``pip`` and tqdm bars (``huggingface-cli download``, hf_transfer).

When the network is the problem the user's evidence is one of these, not a probe of ours.  The figures
become ``NetworkFacts.extra["pasted"]`` entries that the network checks judge with the thresholds ``gpuclinic
net`` uses (knowledge/data/network_thresholds.json), so a pasted 30 % loss is the same ``network.lossy``.
Only the last figure of each tool counts (a progress meter's last line; mtr's last hop: loss at a middle
hop is usually ICMP rate limiting there).  100 % ping loss is not judged: many hosts (github.com) drop ICMP.
Every reader is reached only through lines holding one of ``KEYS`` (cheap literals).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpuclinic import lazyre

# the literal each format's key line holds (a big input's reader visits only lines holding one)
KEYS = (
    "packet loss", "Packets: Sent", "Loss%", "bits/sec", "Receiving objects:", "Average Speed", "B/s",
    "Download:", "Packet Loss:",
)

_PING = lazyre.compile(
    r"(?P<tx>\d+) packets transmitted, (?P<rx>\d+) (?:packets )?received,"
    r".*?(?P<loss>\d+(?:\.\d+)?)% packet loss"
)
_PING_HEAD = lazyre.compile(r"^-+ (?P<host>\S+) ping statistics -+")
_RTT = lazyre.compile(r"(?:rtt|round-trip) min/avg/max(?:/(?:mdev|stddev))? = [\d.]+/(?P<avg>[\d.]+)/")
_WIN = lazyre.compile(
    r"Packets: Sent = (?P<tx>\d+), Received = (?P<rx>\d+), Lost = \d+ \((?P<loss>\d+(?:\.\d+)?)% loss\)"
)
_WIN_HEAD = lazyre.compile(r"^Ping statistics for (?P<host>[^:\s]+)")
_WIN_AVG = lazyre.compile(r"Average = (?P<avg>\d+(?:\.\d+)?)ms")
_MTR_HOP = lazyre.compile(
    r"^\s*(?P<n>\d+)\.(?:\|--|\s)\s*(?:AS\S+\s+)?(?P<host>\S+)\s+(?P<loss>\d+(?:\.\d+)?)%?\s+(?P<snt>\d+)\s+"
    r"[\d.]+\s+(?P<avg>[\d.]+)\s"
)
_IPERF = lazyre.compile(
    r"^\[\s*(?P<id>\d+|SUM)\]\s+[\d.]+-\s*[\d.]+\s+sec\s+[\d.]+\s+\w?Bytes\s+(?P<v>[\d.]+)\s+(?P<u>[KMG]?)bits/sec"
    r".*\b(?P<side>receiver|sender)\s*$"
)
_IPERF_UDP = lazyre.compile(r"\bms\s+\d+/\d+ \((?P<pct>\d+(?:\.\d+)?(?:e[+-]?\d+)?)%\)")
_GIT = lazyre.compile(
    r"Receiving objects:\s+(?P<pct>\d+)% \(\d+/\d+\),\s+(?P<n>[\d.]+) (?P<nu>[KMG]?)i?B \|"
    r"\s+(?P<v>[\d.]+) (?P<u>[KMG]?)i?B/s"
)
_TQDM = lazyre.compile(
    r"\s(?P<n>[\d.]+)(?P<nu>[kKMGT]?)i?B?/(?P<t>[\d.]+)(?P<tu>[kKMGT]?)i?B?\s*\[(?P<el>[\d:]+)<[\d:?]+,"
    r"\s*(?P<v>[\d.]+)\s*(?P<u>[kKMG]?)i?B/s(?:[,\]]|$)"
)
_PIP = lazyre.compile(
    r"\s(?P<n>[\d.]+)/(?P<t>[\d.]+) (?P<nu>[kKMG]?)B\s+(?P<v>[\d.]+) (?P<u>[kKMG]?)i?B/s eta "
)
# pip < 20.3: ``| 778 kB 23 kB/s eta 2:10:07`` (its size: the ``Downloading ... (184.2 MB)`` line above)
_OLD_PIP = lazyre.compile(
    r"\|\s*(?P<n>[\d.]+) (?P<nu>[kKMG]?)B (?P<v>[\d.]+) (?P<u>[kKMG]?)B/s(?:\s+eta\b|\s*$)"
)
_PIP_TOTAL = lazyre.compile(r"^\s*Downloading \S+ \((?P<t>[\d.]+) (?P<tu>[kKMG]?)B\)")
_WGET = lazyre.compile(r"\((?P<v>[\d.]+) (?P<u>[KMG]?)B/s\) - .* saved \[(?P<n>\d+)(?P<nu>)[/\]]")
# speedtest-cli ``Download: 10.31 Mbit/s``, speedtest.pl, Ookla's ``Download:   268.65 Mbps (data used: ...)``
_SPEEDTEST = lazyre.compile(r"\bDownload:\s+(?P<v>[\d.]+) (?P<u>[KMG])(?:bit/s|bps)\b")
_OOKLA_LOSS = lazyre.compile(r"^\s*Packet Loss:\s+(?P<loss>\d+(?:\.\d+)?)%")
_UNIT = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_BIN = {"": 1.0, "k": 1024.0, "K": 1024.0, "M": 1024.0**2, "G": 1024.0**3, "T": 1024.0**4}


def _fig(tool: str, line_no: int, line: str, target: str | None = None, **vals: Any) -> dict[str, Any]:
    return {"tool": tool, "line": line.strip()[:200], "line_no": line_no, "target": target, **vals}


def _avg_after(lines: list[str], k: int, literal: str, rx: lazyre.LazyPattern) -> float | None:
    """The average round trip ping prints on one of the two lines after its loss line (Linux/macOS
    ``rtt min/avg/max``, Windows ``Average =``), or None."""
    for j in range(k + 1, min(len(lines), k + 3)):
        m = rx.search(lines[j]) if literal in lines[j] else None
        if m:
            return float(m.group("avg"))
    return None


def _ping(lines: list[str], idx: list[int]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for k in idx:
        s = lines[k]
        if "packet loss" in s and (m := _PING.search(s)):
            head = _PING_HEAD.match(lines[k - 1].strip()) if k else None
            avg = _avg_after(lines, k, "min/avg/max", _RTT)
            out.append(
                _fig("ping", k + 1, s, head.group("host") if head else None, sent=int(m.group("tx")),
                     loss_pct=float(m.group("loss")), rtt_avg_ms=avg)
            )
        elif "Packet Loss:" in s and (m := _OOKLA_LOSS.match(s)):
            out.append(_fig("speedtest", k + 1, s, loss_pct=float(m.group("loss"))))
        elif "Packets: Sent" in s and (m := _WIN.search(s)):
            head = _WIN_HEAD.match(lines[k - 1].strip()) if k else None
            avg = _avg_after(lines, k, "Average =", _WIN_AVG)
            out.append(
                _fig("ping", k + 1, s, head.group("host") if head else None, sent=int(m.group("tx")),
                     loss_pct=float(m.group("loss")), rtt_avg_ms=avg)
            )
    return out


def _mtr(lines: list[str], idx: list[int]) -> list[dict[str, Any]]:
    """``mtr --report``: the last hop of each table (the destination) is the path's loss and RTT."""
    out: list[dict[str, Any]] = []
    for k in idx:
        if "Loss%" not in lines[k] or "Snt" not in lines[k]:
            continue
        last = None
        for j in range(k + 1, len(lines)):
            m = _MTR_HOP.match(lines[j])
            if m is None:
                if len(lines[j].split()) > 1:  # blank lines and a hop's extra (multipath) hosts go on
                    break
                continue
            last = (j, m)
        if last is not None and last[1].group("host") != "???":
            j, m = last
            out.append(
                _fig("mtr", j + 1, lines[j], m.group("host"), sent=int(m.group("snt")),
                     loss_pct=float(m.group("loss")), rtt_avg_ms=float(m.group("avg")))
            )
    return out


def _iperf(s: str, k: int, last: dict[str, dict[str, Any]]) -> None:
    """iperf3's summary: the receiver line (what arrived), [SUM] over one stream's when -P ran several.  A UDP
    test's rate is the one asked for (``-b``, 1 Mbit/s by default), so its lost datagrams count instead."""
    m = _IPERF.match(s.strip())
    if m is None:
        return
    if u := _IPERF_UDP.search(s):
        if m.group("side") == "receiver":
            last["iperf3 udp"] = _fig("iperf3", k + 1, s, loss_pct=float(u.group("pct")), bps=None)
        return
    rank = (m.group("side") == "receiver", m.group("id") == "SUM")
    prev = last.get("iperf3")
    if prev is None or rank >= prev["rank"]:
        bps = float(m.group("v")) * _UNIT[m.group("u")] / 8
        last["iperf3"] = _fig("iperf3", k + 1, s, bps=bps, scope="link", rank=rank)


def _curl(lines: list[str], k: int, last: dict[str, dict[str, Any]]) -> None:
    """curl's progress meter: the last row under the two header lines (Dload, Received columns)."""
    row = None
    for j in range(k + 2, min(len(lines), k + 200)):
        toks = lines[j].split()
        if len(toks) >= 7 and toks[0].isdigit() and toks[2].isdigit():
            row = (j, toks[6], toks[3])
        elif lines[j].strip():
            break
    if row and (r := _curl_rate(row[1])) is not None:
        toks = lines[row[0]].split()
        last["curl"] = _fig(
            "curl", row[0] + 1, lines[row[0]], bps=r, done=_curl_rate(row[2]), total=_curl_rate(toks[1])
        )


def _meter(lines: list[str], k: int, last: dict[str, dict[str, Any]]) -> None:
    """A tqdm bar (Hub downloads; one figure per file), pip's bar or wget's saved line: the line's last
    rate and the size moved."""
    s = lines[k]
    for tool, rx, need in (
        ("download bar", _TQDM, "/"), ("pip", _PIP, "eta"), ("pip", _OLD_PIP, "|"), ("wget", _WGET, "saved")
    ):
        ms = list(rx.finditer(s)) if need in s else []
        if ms:
            m = ms[-1]
            g = m.groupdict()
            total = float(g["t"]) * _UNIT[g.get("tu") or g["nu"]] if g.get("t") else None
            if total is None and rx is _OLD_PIP and k and (t := _PIP_TOTAL.match(lines[k - 1])):
                total = float(t.group("t")) * _UNIT[t.group("tu")]
            name = s[: m.start()].split(":")[0].strip()[-80:] if rx is _TQDM and ":" in s[: m.start()] else ""
            key = tool + ":" + name  # a bar without a file name ("  3%|▎  | 997M/29.9G ...") is one figure
            last[key] = _fig(
                tool, k + 1, s, bps=float(m.group("v")) * _UNIT[m.group("u")],
                done=float(m.group("n")) * _UNIT[m.group("nu")], total=total, elapsed_s=_secs(g.get("el")),
            )
            return


def _secs(el: str | None) -> float | None:
    """tqdm's elapsed ``05:45`` / ``1:02:03`` in seconds."""
    if not el:
        return None
    out = 0.0
    for part in el.split(":"):
        out = out * 60 + float(part or 0)
    return out


def _rates(lines: list[str], idx: list[int]) -> list[dict[str, Any]]:
    """Throughput: iperf3's receiver line (the link), and the last rate of each transfer tool's meter."""
    last: dict[str, dict[str, Any]] = {}
    for k in idx:
        s = lines[k]
        if "bits/sec" in s and ("receiver" in s or "sender" in s):
            _iperf(s, k, last)
        elif "Receiving objects:" in s:
            ms = list(_GIT.finditer(s))  # a \r-joined meter holds many updates on one line: the last counts
            if ms:
                m = ms[-1]
                done, pct = float(m.group("n")) * _BIN[m.group("nu")], int(m.group("pct"))
                last["git"] = _fig(  # objects received stand in for bytes: the pack's size, roughly
                    "git clone", k + 1, m.group(0), bps=float(m.group("v")) * _BIN[m.group("u")], done=done,
                    total=done * 100 / pct if pct else None,
                )
        elif "Average Speed" in s and k + 1 < len(lines) and "Dload" in lines[k + 1]:
            _curl(lines, k, last)
        elif "Download:" in s and (sp := _SPEEDTEST.search(s)):
            bps = float(sp.group("v")) * _UNIT[sp.group("u")] / 8
            last["speedtest"] = _fig("speedtest", k + 1, s, bps=bps, scope="link")
        elif "B/s" in s:
            _meter(lines, k, last)
    out = []
    for f in last.values():
        f.pop("rank", None)
        f.setdefault("scope", "transfer")
        if f["bps"] is None or f["bps"] > 0:  # a meter's 0 B/s is its first tick, not a rate
            out.append(f)
    return out


def _curl_rate(tok: str) -> float | None:
    """curl's meter column: bytes/s with a k/M/G suffix (1024-based)."""
    unit = tok[-1] if tok[-1] in "kMG" else ""
    try:
        return float(tok[: len(tok) - len(unit)]) * _BIN[unit]
    except ValueError:
        return None


def read(lines: list[str], where: Iterable[int] | None = None) -> tuple[list[dict[str, Any]], set[int]]:
    """The figures in ``lines`` (``where``: 0-based lines that may hold a key literal; None: all) and the
    1-based line numbers they came from."""
    idx = sorted(range(len(lines)) if where is None else set(where))
    idx = [k for k in idx if any(key in lines[k] for key in KEYS)]
    if not idx:
        return [], set()
    figs = _ping(lines, idx) + _mtr(lines, idx) + _rates(lines, idx)
    return figs, {f["line_no"] for f in figs}
