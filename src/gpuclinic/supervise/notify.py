"""Send interruptions through the watch agent's notifiers (same TOML config as ``gpuclinic watch``).

A thin adapter over :class:`gpuclinic.watch.notify.Notifier`, so ``run`` never grows its own
webhook code: de-duplication, retries, the on-disk spool and secret redaction stay in one place.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from gpuclinic.supervise.classify import class_info


class RunNotifier:
    """Callable taking the supervisor's alert dict; :meth:`close` waits briefly for delivery."""

    def __init__(self, notifier: Any, alert_cls: Any) -> None:
        self._n = notifier
        self._alert = alert_cls

    def __call__(self, alert: dict[str, Any]) -> None:
        cls = str(alert.get("class", "unknown"))
        gpu = alert.get("gpu") or {}
        self._n.send(self._alert(
            key=f"run/{alert.get('run_id')}/attempt/{alert.get('attempt')}",
            code=f"run.interruption.{cls}",
            severity=str(alert.get("severity", "critical")),
            title=f"training interrupted ({class_info(cls)['title']}): {alert.get('action', '')}",
            host=str(alert.get("host") or socket.gethostname()),
            gpu=gpu.get("index"),
            uuid=gpu.get("uuid"),
            evidence=[str(alert.get("summary", ""))] + [str(e) for e in alert.get("evidence", [])][:7],
            remedy=str(alert.get("remedy") or class_info(cls).get("remedy", "")),
            opened=float(alert.get("at") or 0.0),
            data={k: alert.get(k) for k in ("class", "action", "attempt", "command", "lost_s", "run_id")},
            source="gpuclinic run",
        ))

    def close(self, timeout: float = 10.0) -> None:
        self._n.flush(timeout)
        self._n.close()


def load_notifier(config_path: str, log: Callable[[str], None] | None = None) -> RunNotifier | None:
    """Notifier for the channels in a watch config; None when it configures none."""
    from gpuclinic.watch.config import load_config
    from gpuclinic.watch.notify import Alert, Notifier

    cfg = load_config(config_path)
    if not cfg.notify.channels:
        return None
    return RunNotifier(Notifier(cfg.notify, log=log), Alert)
