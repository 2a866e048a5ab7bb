"""Watch agent configuration: defaults that suit one rented GPU server, every threshold overridable in TOML.

The file is strict (an unknown key is an error) so a typo in a threshold never silently leaves the
default in force.  Secrets (webhook URLs, tokens, SMTP passwords) may be given as ``*_env`` keys naming
an environment variable, so the file itself can be world-readable.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuclinic.errors import InputError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


@dataclass
class AgentConfig:
    interval_s: float = 1.0  # sampling period
    sample_timeout_s: float = 3.0  # a sample taking longer counts as stalled
    doctor_interval_s: float = 300.0  # full doctor checks; 0 disables
    rollup_interval_s: float = 60.0  # how often rollups and retention run
    expect_gpus: int | None = None  # GPU count to hold the node to (default: the most seen)


@dataclass
class RulesConfig:
    """Thresholds of the time-series rules; durations in seconds unless named *_minutes."""

    disabled: list[str] = field(default_factory=list)  # event codes or prefixes ("watch.idle", "xid.")
    temp_margin_c: float | None = None
    # the window the detectors observe; a clock slowdown must be in every sample of it to open an event
    throttle_min_s: float = 5.0
    throttle_reasons: list[str] = field(
        default_factory=lambda: [
            "hw_slowdown",
            "hw_thermal_slowdown",
            "hw_power_brake_slowdown",
            "sw_thermal_slowdown",
            "sw_power_cap",
        ]
    )
    stall_minutes: float = 5.0  # memory held but utilisation ~0 this long -> training stall
    stall_util_pct: float = 2.0
    stall_min_memory_mib: float = 512.0
    idle_minutes: float = 30.0  # no process this long -> idle GPU
    straggler_minutes: float = 2.0
    straggler_clock_ratio: float | None = None
    pcie_min_util_pct: float = 30.0  # downtrain only counts under load (idle links drop gen to save power)
    pcie_sustain_s: float = 30.0
    counter_hold_s: float = 900.0  # a rising-counter / kernel event stays open this long after the last rise
    stale_after_s: float = 10.0  # no fresh sample for this long -> "sampler stalled"
    sample_error_count: int = 3  # consecutive sampling errors before an event
    resolve_after_s: float = 5.0  # a condition must be gone this long before its event resolves
    incident_grace_s: float = 3.0  # an incident waits this long for its cause/symptoms before it alerts


@dataclass
class StoreConfig:
    raw_retention_s: float = 48 * 3600.0
    rollup_retention_s: float = 30 * 86400.0
    flush_interval_s: float = 1.0  # at most this much is lost on SIGKILL
    max_buffered_samples: int = 36000  # kept in memory while the disk is full


@dataclass
class ChannelConfig:
    type: str  # webhook | slack | feishu | lark | dingtalk | wecom | email
    name: str = ""
    url: str | None = None
    secret: str | None = None  # DingTalk / Feishu signing secret
    headers: dict[str, str] = field(default_factory=dict)
    min_severity: str | None = None
    # email
    smtp_host: str | None = None
    smtp_port: int = 587
    starttls: bool = True
    ssl: bool = False
    username: str | None = None
    password: str | None = None
    sender: str | None = None
    to: list[str] = field(default_factory=list)
    timeout_s: float = 10.0


@dataclass
class NotifyConfig:
    min_severity: str = "warning"
    send_resolved: bool = True
    dedup_window_s: float = 3600.0  # the same alert state is not re-sent within this window
    rate_limit_per_hour: int = 60  # per channel; excess alerts are summarised, not lost
    max_attempts: int = 4  # immediate retries (exponential backoff) before spooling
    backoff_s: float = 0.5
    spool_retry_s: float = 30.0
    spool_dir: str | None = None
    channels: list[ChannelConfig] = field(default_factory=list)


@dataclass
class ServerConfig:
    listen: str | None = None  # "127.0.0.1:9847"; None: no HTTP server
    token: str | None = None
    metrics_require_token: bool = True


@dataclass
class WatchConfig:
    agent: AgentConfig = field(default_factory=AgentConfig)
    rules: RulesConfig = field(default_factory=RulesConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    notify: NotifyConfig = field(default_factory=NotifyConfig)
    server: ServerConfig = field(default_factory=ServerConfig)


DEFAULT_PORT = 9847
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, None: 1.0}


def parse_duration(value: str | float | int, *, what: str = "duration") -> float:
    """``"48h"``, ``"30d"``, ``"90"`` (seconds) or a number -> seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < 0:
            raise InputError(f"{what} must not be negative: {value}")
        return float(value)
    m = _DURATION.match(str(value))
    if not m:
        raise InputError(f"bad {what} {value!r}: use e.g. 90s, 15m, 48h, 30d")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


