"""Notifiers: payloads and signatures per vendor, de-duplication, rate limits, retry then spool,
delivery after an outage (also across a restart), resolved notices, and secrets never in logs."""

from __future__ import annotations

import base64
import hashlib
import hmac
import socketserver
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from gpuclinic.watch.config import ChannelConfig, NotifyConfig, config_from_dict
from gpuclinic.watch.notify import Alert, Notifier, redact
from ports import free_port


def _alert(key: str = "rules:xid.79:GPU-2", status: str = "firing", sev: str = "critical") -> Alert:
    return Alert(key=key, code="xid.79", severity=sev, title="XID 79 on GPU 2: GPU has fallen off the bus",
                 status=status, host="node7", gpu=2, evidence=["NVRM: Xid (PCI:0000:3a:00): 79"],
                 remedy="Drain the node.", opened=1_780_000_000.0,
                 resolved=1_780_000_090.0 if status == "resolved" else None)


def _cfg(*channels: ChannelConfig, **kw: Any) -> NotifyConfig:
    opts: dict[str, Any] = {"backoff_s": 0.01, "max_attempts": 3, "spool_retry_s": 3600.0, **kw}
    return NotifyConfig(channels=list(channels), **opts)


def test_webhook_payload_dedup_and_resolved(receiver: Any, tmp_path: Path) -> None:
    n = Notifier(
        _cfg(ChannelConfig(type="webhook", url=receiver.url + "/hook")), spool_dir=tmp_path / "spool"
    )
    try:
        n.send(_alert())
        n.send(_alert())  # duplicate: dropped
        n.send(_alert(status="resolved"))
        assert n.flush(5)
        bodies = receiver.bodies()
        assert [b["status"] for b in bodies] == ["firing", "resolved"]
        b = bodies[0]
        assert b["schema"] == "gpuclinic.alert/1" and b["code"] == "xid.79" and b["severity"] == "critical"
        assert b["gpu"] == 2 and b["evidence"] and b["remedy"] == "Drain the node." and b["host"] == "node7"
        assert bodies[1]["resolved"].startswith("2026-")
        assert n.sent_total == 2 and n.spooled == 0
    finally:
        n.close()


def test_min_severity_per_channel(receiver: Any) -> None:
    n = Notifier(_cfg(ChannelConfig(type="webhook", url=receiver.url, min_severity="critical")))
    try:
        n.send(_alert(key="a", sev="warning"))
        n.send(_alert(key="b", sev="critical"))
        n.flush(5)
        assert [b["key"] for b in receiver.bodies()] == ["b"]
    finally:
        n.close()


def test_vendor_payloads(receiver: Any) -> None:
    chans = [
        ChannelConfig(type="slack", url=receiver.url + "/services/T000/B000/XXXXSECRETXXXX"),
        ChannelConfig(type="wecom", url=receiver.url + "/cgi-bin/webhook/send?key=wecomsecretkey"),
        ChannelConfig(
            type="feishu", url=receiver.url + "/open-apis/bot/v2/hook/feishu-token", secret="fsecret"
        ),
        ChannelConfig(
            type="dingtalk", url=receiver.url + "/robot/send?access_token=dtoken1234", secret="SECdt"
        ),
    ]
    n = Notifier(_cfg(*chans))
    try:
        t0 = time.time()
        n.send(_alert())
        n.flush(5)
        by_path = {urllib.parse.urlsplit(p).path: (p, b) for _, p, b in receiver.requests}
        slack = by_path["/services/T000/B000/XXXXSECRETXXXX"][1]
        assert (
            slack["text"].startswith("*[CRITICAL] node7: XID 79")
            and "What to do: Drain the node." in slack["text"]
        )
        wecom = by_path["/cgi-bin/webhook/send"][1]
        assert wecom["msgtype"] == "markdown" and "XID 79" in wecom["markdown"]["content"]
        feishu = by_path["/open-apis/bot/v2/hook/feishu-token"][1]
        assert feishu["msg_type"] == "text" and "XID 79" in feishu["content"]["text"]
        ts = feishu["timestamp"]
        assert abs(int(ts) - t0) < 5
        want = base64.b64encode(hmac.new(f"{ts}\nfsecret".encode(), b"", hashlib.sha256).digest()).decode()
        assert feishu["sign"] == want
        dpath, ding = by_path["/robot/send"]
        q = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(dpath).query))
        assert q["access_token"] == "dtoken1234" and abs(int(q["timestamp"]) / 1000 - t0) < 5
        mac = hmac.new(b"SECdt", f"{q['timestamp']}\nSECdt".encode(), hashlib.sha256).digest()
        assert q["sign"] == base64.b64encode(mac).decode()  # parse_qsl already url-decoded it
        assert ding["msgtype"] == "markdown" and ding["markdown"]["title"].startswith("[CRITICAL]")
    finally:
        n.close()


