"""``net --registries`` and ``net --ssh`` against loopback servers only: two docker-registry instances
(an origin and a mirror of it), a dead mirror, and the host's mirror config in a temporary root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuclinic.cli.net_registry import best_mirror, doc_findings, parse_ratelimit, switch_lines
from gpuclinic.knowledge import codes as K
from gpuclinic.sources.registry import RegistryProbe, configured_specs, read_mirror_config
from gpuclinic.transfer.wansim_tcp import ProxyKnobs, TcpProxy
from ports import free_port
from realtools import require
from transfer.oci_env import MiB, Registry, build_image, push

from .servers import LoopbackFileServer

GPUCLINIC = [sys.executable, "-m", "gpuclinic"]


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    tools = require("docker-registry", "skopeo")
    root = tmp_path_factory.mktemp("reg")
    reg = Registry(tools["docker-registry"], root / "registry")
    try:
        build_image(root / "src", [24 * MiB, 1000])
        push(tools["skopeo"], root / "src", f"{reg.host}/library/alpine:latest")
        yield reg
    finally:
        reg.stop()


def _write_config(root: Path, mirror: str, dead: str) -> None:
    (root / "etc/docker").mkdir(parents=True)
    (root / "etc/docker/daemon.json").write_text(
        json.dumps(
            {
                "registry-mirrors": [mirror, dead],
                "proxies": {"https-proxy": "http://user:secretpw@proxy.corp:3128"},
            }
        )
    )
    (root / "etc/containerd/certs.d/docker.io").mkdir(parents=True)
    (root / "etc/containerd/config.toml").write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = '
        '"/etc/containerd/certs.d"\n'
    )
    (root / "etc/containerd/certs.d/docker.io/hosts.toml").write_text(
        f'server = "https://registry-1.docker.io"\n[host."{mirror}"]\n  capabilities = ["pull", "resolve"]\n'
    )
    (root / "etc/containers").mkdir(parents=True)
    (root / "etc/containers/registries.conf").write_text(
        '[[registry]]\nprefix = "docker.io"\nlocation = "docker.io"\n[[registry.mirror]]\n'
        f'location = "{dead.split("://")[1]}"\ninsecure = true\n'
    )


def test_mirror_config_readers(tmp_path: Path) -> None:
    _write_config(tmp_path, "http://127.0.0.1:5001", "http://127.0.0.1:5002")
    mc = read_mirror_config(tmp_path)
    got = {(u, Path(w).name) for u, w in mc.mirrors["docker.io"]}
    assert got == {
        ("http://127.0.0.1:5001", "daemon.json"),
        ("http://127.0.0.1:5002", "daemon.json"),
        ("http://127.0.0.1:5001", "hosts.toml"),
        ("http://127.0.0.1:5002", "registries.conf"),
    }
    assert mc.proxies and "secretpw" not in str(mc.proxies)
    specs = configured_specs(mc, [])
    assert sorted(s.url for s in specs) == ["http://127.0.0.1:5001", "http://127.0.0.1:5002"]
    (tmp_path / "etc/docker/daemon.json").write_text("{not json")
    assert any("not valid JSON" in p for p in read_mirror_config(tmp_path).problems)


def test_ratelimit_header_and_choice() -> None:
    assert parse_ratelimit("76;w=21600") == (76, 21600)
    assert parse_ratelimit("100") == (100, None) and parse_ratelimit(None) is None
    a = RegistryProbe("a", "https://a.example", "docker.io", [], ok=True, one_conn=1e6, n_conn=4e6)
    b = RegistryProbe("b", "https://b.example", "docker.io", [], ok=True, one_conn=2e6, n_conn=8e6)
    c = RegistryProbe("c", "https://c.example", "docker.io", [], ok=False, error="dead")
    assert best_mirror([a, b, c], "docker.io") is b
    lines = {s["runtime"]: s for s in switch_lines(b, "docker.io")}
    assert lines["docker"]["lines"][1] == '  "registry-mirrors": ["https://b.example"]'
    assert lines["docker"]["restart"] == "sudo systemctl restart docker"
    assert lines["containerd"]["file"] == "/etc/containerd/certs.d/docker.io/hosts.toml"
    assert 'server = "https://registry-1.docker.io"' in lines["containerd"]["lines"]
    assert 'location = "b.example"' in lines["podman"]["lines"]


def test_net_registries_end_to_end(registry: Registry, tmp_path: Path) -> None:
    # the mirror is the same registry behind a per-connection cap; a dead port is configured too
    with TcpProxy("127.0.0.1", registry.port, ProxyKnobs(rate_per_conn=2 * MiB)) as mirror:
        dead = f"http://127.0.0.1:{free_port()}"
        _write_config(tmp_path, mirror.url, dead)
        r = subprocess.run(
            [
                *GPUCLINIC,
                "net",
                "--registries",
                "--json",
                "--endpoint",
                f"http://{registry.host}#library/alpine:latest",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env={**__import__("os").environ, "GPUCLINIC_CONFIG_ROOT": str(tmp_path)},
        )
    assert r.returncode == 1, r.stderr  # warnings: a dead configured mirror, a per-connection cap
    doc = json.loads(r.stdout)
    probes = {p["url"]: p for p in doc["probes"]}
    origin = probes[f"http://{registry.host}"]
    assert origin["ok"] and origin["blob_first_byte_ms"] is not None and origin["one_conn"] > 0
    m = probes[mirror.url]
    assert m["ok"] and m["mirror_of"] == "docker.io" and m["n_conn"] > 2 * m["one_conn"]
    assert not probes[dead]["ok"] and probes[dead]["stage"] == "v2"
    assert any("does not work" in f and dead in f for f in doc["findings"])
    assert any("per-connection cap" in f for f in doc["findings"])
    rec = doc["recommendations"][0]
    assert rec["upstream"] == "docker.io" and rec["mirror"] == mirror.url
    docker = next(s for s in rec["switch"] if s["runtime"] == "docker")
    assert f'"registry-mirrors": ["{mirror.url}"]' in "\n".join(docker["lines"])
    assert "secretpw" not in r.stdout


def test_net_ssh_probe(tmp_path: Path) -> None:
    tools = require("sshd", "ssh", "ssh-keygen")
    from transfer.ssh_env import Sshd

    sshd = Sshd(tools["sshd"], tools["ssh-keygen"], tmp_path / "sshd")
    try:
        with TcpProxy("127.0.0.1", sshd.port, ProxyKnobs(rate_per_conn=1 * MiB, latency=0.02)) as px:
            cfg = sshd.client_config(px.port)
            r = subprocess.run(
                [*GPUCLINIC, "net", "--ssh", "testbox", "-e", f"ssh -F {cfg}", "--json"],
                capture_output=True,
                text=True,
                timeout=120,
            )
    finally:
        sshd.stop()
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["target"].endswith(f"@127.0.0.1:{px.port}")
    assert doc["per_connection_cap"] is True and doc["gain"] > 4
    assert 0.9 * MiB < doc["probe"]["one_stream"] < 1.2 * MiB
    assert doc["probe"]["rtt_s"] >= 0.02
    assert any("ControlMaster" in n for n in doc["notes"])


def test_plain_net_reports_registries_as_findings(registry: Registry, tmp_path: Path) -> None:
    """A plain `net` run probes registries beside the other endpoints and reports them through the
    finding model: codes from codes.json, the exit code, the JSON report and the table."""
    with (
        TcpProxy("127.0.0.1", registry.port, ProxyKnobs(rate_per_conn=2 * MiB)) as mirror,
        LoopbackFileServer() as files,
    ):
        dead = f"http://127.0.0.1:{free_port()}"
        _write_config(tmp_path, mirror.url, dead)
        env = {**os.environ, "GPUCLINIC_CONFIG_ROOT": str(tmp_path)}
        args = [
            "--timeout",
            "40",
            "--endpoint",
            f"pypi={files.url}/simple/",
            "--endpoint",
            f"registry=http://{registry.host}#library/alpine:latest",
        ]
        r = subprocess.run(
            [*GPUCLINIC, "net", "--json", *args], capture_output=True, text=True, timeout=120, env=env
        )
        plain = subprocess.run(
            [*GPUCLINIC, "net", *args], capture_output=True, text=True, timeout=120, env=env
        )
    assert r.returncode == 1, r.stderr  # warnings: a dead configured mirror
    doc = json.loads(r.stdout)
    assert len(doc["facts"]["network"]["probes"]) == 1  # the pypi endpoint, probed as before
    reg = doc["facts"]["network"]["extra"]["registries"]
    probes = {p["url"]: p for p in reg["probes"]}
    assert probes[f"http://{registry.host}"]["ok"] and probes[mirror.url]["mirror_of"] == "docker.io"
    found = {f["code"]: f for f in doc["findings"]}
    down = found["network.registry_mirror_down"]
    assert down["severity"] == "warning" and dead in down["title"] and "daemon.json" in down["title"]
    assert found["network.registry_per_connection_cap"]["severity"] == "info"
    assert all(K.require(c).family.value == "network" for c in found)
    assert plain.returncode == 1
    assert "registry" in plain.stdout and "FAIL" in plain.stdout and "does not work" in plain.stdout
    assert "secretpw" not in r.stdout + plain.stdout


def test_registry_checks_on_recorded_probes() -> None:
    """Rate limit, unreachable registry, unreadable config and a faster mirror, from probe records
    (a loopback docker-registry sends no ratelimit headers)."""
    hub: dict[str, Any] = {
        "id": "dockerhub",
        "url": "https://registry-1.docker.io",
        "host": "docker.io",
        "mirror_of": None,
        "configured_in": [],
        "ok": True,
        "one_conn": 1 * MiB,
        "n_conn": 1.2 * MiB,
        "n": 4,
        "ratelimit": {"ratelimit-remaining": "3;w=21600"},
    }
    nvcr: dict[str, Any] = {
        "id": "nvcr",
        "url": "https://nvcr.io",
        "host": "nvcr.io",
        "mirror_of": None,
        "configured_in": [],
        "ok": False,
        "stage": "v2",
        "error": "connect timeout",
        "ratelimit": {},
    }
    fast = {
        "id": "m",
        "url": "https://m.example",
        "host": "m.example",
        "mirror_of": "docker.io",
        "configured_in": [],
        "ok": True,
        "one_conn": 8 * MiB,
        "n_conn": 9 * MiB,
        "n": 4,
        "ratelimit": {},
    }
    rec = {
        "upstream": "docker.io",
        "mirror": "https://m.example",
        "switch": switch_lines(
            RegistryProbe("m", "https://m.example", "docker.io", [], ok=True), "docker.io"
        ),
    }
    doc = {
        "probes": [hub, nvcr, fast],
        "config": {"problems": ["/etc/docker/daemon.json: not valid JSON"]},
        "recommendations": [rec],
    }
    got = {f.code: f for f in doc_findings(doc)}
    assert (
        got["network.registry_ratelimit_low"].title == "dockerhub: only 3 pulls left per 6 h for this address"
    )
    assert "nvcr" in got["network.registry_unreachable"].title
    assert "daemon.json" in got["network.registry_config_invalid"].title
    faster = got["network.registry_mirror_faster"]
    assert "7.5x faster" in faster.title and '"registry-mirrors": ["https://m.example"]' in faster.remedy
    assert all(f.severity == K.severity(f.code) for f in got.values())
    # plenty of pulls left and a slower mirror: silence
    hub["ratelimit"] = {"ratelimit-remaining": "76;w=21600"}
    fast["n_conn"] = fast["one_conn"] = 1.1 * MiB
    assert {f.code for f in doc_findings(doc)} == {
        "network.registry_unreachable",
        "network.registry_config_invalid",
    }


def test_doctor_net_reports_registries_like_net(registry: Registry, tmp_path: Path) -> None:
    """``doctor --net`` probes the registries of the network config ([[registry]]) and the host's
    configured mirrors through the same code as ``net``: the same probes under
    facts.network.extra.registries and the same network.registry_* findings, in the doctor report."""
    with TcpProxy("127.0.0.1", registry.port) as mirror:
        dead = f"http://127.0.0.1:{free_port()}"
        _write_config(tmp_path, mirror.url, dead)
        netcfg = tmp_path / "network.toml"
        netcfg.write_text(
            f'defaults = false\n[[registry]]\nurl = "http://{registry.host}"\n'
            'image = "library/alpine:latest"\n'
        )
        env = {**os.environ, "GPUCLINIC_CONFIG_ROOT": str(tmp_path), "GPUCLINIC_NETWORK_CONFIG": str(netcfg)}
        runs = {
            cmd: subprocess.run(
                [*GPUCLINIC, *cmd.split(), "--quick", "--json"], capture_output=True, text=True, timeout=120,
                env=env,
            )
            for cmd in ("doctor --net", "net")
        }
        term = subprocess.run(
            [*GPUCLINIC, "doctor", "--net", "--quick"], capture_output=True, text=True, timeout=120, env=env
        )
    docs = {}
    for cmd, r in runs.items():
        assert r.returncode in (1, 2, 3), (cmd, r.returncode, r.stderr)  # at least the dead mirror's warning
        docs[cmd] = json.loads(r.stdout)
    regs = {cmd: d["facts"]["network"]["extra"]["registries"] for cmd, d in docs.items()}
    for reg in regs.values():
        probes = {p["url"]: p for p in reg["probes"]}
        assert set(probes) == {f"http://{registry.host}", mirror.url, dead}
        assert probes[f"http://{registry.host}"]["ok"] and probes[mirror.url]["ok"]
        assert not probes[dead]["ok"] and probes[dead]["configured_in"]
    codes = {
        cmd: sorted(f["code"] for f in d["findings"] if f["code"].startswith("network.registry_"))
        for cmd, d in docs.items()
    }
    assert codes["doctor --net"] == codes["net"] and "network.registry_mirror_down" in codes["net"]
    down = next(f for f in docs["doctor --net"]["findings"] if f["code"] == "network.registry_mirror_down")
    assert down["severity"] == "warning" and dead in down["title"] and down["family"] == "network"
    assert "does not work" in term.stdout and "secretpw" not in term.stdout + runs["doctor --net"].stdout
    # without --net, doctor probes no registry at all
    quiet = subprocess.run([*GPUCLINIC, "doctor", "--quick", "--json"], capture_output=True, text=True,
                           timeout=120, env=env)
    assert "registries" not in json.dumps((json.loads(quiet.stdout).get("facts") or {}).get("network") or {})


def test_network_config_registry_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``[[registry]]`` entries become probe specs (mirror_of and image kept) beside or instead of the
    known registries; an entry without a url is a one-line usage error of ``net``."""
    from gpuclinic.sources.registry_run import plan

    cfg = tmp_path / "network.toml"
    monkeypatch.setenv("GPUCLINIC_NETWORK_CONFIG", str(cfg))
    monkeypatch.setenv("GPUCLINIC_CONFIG_ROOT", str(tmp_path))  # no host mirror config
    cfg.write_text('registries = false\n[[registry]]\nurl = "https://harbor.corp.example/"\nimage = "a/b:1"\n'
                   '[[registry]]\nurl = "http://127.0.0.1:5000"\nmirror_of = "docker.io"\n')
    specs, mc = plan([], False)
    assert mc is not None
    assert [(s.url, s.image, s.mirror_of) for s in specs] == [
        ("https://harbor.corp.example", "a/b:1", None),
        ("http://127.0.0.1:5000", "library/alpine:latest", "docker.io"),
    ]
    cfg.write_text('[[registry]]\nurl = "https://harbor.corp.example"\n')  # plus the known ones
    specs, _ = plan([], False)
    assert specs[0].url == "https://harbor.corp.example" and len(specs) > 5
    assert plan([], True) == ([], None)  # --endpoint narrowed the run to other endpoints
    cfg.write_text('defaults = false\n[[registry]]\nimage = "x:1"\n')
    r = subprocess.run([*GPUCLINIC, "net", "--quick"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "GPUCLINIC_NETWORK_CONFIG": str(cfg)})
    assert r.returncode == 64 and "registry #1 needs a url" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