# TOML keys that are durations given with units ("48h") and map onto *_s fields
_DURATION_KEYS = {
    "interval": "interval_s",
    "sample_timeout": "sample_timeout_s",
    "doctor_interval": "doctor_interval_s",
    "rollup_interval": "rollup_interval_s",
    "raw_retention": "raw_retention_s",
    "rollup_retention": "rollup_retention_s",
    "flush_interval": "flush_interval_s",
    "dedup_window": "dedup_window_s",
    "spool_retry": "spool_retry_s",
    "backoff": "backoff_s",
    "throttle_min": "throttle_min_s",
    "pcie_sustain": "pcie_sustain_s",
    "counter_hold": "counter_hold_s",
    "stale_after": "stale_after_s",
    "resolve_after": "resolve_after_s",
    "timeout": "timeout_s",
    "incident_grace": "incident_grace_s",
}


def _fill(obj: Any, table: dict[str, Any], where: str) -> None:
    names = {f.name: f for f in dataclasses.fields(obj)}
    for key, value in table.items():
        target = key
        if key not in names and key in _DURATION_KEYS:
            target = _DURATION_KEYS[key]
            value = parse_duration(value, what=f"{where}.{key}")
        if key.endswith("_env") and key[:-4] in names:
            env = os.environ.get(str(value))
            if env is None:
                raise InputError(f"{where}.{key}: environment variable {value} is not set")
            target, value = key[:-4], env
        if target not in names:
            raise InputError(f"unknown setting {where}.{key} in watch config")
        f = names[target]
        cur = getattr(obj, target)
        if target.endswith("_s") and isinstance(value, str):
            value = parse_duration(value, what=f"{where}.{key}")
        if isinstance(cur, bool):
            if not isinstance(value, bool):
                raise InputError(f"{where}.{key} must be true or false")
        elif isinstance(cur, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        elif isinstance(cur, (int, float)) and not isinstance(value, (int, float)):
            raise InputError(f"{where}.{key} must be a number, not {value!r}")
        elif isinstance(cur, list) and not isinstance(value, list):
            raise InputError(f"{where}.{key} must be a list")
        del f
        setattr(obj, target, value)


def load_config(path: str | os.PathLike[str] | None) -> WatchConfig:
    """Read a TOML watch config (None: defaults).  Raises :class:`InputError` with the reason."""
    cfg = WatchConfig()
    if path is None:
        return cfg
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"config file not found: {p}") from None
    except OSError as e:
        raise InputError(f"cannot read config {p}: {e.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"config {p} is not valid TOML: {e}") from None
    return config_from_dict(data)


def config_from_dict(data: dict[str, Any]) -> WatchConfig:
    cfg = WatchConfig()
    for section in data:
        if section not in ("agent", "rules", "store", "notify", "server"):
            raise InputError(f"unknown section [{section}] in watch config")
    _fill(cfg.agent, data.get("agent", {}), "agent")
    _fill(cfg.rules, data.get("rules", {}), "rules")
    _fill(cfg.store, data.get("store", {}), "store")
    _fill(cfg.server, data.get("server", {}), "server")
    notify = dict(data.get("notify", {}))
    chans = notify.pop("channel", []) + notify.pop("channels", [])
    _fill(cfg.notify, notify, "notify")
    from gpuclinic.watch.notify import CHANNEL_TYPES  # keep the list of kinds in one place

    for i, raw in enumerate(chans):
        if not isinstance(raw, dict) or "type" not in raw:
            raise InputError(f"notify.channel #{i + 1} needs a type ({', '.join(sorted(CHANNEL_TYPES))})")
        kind = str(raw["type"]).lower()
        if kind not in CHANNEL_TYPES:
            raise InputError(
                f"notify.channel #{i + 1}: unknown type {kind!r} ({', '.join(sorted(CHANNEL_TYPES))})"
            )
        ch = ChannelConfig(type=kind)
        _fill(ch, {k: v for k, v in raw.items() if k != "type"}, f"notify.channel[{i + 1}]")
        if kind == "email":
            if not ch.smtp_host or not ch.to or not ch.sender:
                raise InputError(f"notify.channel #{i + 1} (email) needs smtp_host, sender and to")
        elif not ch.url:
            raise InputError(f"notify.channel #{i + 1} ({kind}) needs a url (or url_env)")
        cfg.notify.channels.append(ch)
    for sev in [cfg.notify.min_severity, *(c.min_severity for c in cfg.notify.channels if c.min_severity)]:
        if sev not in ("info", "warning", "critical"):
            raise InputError(f"min_severity must be info, warning or critical, not {sev!r}")
    if cfg.agent.interval_s <= 0:
        raise InputError("agent.interval must be positive")
    return cfg
