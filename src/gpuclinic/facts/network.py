"""Network facts: per-endpoint DNS/TCP/TLS/TTFB/throughput probes and proxy settings.  Owned by issue 4.

Everything here is plain data measured by :mod:`gpuclinic.sources.network`, so checks can run on a
saved snapshot as well as live.  Times are milliseconds, rates bytes per second; ``None`` means
"not measured" (skipped, deadline, or an earlier step failed) and the matching ``*_error`` says why.
"""

from __future__ import annotations

from typing import Any

from gpuclinic.record import field, record


@record
class Endpoint:
    """One place the tools talk to (from ``knowledge/data/endpoints.json``, the config file or
    ``--endpoint``)."""

    id: str
    url: str  # base URL, e.g. https://huggingface.co
    service: str  # github | huggingface | pypi | modelscope | custom
    kind: str = "origin"  # origin | mirror
    role: str = "web"  # web | api | cdn | files | index | proxy
    name: str = ""
    probe_path: str = "/"  # small object for time to first byte
    throughput_path: str | None = None  # known large object that serves Range requests
    mirror_url: str | None = None  # value that goes into the switch lines ({mirror})
    drop_in: bool = True  # False: a separate hub with its own client (ModelScope)
    third_party: bool = False  # an unofficial proxy: never send credentials through it
    notes: str = ""
    source: str = ""


@record
class ThroughputSample:
    """Bytes moved over ``connections`` ranged GETs during one shared time window."""

    connections: int
    bytes: int = 0
    seconds: float = 0.0
    bytes_per_s: float | None = None
    connections_ok: int = 0
    final_url: str | None = None  # after redirects (CDN host), credentials removed
    error: str | None = None


@record
class EndpointProbe:
    """What one endpoint measured like."""

    endpoint: Endpoint
    host: str = ""
    port: int = 443
    via_proxy: str | None = None  # redacted proxy URL the probe went through
    addresses: list[str] = field(default_factory=list)
    dns_ms: float | None = None
    dns_error: str | None = None
    connect_ms: list[float] = field(default_factory=list)  # successful samples
    connect_attempts: int = 0
    connect_failures: int = 0
    connect_error: str | None = None  # last failure
    tls_ms: float | None = None
    tls_version: str | None = None
    tls_error: str | None = None
    ttfb_ms: float | None = None
    http_status: int | None = None
    http_error: str | None = None
    single: ThroughputSample | None = None
    parallel: ThroughputSample | None = None
    elapsed_s: float = 0.0
    deadline_hit: bool = False
    # Summary of connect samples, stored for JSON readers (filled by ``summarize``)
    connect_median: float | None = None
    connect_jitter: float | None = None
    connect_failure_rate: float | None = None

    def summarize(self) -> None:
        self.connect_median = self.connect_median_ms()
        self.connect_jitter = self.connect_jitter_ms()
        self.connect_failure_rate = self.failure_rate()

    # Derived numbers, computed from the samples.
    def connect_median_ms(self) -> float | None:
        import statistics  # lazy: a measurable share of doctor's startup, needed only here

        return statistics.median(self.connect_ms) if self.connect_ms else None

    def connect_jitter_ms(self) -> float | None:
        """Spread of connect times: population stdev (0 for one sample)."""
        if len(self.connect_ms) < 2:
            return 0.0 if self.connect_ms else None
        import statistics

        return statistics.pstdev(self.connect_ms)

    def failure_rate(self) -> float | None:
        return self.connect_failures / self.connect_attempts if self.connect_attempts else None

    @property
    def reachable(self) -> bool:
        """An HTTP answer (any status) came back."""
        return self.http_status is not None

    def error(self) -> str | None:
        """The first step that failed, as one phrase."""
        if self.dns_error:
            return f"DNS: {self.dns_error}"
        if not self.connect_ms and self.connect_error:
            return f"connect: {self.connect_error}"
        if self.tls_error:
            return f"TLS: {self.tls_error}"
        if self.http_error:
            return f"HTTP: {self.http_error}"
        return None

    def best_rate(self) -> float | None:
        rates = [s.bytes_per_s for s in (self.single, self.parallel) if s and s.bytes_per_s]
        return max(rates) if rates else None


@record
class ProxySettings:
    """Proxy and mirror configuration the download tools will use.  Credentials are redacted."""

    env: dict[str, str] = field(default_factory=dict)  # HTTPS_PROXY etc. as set (redacted)
    no_proxy: list[str] = field(default_factory=list)
    pip_index_url: str | None = None
    pip_extra_index_urls: list[str] = field(default_factory=list)
    pip_proxy: str | None = None
    pip_config_files: list[str] = field(default_factory=list)
    git_http_proxy: str | None = None
    git_https_proxy: str | None = None
    git_insteadof: dict[str, str] = field(default_factory=dict)  # prefix -> replacement base
    hf_endpoint: str | None = None
    hf_hub_enable_hf_transfer: str | None = None
    hf_hub_disable_xet: str | None = None
    hf_xet_high_performance: str | None = None
    hf_hub_version: str | None = None  # installed huggingface_hub, if any (its behaviour changed in 1.0)
    problems: list[str] = field(default_factory=list)  # unparsable values, disagreeing case variants


@record
class NetworkFacts:
    """What the network probes found: each endpoint's path and speed, the proxy, whether we are offline."""

    probes: list[EndpointProbe] = field(default_factory=list)
    proxy: ProxySettings | None = None
    offline: bool | None = None  # True: no route / no name resolves anywhere
    offline_reason: str | None = None
    default_route: bool | None = None  # from /proc/net/route; None when unreadable
    quick: bool = False
    deadline_s: float | None = None
    elapsed_s: float = 0.0
    parallel_connections: int = 4
    extra: dict[str, Any] = field(default_factory=dict)
