"""Throughput samples: one connection vs several parallel ranged connections in the same window, so a
per-connection cap is told from a link cap.  Split from :mod:`gpuclinic.sources.network`, which
re-exports these names."""

from __future__ import annotations

import re
import socket
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from gpuclinic.facts.network import EndpointProbe, ThroughputSample
from gpuclinic.sources.netprobe import (
    Addr,
    ProbeConfig,
    ProbeError,
    _Deadline,
    _is_proxied_plain,
    _open,
    _Reader,
    _request,
    describe_error,
    parse_head,
)
from gpuclinic.sources.netproxy import redact_url


@dataclass
class _Stream:
    sock: socket.socket | None = None
    status: int | None = None
    final_url: str | None = None
    size: int | None = None
    buffered: int = 0
    bytes: int = 0
    end_t: float = 0.0
    error: str | None = None
    ready: threading.Event = field(default_factory=threading.Event)


def _open_ranged(url: str, start: int, end: int | None, cfg: ProbeConfig, dl: _Deadline,
                 addrs: dict[str, list[Addr]], st: _Stream, max_redirects: int = 5) -> None:
    """GET ``url`` with a Range, following redirects; leaves ``st.sock`` positioned at the body."""
    rng = f"bytes={start}-{'' if end is None else end}"
    for _ in range(max_redirects + 1):
        s = _open(url, cfg, dl, addrs)
        s.settimeout(dl.cap(cfg.http_timeout_s))
        _request(s, url, rng=rng, proxied_plain=_is_proxied_plain(url, cfg))
        rd = _Reader(s)
        status, headers = parse_head(rd.read_head())
        if status in (301, 302, 303, 307, 308) and headers.get("location"):
            s.close()
            loc = headers["location"]
            if loc.startswith("/"):
                pu = urlsplit(url)
                loc = f"{pu.scheme}://{pu.netloc}{loc}"
            url = loc
            continue
        if status not in (200, 206):
            s.close()
            raise ProbeError("http", f"HTTP {status} for the throughput object")
        cr = headers.get("content-range", "")
        m = re.search(r"/(\d+)$", cr)
        st.size = (
            int(m.group(1))
            if m
            else (int(headers["content-length"]) if headers.get("content-length", "").isdigit() else None)
        )
        st.sock, st.status, st.final_url, st.buffered = s, status, redact_url(url), len(rd.buf)
        return
    raise ProbeError("http", "too many redirects")


@dataclass
class _Round:
    """What the connections of one measurement share: the object, byte cap, start signal, window."""

    url: str
    per: int  # bytes each connection may read
    cfg: ProbeConfig
    dl: _Deadline
    window: float
    go: threading.Event = field(default_factory=threading.Event)
    t_go: float = 0.0
    addrs: dict[str, list[Addr]] = field(default_factory=dict)  # DNS answers shared between connections
    lock: threading.Lock = field(default_factory=threading.Lock)


