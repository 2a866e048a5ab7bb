from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from realtools import require

from .servers import make_cert


@pytest.fixture(scope="session")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    require("openssl")
    made = make_cert(tmp_path_factory.mktemp("tls"))
    assert made is not None, "openssl could not make a test certificate"
    return made


@pytest.fixture
def server_tls(cert: tuple[Path, Path]) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    return ctx


@pytest.fixture
def client_tls(cert: tuple[Path, Path]) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert[0]))


@pytest.fixture(autouse=True)
def _no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for k in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy",
              "NO_PROXY", "HF_ENDPOINT", "PIP_INDEX_URL", "PIP_CONFIG_FILE"):
        monkeypatch.delenv(k, raising=False)
    yield