def test_vendor_error_codes_fail_delivery(receiver: Any, tmp_path: Path) -> None:
    receiver.reply = b'{"errcode": 310000, "errmsg": "sign not match"}'
    logs: list[str] = []
    n = Notifier(
        _cfg(
            ChannelConfig(
                type="dingtalk", url=receiver.url + "/robot/send?access_token=tok-abcdef", secret="SECxyz"
            )
        ),
        spool_dir=tmp_path / "s",
        log=logs.append,
    )
    try:
        n.send(_alert())
        n.flush(5)
        assert n.sent_total == 0 and n.failed_total == 1 and n.spooled == 1
        assert "sign not match" in (n.last_error or "")
        assert not any("tok-abcdef" in m or "SECxyz" in m for m in logs)
    finally:
        n.close()


def test_secrets_never_in_logs_even_when_the_server_echoes_them(receiver: Any, tmp_path: Path) -> None:
    receiver.status = 500  # replies "error for <path with the token>"
    url = receiver.url + "/hooks/very-secret-token-123?access_token=qtoken-456"
    logs: list[str] = []
    n = Notifier(
        _cfg(ChannelConfig(type="webhook", url=url, headers={"Authorization": "Bearer hdr-secret-789"})),
        spool_dir=tmp_path / "s",
        log=logs.append,
    )
    try:
        n.send(_alert())
        n.flush(5)
        assert len(receiver.requests) == 3  # max_attempts, with backoff
        text = "\n".join(logs) + (n.last_error or "")
        assert "HTTP 500" in text and "spooled" in text
        for secret in ("very-secret-token-123", "qtoken-456", "hdr-secret-789"):
            assert secret not in text
        spooled = "".join(p.read_text() for p in (tmp_path / "s").glob("*.json"))
        assert "very-secret-token-123" not in spooled and "qtoken-456" not in spooled
    finally:
        n.close()


def test_redact_handles_url_encoding() -> None:
    assert redact("GET /x?t=a%2Bb%2Fc", ["a+b/c"]) == "GET /x?t=***"


def test_outage_spools_then_delivers_after_restart(tmp_path: Path, receiver_cls: Any) -> None:
    port = free_port()  # tests/ports.py: one the other xdist worker's servers do not take meanwhile
    url = f"http://127.0.0.1:{port}/hook"  # nothing listens: connection refused
    cfg = _cfg(ChannelConfig(type="webhook", url=url))
    n = Notifier(cfg, spool_dir=tmp_path / "spool")
    n.send(_alert())
    n.send(_alert(key="k2"))
    n.flush(10)
    assert n.spooled == 2 and n.sent_total == 0 and "ConnectError" in (n.last_error or "")
    n.close()
    # the network comes back; a new agent process delivers the spool in order
    rec = receiver_cls(port)
    try:
        n2 = Notifier(
            _cfg(ChannelConfig(type="webhook", url=url), spool_retry_s=0.05), spool_dir=tmp_path / "spool"
        )
        got = rec.wait_for(lambda b: b["key"] == "k2", timeout=5)
        n2.close()
        assert got is not None
        assert [b["key"] for b in rec.bodies()] == ["rules:xid.79:GPU-2", "k2"]
        assert n2.spooled == 0
    finally:
        rec.close()


