"""HTTP: loopback by default, a token on every request when bound elsewhere or when set, no path tricks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from gpuclinic.errors import InputError
from gpuclinic.watch.agent import Agent
from gpuclinic.watch.server import WatchHTTPServer, is_loopback, parse_listen, serve
from watchproc import watch_argv


@pytest.fixture
def running(agent_factory: Callable[..., Agent]) -> Agent:
    a = agent_factory("demo", scale=60)
    a.start()
    for _ in range(3):
        a.tick()
    return a


@pytest.fixture
def servers() -> Iterator[list[WatchHTTPServer]]:
    made: list[WatchHTTPServer] = []
    yield made
    for s in made:
        s.stop()


def _client(srv: WatchHTTPServer) -> httpx.Client:
    return httpx.Client(base_url=f"http://127.0.0.1:{srv.server_address[1]}", trust_env=False, timeout=5)


def test_loopback_serves_without_token(running: Agent, servers: list[WatchHTTPServer]) -> None:
    srv, gen = serve(running, "127.0.0.1:0")
    servers.append(srv)
    assert gen is None and srv.token is None
    with _client(srv) as c:
        r = c.get("/")
        assert r.status_code == 200 and "<canvas" not in r.text and "/static/app.js" in r.text
        assert "default-src 'self'" in r.headers["content-security-policy"]
        assert c.get("/static/app.js").headers["content-type"].startswith("text/javascript")
        for bad in ("/static/../server.py", "/static/%2e%2e/server.py", "/static/nope.js", "/etc/passwd"):
            assert c.get(bad).status_code == 404
        st = c.get("/api/state").json()
        assert st["verdict"] in ("healthy", "warning", "drain") and len(st["gpus"]) == 4
        ser = c.get("/api/series").json()
        assert ser["fields"][0] == "ts" and len(ser["gpus"]["0"]) == 3
        since = ser["gpus"]["0"][1][0]
        assert len(c.get(f"/api/series?since={since}&gpu=0").json()["gpus"]["0"]) == 1
        assert "gpuclinic_gpu_info" in c.get("/metrics").text


def test_token_required_everywhere(running: Agent, servers: list[WatchHTTPServer]) -> None:
    srv, gen = serve(running, "127.0.0.1:0", token="s3cret-token-value")
    servers.append(srv)
    assert gen is None
    with _client(srv) as c:
        for path in ("/", "/metrics", "/api/state", "/api/events", "/static/app.js", "/healthz"):
            assert c.get(path).status_code == 401, path
        assert c.get("/api/state", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.get("/api/state", headers={"Authorization": "Bearer s3cret-token-value"}).status_code == 200
        assert c.get("/metrics", headers={"Authorization": "Bearer s3cret-token-value"}).status_code == 200
        r = c.get("/?token=s3cret-token-value")
        assert r.status_code == 200 and "HttpOnly" in r.headers["set-cookie"]
        # the browser's later requests carry the cookie
        assert c.get("/api/state").status_code == 200


def test_metrics_can_be_opened_to_prometheus(running: Agent, servers: list[WatchHTTPServer]) -> None:
    srv, _ = serve(running, "127.0.0.1:0", token="tok-123456", metrics_require_token=False)
    servers.append(srv)
    with _client(srv) as c:
        assert c.get("/metrics").status_code == 200
        assert c.get("/api/state").status_code == 401


def test_non_loopback_bind_generates_a_token(running: Agent, servers: list[WatchHTTPServer]) -> None:
    srv, gen = serve(running, "0.0.0.0:0")
    servers.append(srv)
    assert gen and len(gen) >= 24 and srv.token == gen
    with _client(srv) as c:
        assert c.get("/api/state").status_code == 401
        assert c.get("/api/state", headers={"Authorization": f"Bearer {gen}"}).status_code == 200


@pytest.mark.parametrize("value,want", [
    ("127.0.0.1:9847", ("127.0.0.1", 9847)), (":9000", ("127.0.0.1", 9000)), ("9000", ("127.0.0.1", 9000)),
    ("[::1]:9001", ("::1", 9001)), ("0.0.0.0:80", ("0.0.0.0", 80)), ("localhost", ("localhost", 9847)),
])
def test_parse_listen(value: str, want: tuple[str, int]) -> None:
    assert parse_listen(value) == want


@pytest.mark.parametrize("value", ["1.2.3.4:x", "::1:80", "host:70000"])
def test_parse_listen_rejects(value: str) -> None:
    with pytest.raises(InputError):
        parse_listen(value)


def test_is_loopback() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.5") and not is_loopback("example.org")


def test_events_api_lists_open_and_resolved(agent_factory: Callable[..., Agent], servers: list[Any]) -> None:
    a = agent_factory("power-brake-2x", scale=60)
    a.run(duration_s=50)
    srv, _ = serve(a, "127.0.0.1:0")
    servers.append(srv)
    with _client(srv) as c:
        evs = c.get("/api/events").json()["events"]
    brakes = [e for e in evs if e["code"] == "power.brake"]
    assert len(brakes) == 2 and all(e["resolved"] for e in brakes) and all(e["remedy"] for e in brakes)
    assert "key" not in brakes[0]


def test_dns_rebinding_is_refused_without_a_token(running: Agent, servers: list[WatchHTTPServer]) -> None:
    srv, _ = serve(running, "127.0.0.1:0")
    servers.append(srv)
    with _client(srv) as c:
        assert c.get("/api/state", headers={"Host": "evil.example:9847"}).status_code == 403
        assert c.get("/api/state", headers={"Host": "localhost:9847"}).status_code == 200
        assert c.get("/api/state", headers={"Host": "[::1]:9847"}).status_code == 200
        assert c.get("/metrics", headers={"Host": "127.0.0.1"}).status_code == 200


def test_401_page_says_how_to_pass_the_token(running: Agent, servers: list[WatchHTTPServer]) -> None:
    """Issue 14: off loopback, neither the agent nor the 401 page said how to pass the token."""
    srv, gen = serve(running, "127.0.0.1:0", token="s3cret-token-value")
    servers.append(srv)
    with _client(srv) as c:
        r = c.get("/")
        assert r.status_code == 401
        assert f"{srv.url}/?token=TOKEN" in r.text and "Authorization: Bearer TOKEN" in r.text
        assert "s3cret" not in r.text
        r = c.get("/", headers={"Host": "<script>x</script>"})
        assert "<script>" not in r.text


def test_watch_off_loopback_prints_how_to_pass_the_token() -> None:
    import subprocess

    r = subprocess.run(
        watch_argv("--duration", "2s", "--no-store", "--listen", "0.0.0.0:0", time_scale=60),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert "access token (shown once)" in r.stderr
    assert "/?token=TOKEN" in r.stderr and "Authorization: Bearer TOKEN" in r.stderr
