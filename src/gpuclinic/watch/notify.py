"""Alert delivery: JSON webhook, Slack, Feishu/Lark, DingTalk, WeCom and e-mail.

What makes alerts trustworthy rather than noisy:

* de-duplication: one message per event state (firing, resolved) within ``dedup_window``;
* a per-channel rate limit; alerts over the limit wait in the spool instead of being dropped;
* retries with exponential backoff, then an on-disk spool retried every ``spool_retry`` so an alert
  raised while the network is down arrives when it comes back (and survives an agent restart);
* secrets (webhook URLs, access tokens, signing secrets, SMTP passwords) never reach logs or error
  text: every message passes through :func:`redact`.

Signing follows the vendors' documented schemes: DingTalk appends ``timestamp`` (ms) and
``sign = urlencode(base64(HMAC-SHA256(key=secret, msg=f"{timestamp}\\n{secret}")))`` to the URL
(open.dingtalk.com "custom robot" docs); Feishu/Lark puts ``timestamp`` (s) and
``sign = base64(HMAC-SHA256(key=f"{timestamp}\\n{secret}", msg=b""))`` in the body.

The ``run`` supervisor reuses :class:`Notifier` and :class:`Alert`.
"""

from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import hmac
import json
import os
import queue
import smtplib
import socket
import ssl
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import httpx

from gpuclinic.watch.config import ChannelConfig, NotifyConfig

CHANNEL_TYPES = {"webhook", "slack", "feishu", "lark", "dingtalk", "wecom", "email"}
_SEV_RANK = {"info": 0, "warning": 1, "critical": 2}


@dataclass
class Alert:
    """One notification: an event that opened (``firing``) or closed (``resolved``)."""

    key: str
    code: str
    severity: str  # info | warning | critical
    title: str
    status: str = "firing"  # firing | resolved
    host: str = field(default_factory=socket.gethostname)
    gpu: int | None = None
    uuid: str | None = None
    evidence: list[str] = field(default_factory=list)
    remedy: str = ""
    opened: float = field(default_factory=time.time)
    resolved: float | None = None
    data: dict[str, Any] = field(default_factory=dict)
    source: str = "gpuclinic watch"

    @property
    def ident(self) -> str:
        return f"{self.key}@{self.opened:.3f}:{self.status}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": "gpuclinic.alert/1",
            "status": self.status,
            "severity": self.severity,
            "code": self.code,
            "title": self.title,
            "host": self.host,
            "gpu": self.gpu,
            "uuid": self.uuid,
            "evidence": self.evidence,
            "remedy": self.remedy,
            "opened": _iso(self.opened),
            "resolved": _iso(self.resolved) if self.resolved else None,
            "opened_ts": self.opened,
            "resolved_ts": self.resolved,
            "key": self.key,
            "data": self.data,
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Alert:
        return cls(
            key=d["key"],
            code=d["code"],
            severity=d["severity"],
            title=d["title"],
            status=d["status"],
            host=d.get("host") or "",
            gpu=d.get("gpu"),
            uuid=d.get("uuid"),
            evidence=list(d.get("evidence") or []),
            remedy=d.get("remedy") or "",
            opened=float(d["opened_ts"]),
            resolved=d.get("resolved_ts"),
            data=dict(d.get("data") or {}),
            source=d.get("source") or "gpuclinic watch",
        )

    def headline(self) -> str:
        tag = "RESOLVED" if self.status == "resolved" else self.severity.upper()
        return f"[{tag}] {self.host}: {self.title}"

    def body(self) -> str:
        lines = []
        if self.status == "resolved" and self.resolved:
            lines.append(f"Resolved after {_dur(self.resolved - self.opened)} (opened {_iso(self.opened)}).")
        else:
            lines.append(f"Opened {_iso(self.opened)} - code {self.code}.")
        syms = self.data.get("symptoms")
        if syms and isinstance(syms, list):
            lines.append("Explains: " + ", ".join(str(x) for x in syms))
        lines += [f"- {e}" for e in self.evidence[:8]]
        if self.remedy and self.status != "resolved":
            lines.append(f"What to do: {self.remedy}")
        return "\n".join(lines)


def _iso(ts: float | None) -> str:
    if ts is None:
        return ""
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).isoformat(timespec="seconds")


