"""Proxy/pip/git/HF settings parsing, redaction, endpoint data and config."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuclinic.errors import InputError
from gpuclinic.facts.network import NetworkFacts, ProxySettings
from gpuclinic.facts.snapshot import Snapshot
from gpuclinic.knowledge import load_data
from gpuclinic.knowledge.endpoints import load_endpoints, parse_endpoint_arg
from gpuclinic.sources.network import (
    bypasses_proxy,
    configured_endpoints,
    read_proxy_settings,
    redact_url,
    route_for,
)

GIT_OUT = (
    "http.proxy http://bob:hunter2@proxy.corp:3128\n"
    "url.https://gh-proxy.com/https://github.com/.insteadof https://github.com/\n"
    "url.git@github.com:.insteadof gh:\n"
)


def test_env_pip_git_hf_settings_are_read_and_redacted(tmp_path: Path) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://user:tok3n@pypi.corp/simple\n"
                    "extra-index-url =\n  https://a.example/simple\n  https://x:y@b.example/simple\n"
                    "proxy = http://p:pw@10.0.0.1:8080\n")
    env = {
        "https_proxy": "http://alice:s3cret@proxy.corp:3128",
        "HTTPS_PROXY": "http://other:3128",
        "NO_PROXY": "localhost, .internal,10.0.0.0/8",
        "HF_ENDPOINT": "https://hf-mirror.com",
        "HF_HUB_ENABLE_HF_TRANSFER": "1",
        "HF_HUB_DISABLE_XET": "1",
    }
    ps = read_proxy_settings(env, git_runner=lambda argv: GIT_OUT, pip_files=[conf])
    assert ps.env["https_proxy"] == "http://***@proxy.corp:3128"
    assert ps.no_proxy == ["localhost", ".internal", "10.0.0.0/8"]
    assert ps.pip_index_url == "https://***@pypi.corp/simple"
    assert ps.pip_extra_index_urls == ["https://a.example/simple", "https://***@b.example/simple"]
    assert ps.pip_proxy == "http://***@10.0.0.1:8080"
    assert ps.git_http_proxy == "http://***@proxy.corp:3128"
    assert ps.git_insteadof == {
        "https://github.com/": "https://gh-proxy.com/https://github.com/",
        "gh:": "git@github.com:",
    }
    assert ps.hf_endpoint == "https://hf-mirror.com" and ps.hf_hub_enable_hf_transfer == "1"
    assert any("https_proxy and HTTPS_PROXY differ" in p for p in ps.problems)
    dumped = Snapshot(network=NetworkFacts(proxy=ps)).to_json()
    for secret in ("s3cret", "tok3n", "hunter2", ":y@", "p:pw"):
        assert secret not in dumped


def test_pip_env_overrides_files_and_bad_proxy_port_is_a_problem(tmp_path: Path) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://files.example/simple\n")
    env = {"PIP_INDEX_URL": "https://pypi.tuna.tsinghua.edu.cn/simple", "HTTP_PROXY": "http://proxy:abc"}
    ps = read_proxy_settings(env, git_runner=lambda argv: "", pip_files=[conf])
    assert ps.pip_index_url == "https://pypi.tuna.tsinghua.edu.cn/simple"
    assert any("port is not a number" in p for p in ps.problems)


def test_git_config_is_queried_without_a_shell() -> None:
    seen: list[list[str]] = []

    def runner(argv: list[str]) -> str:
        seen.append(argv)
        return ""

    read_proxy_settings({}, git_runner=runner, pip_files=[])
    assert seen and seen[0][:3] == ["git", "config", "--get-regexp"]


@pytest.mark.parametrize(
    ("url", "want"),
    [
        ("http://user:pass@host:3128", "http://***@host:3128"),
        ("host:3128", "host:3128"),
        ("user:pass@host:3128", "***@host:3128"),
        ("https://cdn.example/file?X-Amz-Signature=abc&token=t", "https://cdn.example/file"),
        ("socks5h://u:p@127.0.0.1:1080", "socks5h://***@127.0.0.1:1080"),
    ],
)
def test_redact_url(url: str, want: str) -> None:
    assert redact_url(url) == want


@given(
    user=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=12),
    pw=st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!$", min_size=4, max_size=20),
    host=st.from_regex(r"[a-z]{1,10}\.[a-z]{2,5}", fullmatch=True),
)
def test_redaction_never_leaks_password(user: str, pw: str, host: str) -> None:
    out = redact_url(f"http://{user}:{pw}@{host}:8080/x") or ""
    assert pw not in out and host in out


def test_no_proxy_matching() -> None:
    assert bypasses_proxy("hub.internal", [".internal"])
    assert bypasses_proxy("internal", ["internal"])
    assert bypasses_proxy("a.b.example.com", ["example.com"])
    assert not bypasses_proxy("notexample.com", ["example.com"])
    assert bypasses_proxy("anything", ["*"])
    assert bypasses_proxy("localhost", ["localhost:8080"])
    r = route_for("https://huggingface.co/x", {"HTTPS_PROXY": "http://p:3128", "no_proxy": "hf.co"})
    assert r.proxy_url == "http://p:3128"
    r = route_for("https://cdn-lfs.hf.co/x", {"HTTPS_PROXY": "http://p:3128", "no_proxy": "hf.co"})
    assert r.proxy_url is None
    r = route_for("http://pypi.org/", {"ALL_PROXY": "http://p:1", "HTTPS_PROXY": "http://q:2"})
    assert r.proxy_url == "http://p:1"


def test_configured_mirrors_become_endpoints() -> None:
    ps = ProxySettings(
        hf_endpoint="https://hf.corp.example",
        pip_index_url="https://pypi.corp.example/simple",
        git_insteadof={"https://github.com/": "https://ghp.corp.example/https://github.com/"},
    )
    eps = configured_endpoints(ps)
    ids = {e.id: e for e in eps}
    assert ids["configured:HF_ENDPOINT"].url == "https://hf.corp.example"
    assert ids["configured:pip"].probe_path == "/simple/pip/"
    assert any(e.url == "https://ghp.corp.example" for e in eps)
    # a redacted (credentialed) URL is not probed: we do not have the secret and must not guess
    assert configured_endpoints(ProxySettings(pip_index_url="https://***@pypi.corp/simple")) == []


def test_endpoint_data_is_complete() -> None:
    data = load_data("endpoints.json")
    ids = [e["id"] for e in data["endpoints"]]
    assert len(ids) == len(set(ids))
    hosts = {urlsplit(e["url"]).hostname for e in data["endpoints"]}
    for h in (
        "github.com",
        "codeload.github.com",
        "objects.githubusercontent.com",
        "api.github.com",
        "huggingface.co",
        "cdn-lfs-us-1.hf.co",
        "cas-server.xethub.hf.co",
        "pypi.org",
        "files.pythonhosted.org",
        "hf-mirror.com",
        "modelscope.cn",
        "pypi.tuna.tsinghua.edu.cn",
        "mirrors.aliyun.com",
        "mirrors.ustc.edu.cn",
    ):
        assert h in hosts, h
    for e in data["endpoints"]:
        assert e["source"], e["id"]
        assert e["url"].startswith("https://")
        assert e["service"] in data["services"] or e["service"] == "custom"
        if e["kind"] == "mirror":
            assert e.get("mirror_url"), e["id"]
    for name, svc in data["services"].items():
        assert svc["source"] and svc["switch"], name
    assert any(e["kind"] == "origin" and e.get("throughput_path") for e in data["endpoints"])


def test_endpoint_arg_and_config_file(tmp_path: Path) -> None:
    e = parse_endpoint_arg("hf=https://hf.corp.example#/org/m/resolve/main/big.bin")
    assert (
        e.service == "huggingface"
        and e.kind == "mirror"
        and e.throughput_path == "/org/m/resolve/main/big.bin"
    )
    assert e.mirror_url == "https://hf.corp.example"
    g = parse_endpoint_arg("github=https://ghp.example/https://github.com")
    assert g.url == "https://ghp.example" and g.mirror_url == "https://ghp.example/https://github.com/"
    with pytest.raises(InputError):
        parse_endpoint_arg("ftp://x")
    with pytest.raises(InputError):
        parse_endpoint_arg("nosuch=https://x.example")
    cfgf = tmp_path / "network.toml"
    cfgf.write_text(
        'defaults = false\n[[endpoint]]\nurl = "https://pypi.corp.example/simple"\nservice = "pip"\n'
    )
    eps = load_endpoints(path=cfgf)
    assert len(eps) == 1 and eps[0].service == "pypi" and eps[0].kind == "mirror"
    cfgf.write_text('[[endpoint]]\nurl = "https://pypi.corp.example"\n')
    eps = load_endpoints(path=cfgf)
    assert len(eps) > 20 and eps[-1].url == "https://pypi.corp.example"
    cfgf.write_text("not toml [")
    with pytest.raises(InputError):
        load_endpoints(path=cfgf)


def test_snapshot_round_trips_network_facts() -> None:
    from gpuclinic.facts.network import Endpoint, EndpointProbe, ThroughputSample

    nf = NetworkFacts(
        probes=[
            EndpointProbe(
                endpoint=Endpoint(id="a", url="https://a", service="pypi"),
                connect_ms=[1.0, 3.0],
                connect_attempts=3,
                connect_failures=1,
                single=ThroughputSample(connections=1, bytes_per_s=5.0),
            )
        ]
    )
    back = Snapshot.from_dict(json.loads(Snapshot(network=nf).to_json()))
    assert back.network and back.network.probes[0].connect_median_ms() == 2.0
    assert back.network.probes[0].single and back.network.probes[0].single.bytes_per_s == 5.0


def _codes(ps: ProxySettings) -> set[str]:
    from gpuclinic.checks import run_checks

    fs, _ = run_checks(Snapshot(network=NetworkFacts(proxy=ps)))
    return {f.code for f in fs}


def test_hf_settings_that_do_not_help_are_named() -> None:
    assert "network.hf_transfer_ignored" in _codes(
        ProxySettings(hf_hub_enable_hf_transfer="1", hf_hub_version="1.18.0")
    )
    assert "network.hf_transfer_ignored" not in _codes(
        ProxySettings(hf_hub_enable_hf_transfer="1", hf_hub_version="0.36.2")
    )
    assert "network.hf_transfer_ignored" not in _codes(
        ProxySettings(hf_hub_enable_hf_transfer="0", hf_hub_version="2.4.0")
    )
    assert "network.xet_bypasses_mirror" in _codes(ProxySettings(hf_endpoint="https://hf-mirror.com"))
    assert "network.xet_bypasses_mirror" not in _codes(
        ProxySettings(hf_endpoint="https://hf-mirror.com", hf_hub_disable_xet="1")
    )
    assert _codes(ProxySettings()) == set()


def test_installed_hf_hub_version_is_read_only_for_the_real_environment() -> None:
    ps = read_proxy_settings({}, git_runner=lambda argv: "", pip_files=[])
    assert ps.hf_hub_version is None  # an explicit env means a test: nothing read from this interpreter


@given(st.binary(max_size=400))
def test_response_head_parser_fails_only_with_probe_error(raw: bytes) -> None:
    from gpuclinic.sources.network import ProbeError, parse_head

    try:
        status, headers = parse_head(raw)
    except ProbeError:
        return
    assert 100 <= status <= 999 and all(k == k.lower() for k in headers)


@given(st.text(max_size=80))
def test_default_dest_never_escapes(url: str) -> None:
    from gpuclinic.transfer.git import default_dest

    try:
        name = default_dest(url)
    except InputError:
        return
    assert name and "/" not in name and "\\" not in name and name not in (".", "..")


@given(st.text(max_size=60), st.lists(st.text(max_size=20), max_size=5))
def test_no_proxy_matching_never_raises(host: str, items: list[str]) -> None:
    assert isinstance(bypasses_proxy(host, items), bool)