def test_rate_limit_holds_excess_alerts_in_the_spool(receiver: Any, tmp_path: Path) -> None:
    n = Notifier(
        _cfg(ChannelConfig(type="webhook", url=receiver.url), rate_limit_per_hour=2), spool_dir=tmp_path / "s"
    )
    try:
        for i in range(4):
            n.send(_alert(key=f"k{i}"))
        n.flush(5)
        assert [b["key"] for b in receiver.bodies()] == ["k0", "k1"]
        assert n.spooled == 2  # not lost: delivered when the hour's budget allows
    finally:
        n.close()


class _Smtp(socketserver.StreamRequestHandler):
    got: list[str] = []

    def handle(self) -> None:
        w = self.wfile.write
        w(b"220 localhost ESMTP test\r\n")
        data = False
        buf: list[str] = []
        for raw in self.rfile:
            line = raw.decode().rstrip("\r\n")
            if data:
                if line == ".":
                    data = False
                    _Smtp.got.append("\n".join(buf))
                    w(b"250 OK queued\r\n")
                else:
                    buf.append(line)
                continue
            cmd = line.split(" ")[0].upper()
            if cmd == "EHLO":
                w(b"250-localhost\r\n250 AUTH PLAIN\r\n")
            elif cmd == "AUTH":
                w(b"235 ok\r\n")
            elif cmd == "DATA":
                data = True
                w(b"354 go\r\n")
            elif cmd == "QUIT":
                w(b"221 bye\r\n")
                return
            else:
                w(b"250 OK\r\n")


def test_email_via_smtp() -> None:
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Smtp)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    try:
        cfg = config_from_dict(
            {
                "notify": {
                    "channel": [
                        {
                            "type": "email",
                            "smtp_host": "127.0.0.1",
                            "smtp_port": port,
                            "starttls": False,
                            "username": "u",
                            "password": "smtp-pass-xyz",
                            "sender": "gpu@example.org",
                            "to": ["ops@example.org"],
                        }
                    ]
                }
            }
        )
        n = Notifier(cfg.notify)
        n.send(_alert())
        n.flush(5)
        n.close()
        assert n.sent_total == 1
        msg = _Smtp.got[-1]
        assert "Subject: [CRITICAL] node7: XID 79" in msg and "To: ops@example.org" in msg
        assert "What to do: Drain the node." in msg and "smtp-pass-xyz" not in msg
    finally:
        srv.shutdown()
        srv.server_close()


def test_email_starttls_refused_is_reported_without_password(tmp_path: Path) -> None:
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Smtp)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        ch = ChannelConfig(
            type="email",
            smtp_host="127.0.0.1",
            smtp_port=srv.server_address[1],
            starttls=True,
            username="u",
            password="smtp-pass-xyz",
            sender="a@b.c",
            to=["d@e.f"],
        )
        logs: list[str] = []
        n = Notifier(_cfg(ch), spool_dir=tmp_path / "s", log=logs.append)
        n.send(_alert())
        n.flush(5)
        n.close()
        assert n.sent_total == 0 and n.spooled == 1
        assert "STARTTLS" in (n.last_error or "") or "SMTP" in (n.last_error or "")
        assert not any("smtp-pass-xyz" in m for m in logs)
    finally:
        srv.shutdown()
        srv.server_close()


def test_channel_config_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DT_URL", "https://oapi.dingtalk.com/robot/send?access_token=abc")
    monkeypatch.setenv("DT_SECRET", "SEC123")
    cfg = config_from_dict(
        {"notify": {"channel": [{"type": "dingtalk", "url_env": "DT_URL", "secret_env": "DT_SECRET"}]}}
    )
    ch = cfg.notify.channels[0]
    assert ch.url and ch.url.endswith("abc") and ch.secret == "SEC123"