def measure_throughput(
    url: str, connections: int, cfg: ProbeConfig, dl: _Deadline, size_hint: int | None = None
) -> ThroughputSample:
    """Bytes per second over ``connections`` ranged GETs sharing one time window.

    Each connection asks for its own byte range (so a server that serves ranges sends different
    bytes), waits until all are at the body, then all read for ``window_s`` or their byte cap.
    """
    sample = ThroughputSample(connections=connections)
    per = cfg.max_bytes_per_conn
    if size_hint:
        per = max(64 * 1024, min(per, size_hint // connections))
    streams = [_Stream() for _ in range(connections)]
    rnd = _Round(url=url, per=per, cfg=cfg, dl=dl, window=cfg.window_s)
    threads = [
        threading.Thread(target=_stream_worker, args=(rnd, i, st), daemon=True, name=f"tput-{i}")
        for i, st in enumerate(streams)
    ]
    for th in threads:
        th.start()
    setup_limit = min(
        dl.left(), cfg.dns_timeout_s + cfg.connect_timeout_s + cfg.tls_timeout_s + cfg.http_timeout_s
    )
    t_setup_end = time.monotonic() + max(0.0, setup_limit)
    for st in streams:
        st.ready.wait(max(0.0, t_setup_end - time.monotonic()))
    rnd.window = max(0.2, min(rnd.window, dl.left() - 0.2))
    rnd.t_go = time.perf_counter()
    rnd.go.set()
    for th in threads:
        th.join(max(0.1, rnd.window + 2.0))
    _summarize(sample, streams, rnd.t_go)
    return sample


def _summarize(sample: ThroughputSample, streams: list[_Stream], t_go: float) -> None:
    ok = [st for st in streams if st.sock is not None and st.end_t > 0]
    sample.connections_ok = len(ok)
    sample.final_url = next((st.final_url for st in streams if st.final_url), None)
    errs = [st.error for st in streams if st.error]
    if errs:
        sample.error = errs[0] + (f" (and {len(errs) - 1} more)" if len(errs) > 1 else "")
    if ok:
        sample.bytes = sum(st.bytes for st in ok)
        sample.seconds = max(st.end_t for st in ok) - t_go
        if sample.seconds > 0 and sample.bytes > 0:
            sample.bytes_per_s = sample.bytes / sample.seconds


def _stream_worker(rnd: _Round, i: int, st: _Stream) -> None:
    """One connection: open its range, wait for the common start, read until the window or cap ends."""
    cfg = rnd.cfg
    try:
        try:
            local: dict[str, list[Addr]] = {}
            with rnd.lock:
                local.update(rnd.addrs)
            _open_ranged(rnd.url, i * rnd.per, (i + 1) * rnd.per - 1, cfg, rnd.dl, local, st)
            with rnd.lock:
                rnd.addrs.update(local)
        except ProbeError as e:
            st.error = str(e)
            return
        except OSError as e:
            st.error = describe_error(e, cfg.http_timeout_s)
            return
        finally:
            st.ready.set()
        if not rnd.go.wait(cfg.http_timeout_s + cfg.connect_timeout_s + cfg.tls_timeout_s) or st.sock is None:
            return
        _read_body(st, st.sock, rnd.per, rnd.t_go + rnd.window)
    finally:
        if st.sock is not None:
            try:
                st.sock.close()
            except OSError:
                pass


def _read_body(st: _Stream, sock: socket.socket, per: int, end: float) -> None:
    buf = bytearray(256 * 1024)
    got = st.buffered
    try:
        while got < per:
            left = end - time.perf_counter()
            if left <= 0:
                break
            sock.settimeout(min(left, 1.0) + 0.01)
            try:
                n = sock.recv_into(buf, min(len(buf), per - got))
            except TimeoutError:
                continue
            if n == 0:
                break
            got += n
    except OSError as e:
        st.error = describe_error(e)
    st.bytes = got
    st.end_t = time.perf_counter()


def _size_of(url: str, cfg: ProbeConfig, dl: _Deadline) -> int | None:
    st = _Stream()
    try:
        _open_ranged(url, 0, 0, cfg, dl, {}, st)
    except (ProbeError, OSError):
        return None
    finally:
        if st.sock is not None:
            st.sock.close()
    return st.size


def probe_throughput(pr: EndpointProbe, cfg: ProbeConfig, dl: _Deadline) -> None:
    ep = pr.endpoint
    if not ep.throughput_path:
        return
    url = ep.url + ep.throughput_path
    try:
        size = _size_of(url, cfg, dl)
        pr.single = measure_throughput(url, 1, cfg, dl, size)
        if dl.left() > cfg.window_s + 1 and pr.single.bytes_per_s:
            pr.parallel = measure_throughput(url, cfg.parallel, cfg, dl, size)
    except ProbeError as e:
        if e.phase == "deadline":
            pr.deadline_hit = True


# ----------------------------------------------------------------------------------------------
# The run


def _throughput_order(probes: list[EndpointProbe], cfg: ProbeConfig) -> list[EndpointProbe]:
    return [p for p in probes if p.endpoint.throughput_path and p.reachable]
