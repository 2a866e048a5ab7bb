"""Send interruptions through the watch agent's notifiers (same TOML config as ``gpuclinic watch``).

A thin adapter over :mod:`gpuclinic.watch.notify`, so ``run`` never grows its own webhook code and
secrets handling stays in one place.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable
from typing import Any

from gpuclinic.errors import GpuclinicError

Notifier = Callable[[dict[str, Any]], None]


def load_notifier(config_path: str) -> Notifier | None:
    """A callable sending an alert dict through every configured notifier; None if none configured."""
    try:
        wn = importlib.import_module("gpuclinic.watch.notify")
    except ImportError as e:
        raise GpuclinicError(f"--config: notifiers are not available in this build ({e})") from e
    notifiers = _load(wn, config_path)
    if not notifiers:
        return None
    alert_cls = getattr(wn, "Alert", None)

    def send(alert: dict[str, Any]) -> None:
        obj: Any = alert
        if alert_cls is not None:
            obj = _make_alert(alert_cls, alert)
        for n in notifiers:
            n.send(obj)

    return send


def _load(wn: Any, path: str) -> list[Any]:
    for name in ("load_notifiers", "notifiers_from_file", "from_config_file"):
        fn = getattr(wn, name, None)
        if callable(fn):
            return list(fn(path) or [])
    load_config = getattr(wn, "load_config", None)
    build = getattr(wn, "build_notifiers", None) or getattr(wn, "notifiers_from_config", None)
    if callable(load_config) and callable(build):
        return list(build(load_config(path)) or [])
    raise GpuclinicError("--config: this build's watch notifiers have no loader gpuclinic run understands")


def _make_alert(cls: Any, alert: dict[str, Any]) -> Any:
    """Build the watch agent's Alert from our dict, passing only the fields it accepts."""
    if dataclasses.is_dataclass(cls):
        names = {f.name for f in dataclasses.fields(cls)}
    else:
        try:
            names = set(inspect.signature(cls).parameters)
        except (TypeError, ValueError):
            names = set(alert)
    mapped = dict(alert)
    mapped.setdefault("message", alert.get("summary", ""))
    mapped.setdefault("code", f"run.interruption.{alert.get('title', '').rsplit(': ', 1)[-1]}")
    return cls(**{k: v for k, v in mapped.items() if k in names})
