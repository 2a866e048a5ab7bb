"""Proxy and mirror settings for the network source, read the way the tools read them (env, pip, git,
Hugging Face), and URL redaction, so credentials never leave these modules.  Split from
:mod:`gpuclinic.sources.network`, which re-exports these names."""

from __future__ import annotations

import base64
import configparser
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from gpuclinic.facts.network import ProxySettings

# ----------------------------------------------------------------------------------------------
# Redaction


def redact_url(url: str | None) -> str | None:
    """Remove user:password and query strings (signed URLs, tokens) from a URL."""
    if url is None:
        return None
    s = url.strip()
    if re.match(r"^git@[^/:]+:", s):  # scp-style ssh remote: "git" is not a secret
        return s
    try:
        parts = urlsplit(s if "://" in s else "http://" + s)
    except ValueError:
        return re.sub(r"//[^/@\s]*@", "//***@", s)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    out = urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    if "://" not in s:
        out = out.split("://", 1)[1]
    return out


# ----------------------------------------------------------------------------------------------
# Proxy settings

_PROXY_VARS = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")
_NO_PROXY_VARS = ("no_proxy", "NO_PROXY")


def _pip_config_files(env: Mapping[str, str]) -> list[Path]:
    """pip's config files, lowest precedence first (global, user, site); PIP_CONFIG_FILE last."""
    home = Path(env.get("HOME") or Path.home())
    xdg_dirs = (env.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(":")
    files = [Path(d) / "pip" / "pip.conf" for d in xdg_dirs if d] + [Path("/etc/pip.conf")]
    files += [
        home / ".pip" / "pip.conf",
        Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "pip" / "pip.conf",
    ]
    if env.get("VIRTUAL_ENV"):
        files.append(Path(env["VIRTUAL_ENV"]) / "pip.conf")
    if env.get("PIP_CONFIG_FILE") and env["PIP_CONFIG_FILE"] != os.devnull:
        files.append(Path(env["PIP_CONFIG_FILE"]))
    return files


def _check_proxy_url(name: str, value: str, problems: list[str]) -> None:
    s = value.strip()
    parts = urlsplit(s if "://" in s else "http://" + s)
    try:
        port = parts.port
    except ValueError:
        problems.append(f"{name}={redact_url(s)}: the port is not a number")
        return
    if not parts.hostname:
        problems.append(f"{name}={redact_url(s)}: no host in the proxy URL")
    elif parts.scheme not in ("http", "https", "socks4", "socks4a", "socks5", "socks5h"):
        problems.append(f"{name}={redact_url(s)}: unknown proxy scheme {parts.scheme!r}")
    elif port is None and "://" in s and parts.scheme in ("socks5", "socks5h", "socks4"):
        problems.append(f"{name}={redact_url(s)}: no port given")


def read_git_config(runner: Callable[[list[str]], str | None] | None = None) -> list[tuple[str, str]]:
    """``git config --get-regexp`` for proxy and insteadOf keys (no shell, 3 s limit)."""
    argv = ["git", "config", "--get-regexp", r"^(http\..*proxy|https\..*proxy|url\..*\.insteadof)$"]
    if runner is not None:
        out = runner(argv)
    else:
        git = shutil.which("git")
        if git is None:
            return []
        try:
            cp = subprocess.run([git, *argv[1:]], capture_output=True, text=True, timeout=3, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return []
        out = cp.stdout if cp.returncode == 0 else ""
    pairs: list[tuple[str, str]] = []
    for line in (out or "").splitlines():
        key, _, val = line.partition(" ")
        if key:
            pairs.append((key, val.strip()))
    return pairs


def read_proxy_settings(
    env: Mapping[str, str] | None = None,
    *,
    git_runner: Callable[[list[str]], str | None] | None = None,
    pip_files: Iterable[Path] | None = None,
    hf_hub_version: str | None = None,
) -> ProxySettings:
    """Proxy and mirror settings from the environment, pip config, git config and HF variables."""
    if env is None and hf_hub_version is None:
        hf_hub_version = _installed_version("huggingface_hub")
    env = dict(os.environ if env is None else env)
    ps = ProxySettings()
    _env_proxies(ps, env)
    # pip: files in precedence order, then PIP_* environment variables win.
    _pip_settings(ps, list(pip_files) if pip_files is not None else _pip_config_files(env), env)
    _git_settings(ps, read_git_config(git_runner))
    # Hugging Face
    ps.hf_endpoint = redact_url(env.get("HF_ENDPOINT")) if env.get("HF_ENDPOINT") else None
    ps.hf_hub_enable_hf_transfer = env.get("HF_HUB_ENABLE_HF_TRANSFER")
    ps.hf_hub_disable_xet = env.get("HF_HUB_DISABLE_XET")
    ps.hf_xet_high_performance = env.get("HF_XET_HIGH_PERFORMANCE")
    ps.hf_hub_version = hf_hub_version
    return ps


def _env_proxies(ps: ProxySettings, env: Mapping[str, str]) -> None:
    """The *_proxy variables (redacted), lower/upper-case pairs that disagree, the no_proxy list."""
    for name in _PROXY_VARS:
        v = env.get(name)
        if v:
            ps.env[name] = redact_url(v) or ""
            _check_proxy_url(name, v, ps.problems)
    for lower, upper in (
        ("http_proxy", "HTTP_PROXY"),
        ("https_proxy", "HTTPS_PROXY"),
        ("all_proxy", "ALL_PROXY"),
        ("no_proxy", "NO_PROXY"),
    ):
        lv, uv = env.get(lower), env.get(upper)
        if lv and uv and lv.strip() != uv.strip():
            ps.problems.append(
                f"{lower} and {upper} differ ({redact_url(lv)} vs {redact_url(uv)}): curl and git read only "
                f"{lower if lower != 'http_proxy' else 'http_proxy'}, Python tools prefer the lower-case one"
            )
    for name in _NO_PROXY_VARS:
        v = env.get(name)
        if v:
            ps.env[name] = v
            for item in v.split(","):
                item = item.strip()
                if item and item not in ps.no_proxy:
                    ps.no_proxy.append(item)


def _pip_settings(ps: ProxySettings, files: list[Path], env: Mapping[str, str]) -> None:
    for f in files:
        if not f.is_file():
            continue
        cp = configparser.RawConfigParser()
        try:
            cp.read(f, encoding="utf-8")
        except (configparser.Error, OSError, UnicodeDecodeError) as e:
            ps.problems.append(f"pip config {f}: unreadable ({type(e).__name__})")
            continue
        ps.pip_config_files.append(str(f))
        for section in ("global", "install", "download"):
            if cp.has_section(section):
                _pip_section(ps, cp, section)
    if env.get("PIP_INDEX_URL"):
        ps.pip_index_url = redact_url(env["PIP_INDEX_URL"])
    if env.get("PIP_EXTRA_INDEX_URL"):
        ps.pip_extra_index_urls = [redact_url(u) or "" for u in env["PIP_EXTRA_INDEX_URL"].split() if u]
    if env.get("PIP_PROXY"):
        ps.pip_proxy = redact_url(env["PIP_PROXY"])


def _pip_section(ps: ProxySettings, cp: configparser.RawConfigParser, section: str) -> None:
    if cp.has_option(section, "index-url"):
        ps.pip_index_url = redact_url(cp.get(section, "index-url").strip())
    if cp.has_option(section, "extra-index-url"):
        ps.pip_extra_index_urls = [
            redact_url(u) or "" for u in cp.get(section, "extra-index-url").split() if u
        ]
    if cp.has_option(section, "proxy"):
        ps.pip_proxy = redact_url(cp.get(section, "proxy").strip())


def _git_settings(ps: ProxySettings, pairs: list[tuple[str, str]]) -> None:
    for key, val in pairs:
        low = key.lower()
        if low == "http.proxy" or (low.startswith("http.") and low.endswith(".proxy") and "github" in low):
            ps.git_http_proxy = redact_url(val)
            _check_proxy_url(key, val, ps.problems)
        elif low == "https.proxy":
            ps.git_https_proxy = redact_url(val)
            _check_proxy_url(key, val, ps.problems)
        elif low.startswith("url.") and low.endswith(".insteadof"):
            base = key[4 : -len(".insteadof")]
            ps.git_insteadof[val] = redact_url(base) or base


def _installed_version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def bypasses_proxy(host: str, no_proxy: Iterable[str]) -> bool:
    """NO_PROXY matching as curl/requests do it: ``*``, exact host, domain suffix (leading dot optional)."""
    h = host.lower().strip("[]")
    for item in no_proxy:
        it = item.strip().lower()
        if not it:
            continue
        if it == "*":
            return True
        it = it.split(":", 1)[0] if it.count(":") == 1 else it  # host:port -> host
        it = it.lstrip(".").strip("[]")
        if h == it or h.endswith("." + it):
            return True
    return False


@dataclass
class ProxyRoute:
    """How to reach a host: directly, or through an HTTP CONNECT proxy (raw URL, never stored)."""

    host: str
    port: int
    proxy_url: str | None = None  # raw, may carry credentials: use only to connect

    @property
    def proxy_parts(self) -> tuple[str, str, int, str | None]:
        assert self.proxy_url
        s = self.proxy_url if "://" in self.proxy_url else "http://" + self.proxy_url
        p = urlsplit(s)
        scheme = p.scheme or "http"
        port = p.port or (443 if scheme == "https" else 1080 if scheme.startswith("socks") else 80)
        auth = None
        if p.username is not None:
            auth = base64.b64encode(f"{unquote(p.username)}:{unquote(p.password or '')}".encode()).decode()
        return scheme, p.hostname or "", port, auth


def route_for(url: str, env: Mapping[str, str]) -> ProxyRoute:
    """The route a typical tool (curl, requests, httpx, git) takes to ``url`` given the environment."""
    p = urlsplit(url)
    host = p.hostname or ""
    port = p.port or (443 if p.scheme == "https" else 80)
    names = ("https_proxy", "HTTPS_PROXY") if p.scheme == "https" else ("http_proxy", "HTTP_PROXY")
    proxy = next((env[n] for n in (*names, "all_proxy", "ALL_PROXY") if env.get(n)), None)
    no_proxy = ",".join(env.get(n, "") for n in _NO_PROXY_VARS).split(",")
    if proxy and bypasses_proxy(host, no_proxy):
        proxy = None
    return ProxyRoute(host=host, port=port, proxy_url=proxy.strip() if proxy else None)