def _dur(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


def redact(text: str, secrets: list[str]) -> str:
    """Replace every secret (and its URL-encoded form) in ``text`` with ``***``."""
    for s in sorted({x for x in secrets if x and len(x) >= 4}, key=len, reverse=True):
        text = text.replace(s, "***")
        q = urllib.parse.quote(s, safe="")
        if q != s:
            text = text.replace(q, "***")
    return text


class DeliveryError(Exception):
    """A delivery attempt failed; the message is already redacted."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


class Channel:
    """A destination.  ``label`` identifies it in logs without revealing the URL's secret parts."""

    def __init__(self, cfg: ChannelConfig, index: int) -> None:
        self.cfg = cfg
        self.kind = "feishu" if cfg.type == "lark" else cfg.type
        host = urllib.parse.urlsplit(cfg.url).hostname if cfg.url else cfg.smtp_host
        self.label = cfg.name or f"{cfg.type}#{index + 1} ({host or '?'})"
        # a stable id for the spool that does not contain the secret
        ident = f"{cfg.type}|{cfg.url or ''}|{cfg.smtp_host or ''}|{','.join(cfg.to)}"
        self.id = f"{cfg.type}-{hashlib.sha256(ident.encode()).hexdigest()[:12]}"

    def secrets(self) -> list[str]:
        out = [x for x in (self.cfg.secret, self.cfg.password) if x]
        if self.cfg.url:
            out.append(self.cfg.url)
            parts = urllib.parse.urlsplit(self.cfg.url)
            if parts.query:
                out.append(parts.query)
                out += [v for _, v in urllib.parse.parse_qsl(parts.query) if len(v) >= 4]
            if parts.path and len(parts.path) > 1:
                out.append(parts.path)  # Slack/Feishu/WeCom put the token in the path
                out += [seg for seg in parts.path.split("/") if len(seg) >= 8]
            if parts.password:
                out.append(parts.password)
        out += [
            v for k, v in self.cfg.headers.items() if k.lower() in ("authorization", "x-api-key", "token")
        ]
        return out

    def min_rank(self, default: str) -> int:
        return _SEV_RANK[self.cfg.min_severity or default]

    # -- building requests ----------------------------------------------------------------------------
    def request(self, alert: Alert, now: float) -> tuple[str, dict[str, Any]]:
        """(url, JSON body) for HTTP channels."""
        assert self.cfg.url
        url, text, head = self.cfg.url, alert.body(), alert.headline()
        if self.kind == "webhook":
            return url, alert.to_dict()
        if self.kind == "slack":
            return url, {"text": f"*{head}*\n{text}"}
        if self.kind == "wecom":
            return url, {"msgtype": "markdown", "markdown": {"content": f"**{head}**\n{text}"}}
        if self.kind == "dingtalk":
            if self.cfg.secret:
                ts = str(int(now * 1000))
                mac = hmac.new(
                    self.cfg.secret.encode(), f"{ts}\n{self.cfg.secret}".encode(), hashlib.sha256
                ).digest()
                sign = urllib.parse.quote_plus(base64.b64encode(mac).decode())
                url = f"{url}{'&' if '?' in url else '?'}timestamp={ts}&sign={sign}"
            return url, {
                "msgtype": "markdown",
                "markdown": {"title": head[:64], "text": f"**{head}**\n\n{text}"},
            }
        if self.kind == "feishu":
            body: dict[str, Any] = {"msg_type": "text", "content": {"text": f"{head}\n{text}"}}
            if self.cfg.secret:
                ts = str(int(now))
                mac = hmac.new(f"{ts}\n{self.cfg.secret}".encode(), b"", hashlib.sha256).digest()
                body = {"timestamp": ts, "sign": base64.b64encode(mac).decode(), **body}
            return url, body
        raise AssertionError(self.kind)

    def deliver(self, alert: Alert, client: httpx.Client) -> None:
        if self.kind == "email":
            self._email(alert)
            return
        url, body = self.request(alert, time.time())
        try:
            r = client.post(url, json=body, headers=self.cfg.headers or None, timeout=self.cfg.timeout_s)
        except httpx.HTTPError as e:
            raise DeliveryError(redact(f"{self.label}: {type(e).__name__}: {e}", self.secrets())) from None
        if r.status_code >= 400:
            permanent = r.status_code in (400, 401, 403, 404, 410)
            raise DeliveryError(
                redact(f"{self.label}: HTTP {r.status_code} {r.text[:200]}", self.secrets()),
                permanent=permanent,
            )
        if self.kind in ("dingtalk", "wecom", "feishu"):
            try:
                j = r.json()
            except ValueError:
                j = {}
            code = j.get("errcode", j.get("code", j.get("StatusCode", 0))) if isinstance(j, dict) else 0
            if code not in (0, None):
                msg = j.get("errmsg") or j.get("msg") or j.get("StatusMessage") or ""
                raise DeliveryError(redact(f"{self.label}: rejected (code {code}: {msg})", self.secrets()))

    def _email(self, alert: Alert) -> None:
        c = self.cfg
        assert c.smtp_host and c.sender
        msg = EmailMessage()
        msg["Subject"] = alert.headline()
        msg["From"] = c.sender
        msg["To"] = ", ".join(c.to)
        msg.set_content(alert.body() + "\n\n" + json.dumps(alert.to_dict(), indent=1))
        try:
            smtp: smtplib.SMTP
            if c.ssl:
                smtp = smtplib.SMTP_SSL(
                    c.smtp_host, c.smtp_port, timeout=c.timeout_s, context=ssl.create_default_context()
                )
            else:
                smtp = smtplib.SMTP(c.smtp_host, c.smtp_port, timeout=c.timeout_s)
            with smtp:
                if c.starttls and not c.ssl:
                    smtp.starttls(context=ssl.create_default_context())
                if c.username:
                    smtp.login(c.username, c.password or "")
                smtp.send_message(msg)
        except (OSError, smtplib.SMTPException) as e:
            raise DeliveryError(redact(f"{self.label}: {type(e).__name__}: {e}", self.secrets())) from None


class Notifier:
    """Send alerts to every configured channel from one background thread; never blocks the caller."""

    def __init__(
        self,
        cfg: NotifyConfig,
        *,
        spool_dir: str | os.PathLike[str] | None = None,
        log: Callable[[str], None] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.cfg = cfg
        self.channels = [Channel(c, i) for i, c in enumerate(cfg.channels)]
        self._secrets = [s for ch in self.channels for s in ch.secrets()]
        self._log_fn = log or (lambda m: None)
        sd = spool_dir or cfg.spool_dir
        self.spool_dir = Path(sd) if sd else None
        self._client = httpx.Client(
            transport=transport, follow_redirects=False, headers={"User-Agent": "gpuclinic-watch"}
        )
        self._q: queue.Queue[tuple[Channel, Alert] | None] = queue.Queue()
        self._sent: dict[tuple[str, str], float] = {}  # (channel id, alert ident) -> time sent
        self._window: dict[str, deque[float]] = {ch.id: deque() for ch in self.channels}
        self._mem_spool: list[tuple[str, dict[str, Any]]] = []  # when the spool dir is unwritable
        self._lock = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()
        self._pending = 0
        self.sent_total = 0
        self.failed_total = 0
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpuclinic-notify", daemon=True)
        if self.channels:
            self._thread.start()

    def log(self, msg: str) -> None:
        self._log_fn(redact(msg, self._secrets))

    # -- public ---------------------------------------------------------------------------------------
    def send(self, alert: Alert) -> None:
        """Queue ``alert`` for every channel that wants its severity; duplicates are dropped."""
        if alert.status == "resolved" and not self.cfg.send_resolved:
            return
        rank = _SEV_RANK.get(alert.severity, 1)
        now = time.time()
        for ch in self.channels:
            if rank < ch.min_rank(self.cfg.min_severity):
                continue
            k = (ch.id, alert.ident)
            with self._lock:
                last = self._sent.get(k)
                if last is not None and now - last < self.cfg.dedup_window_s:
                    continue
                self._sent[k] = now
                self._pending += 1
                self._idle.clear()
            self._q.put((ch, alert))

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until queued alerts were delivered or spooled."""
        return self._idle.wait(timeout)

    @property
    def spooled(self) -> int:
        n = len(self._mem_spool)
        if self.spool_dir and self.spool_dir.is_dir():
            n += sum(1 for p in self.spool_dir.glob("*.json"))
        return n

    def close(self) -> None:
        self._stop.set()
        self._q.put(None)
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._client.close()

    # -- worker ---------------------------------------------------------------------------------------
    def _run(self) -> None:
        self._retry_spool()  # alerts left by a previous run (network was down) go first
        next_spool = time.monotonic() + self.cfg.spool_retry_s
        while not self._stop.is_set():
            try:
                item = self._q.get(timeout=0.2)
            except queue.Empty:
                item = None
            if item is not None:
                ch, alert = item
                self._attempt(ch, alert, spooled=False)
                with self._lock:
                    self._pending -= 1
                    if self._pending <= 0 and self._q.empty():
                        self._idle.set()
            if time.monotonic() >= next_spool:
                next_spool = time.monotonic() + self.cfg.spool_retry_s
                self._retry_spool()

    def _rate_ok(self, ch: Channel) -> bool:
        w = self._window[ch.id]
        now = time.monotonic()
        while w and now - w[0] > 3600:
            w.popleft()
        if len(w) >= self.cfg.rate_limit_per_hour:
            return False
        w.append(now)
        return True

    def _attempt(self, ch: Channel, alert: Alert, *, spooled: bool) -> bool:
        """Deliver now; ``spooled`` alerts get one try (the caller removes them on success)."""
        if not self._rate_ok(ch):
            if not spooled:
                self.log(
                    f"notify: {ch.label}: rate limit ({self.cfg.rate_limit_per_hour}/h) reached; spooled "
                    f"'{alert.headline()}'"
                )
                self._spool(ch, alert)
            return False
        delay = self.cfg.backoff_s
        attempts = 1 if spooled else max(1, self.cfg.max_attempts)
        for i in range(attempts):
            try:
                ch.deliver(alert, self._client)
                self.sent_total += 1
                if spooled:
                    self.log(f"notify: {ch.label}: delivered spooled alert '{alert.headline()}'")
                return True
            except DeliveryError as e:
                self.last_error = str(e)
                if e.permanent:
                    self.failed_total += 1
                    self.log(f"notify: {e} (not retried)")
                    # a spooled alert the receiver refuses for good is dropped, not retried forever
                    return spooled
                if i + 1 < attempts and not self._stop.wait(delay):
                    delay *= 2
        self.failed_total += 1
        if not spooled:
            self.log(f"notify: {self.last_error}; spooled for retry")
            self._spool(ch, alert)
        return False

    def _spool(self, ch: Channel, alert: Alert) -> None:
        rec = {"channel": ch.id, "alert": alert.to_dict(), "spooled_at": time.time()}
        if self.spool_dir is not None:
            try:
                self.spool_dir.mkdir(parents=True, exist_ok=True)
                digest = hashlib.sha256((ch.id + alert.ident).encode()).hexdigest()[:16]
                name = f"{int(time.time() * 1000)}-{digest}"
                tmp = self.spool_dir / f".{name}.tmp"
                tmp.write_text(json.dumps(rec), encoding="utf-8")
                os.replace(tmp, self.spool_dir / f"{name}.json")
                return
            except OSError as e:
                self.log(f"notify: cannot write spool ({e.strerror}); keeping the alert in memory")
        self._mem_spool.append((ch.id, rec))
        del self._mem_spool[:-1000]

    def _retry_spool(self) -> None:
        by_id = {ch.id: ch for ch in self.channels}
        mem, self._mem_spool = self._mem_spool, []
        for cid, rec in mem:
            ch = by_id.get(cid)
            if ch is not None and not self._attempt(ch, Alert.from_dict(rec["alert"]), spooled=True):
                self._mem_spool.append((cid, rec))
        if self.spool_dir is None or not self.spool_dir.is_dir():
            return
        for p in sorted(self.spool_dir.glob("*.json")):
            if self._stop.is_set():
                return
            try:
                rec = json.loads(p.read_text(encoding="utf-8"))
                ch = by_id.get(rec["channel"])
                alert = Alert.from_dict(rec["alert"])
            except (OSError, ValueError, KeyError):
                p.unlink(missing_ok=True)
                continue
            if ch is None:  # channel removed from the config: keep a week, then drop
                if time.time() - float(rec.get("spooled_at", 0)) > 7 * 86400:
                    p.unlink(missing_ok=True)
                continue
            if self._attempt(ch, alert, spooled=True):
                p.unlink(missing_ok=True)
            else:
                break  # still down: try the rest next round, in order
