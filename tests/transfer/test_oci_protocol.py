"""Reference parsing, auth challenges, credentials and platform choice: the parts of the pull protocol
that public registries exercise and a loopback registry cannot (Docker Hub names, nvcr.io's realm)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from gpuclinic.errors import InputError
from gpuclinic.transfer.oci import (
    ImageRef,
    RegistryError,
    basic_credentials,
    is_loopback,
    parse_challenge,
    parse_ref,
    select_platform,
)
from gpuclinic.transfer.redact import redact


def test_docker_hub_normalisation_and_registries() -> None:
    assert parse_ref("ubuntu") == ImageRef("docker.io", "library/ubuntu", "latest", None)
    assert parse_ref("pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime").repository == "pytorch/pytorch"
    assert parse_ref("docker.io/library/alpine:3.20").api_host == "registry-1.docker.io"
    r = parse_ref("nvcr.io/nvidia/pytorch:24.05-py3")
    assert (r.registry, r.repository, r.tag) == ("nvcr.io", "nvidia/pytorch", "24.05-py3")
    r = parse_ref("localhost:5000/a/b@sha256:" + "a" * 64)
    assert (r.registry, r.repository, r.tag, r.reference) == (
        "localhost:5000",
        "a/b",
        None,
        "sha256:" + "a" * 64,
    )
    assert parse_ref("127.0.0.1:5000/x").api_host == "127.0.0.1:5000"
    for bad in ("", "Ubuntu", "a b", "https://x/y", "x:tag with space", "x@sha256:12"):
        with pytest.raises(InputError):
            parse_ref(bad)
    assert is_loopback("127.0.0.5") and is_loopback("[::1]") and is_loopback("localhost")
    assert not is_loopback("10.0.0.1") and not is_loopback("registry.example")


def test_challenges_docker_hub_and_nvcr() -> None:
    s, p = parse_challenge(
        'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
        'scope="repository:library/ubuntu:pull"'
    )
    assert s == "bearer" and p == {
        "realm": "https://auth.docker.io/token",
        "service": "registry.docker.io",
        "scope": "repository:library/ubuntu:pull",
    }
    # nvcr.io puts the scope (with commas) inside the quoted realm (MESOS-9968)
    s, p = parse_challenge(
        'Bearer realm="https://nvcr.io/proxy_auth?scope=repository:nvidia/tensorflow:pull,push"'
    )
    assert p["realm"] == "https://nvcr.io/proxy_auth?scope=repository:nvidia/tensorflow:pull,push"
    assert parse_challenge('Basic realm="Registry Realm"') == ("basic", {"realm": "Registry Realm"})


def test_ngc_key_and_docker_config_never_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = "nvapi-TESTKEY-0123456789abcdef"
    monkeypatch.setenv("NGC_API_KEY", key)
    cred = basic_credentials("nvcr.io")
    assert cred is not None and base64.b64decode(cred).decode() == f"$oauthtoken:{key}"
    assert key not in redact(f"login with {key} / {cred}") and cred not in redact(f"Basic {cred}")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    auth = base64.b64encode(b"bob:hunter2-secret").decode()
    (tmp_path / "config.json").write_text(json.dumps({"auths": {"ghcr.io": {"auth": auth}}}))
    assert basic_credentials("ghcr.io") == auth
    assert "hunter2-secret" not in redact("password hunter2-secret") and basic_credentials("quay.io") is None


def test_platform_selection() -> None:
    idx = {
        "manifests": [
            {"digest": "sha256:a", "platform": {"os": "linux", "architecture": "amd64"}},
            {"digest": "sha256:b", "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
            {"digest": "sha256:c", "platform": {"os": "unknown", "architecture": "unknown"}},
        ]
    }
    assert select_platform(idx, "linux/amd64")["digest"] == "sha256:a"
    assert select_platform(idx, "linux/arm64")["digest"] == "sha256:b"
    assert select_platform(idx, "linux/arm64/v8")["digest"] == "sha256:b"
    with pytest.raises(RegistryError, match="available: linux/amd64, linux/arm64/v8, unknown/unknown"):
        select_platform(idx, "linux/ppc64le")
