"""``gpuclinic capture``: one tar.gz with the snapshot and the raw outputs it came from.

The bundle is what an operator asks a customer for: ``doctor --from bundle.tar.gz`` on another
machine gives the same diagnosis, and the raw outputs (``nvidia-smi -q``, ``-q -x``, the table, the
kernel log tail, ``/proc/driver/nvidia/version``, ``lspci -vvv``) let a human check it.

Secrets never enter a bundle: values of token-like environment variables (``HF_TOKEN``, ``*_TOKEN``,
``*_KEY``, ``*_SECRET``, passwords, webhook URLs) and well-known token shapes are masked in every
file, with or without ``--redact``.  ``--redact`` also masks serials, UUIDs, hostnames, IP and MAC
addresses with tokens that are the same for the same value across all files, so GPUs still match
between snapshot.json and the raw outputs.  The bundle is written to a temporary file and renamed,
so a failed capture never leaves a partial file.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import io
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuclinic import __version__
from gpuclinic.collect import CollectOptions, collect_live
from gpuclinic.errors import GpuclinicError, InputError, require_writable_dir
from gpuclinic.facts.snapshot import Snapshot

BUNDLE_SCHEMA = "gpuclinic.capture/1"
CMD_TIMEOUT_S = 20.0
MAX_RAW_BYTES = 16 * 1024 * 1024
LOG_TAIL_LINES = 20_000

# --------------------------------------------------------------------------------------------- secrets

_SECRET_NAME_RE = re.compile(
    r"(TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|_KEY$|^KEY$|API_?KEY|ACCESS_KEY|PRIVATE_KEY|WEBHOOK|CREDENTIAL|AUTH$|_PASS$|COOKIE|SESSION)",
    re.I,
)
# Names that match the pattern above but hold settings, not secrets.
_NOT_SECRET_NAME_RE = re.compile(
    r"^TOKENIZERS_|_PARALLELISM$|^KEYMAP$|^XKB_|_KEY_FILE$|_KEYBOARD|^SSH_AUTH_SOCK$", re.I
)
_SECRET_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("hf-token", re.compile(r"\bhf_[A-Za-z0-9]{20,}\b")),
    ("github-token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})\b")),
    ("slack-token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b")),
    ("aws-key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("api-key", re.compile(r"\bsk-[A-Za-z0-9_-]{20,}\b")),
    (
        "webhook-url",
        re.compile(
            r"https?://(?:hooks\.slack\.com/services|(?:[a-z]+\.)?discord(?:app)?\.com/api/webhooks|"
            r"[A-Za-z0-9.-]*webhook[A-Za-z0-9.-]*|outlook\.office\.com/webhook|api\.telegram\.org/bot)[^\s\"'<>]*",
            re.I,
        ),
    ),
    ("bearer", re.compile(r"(?i)\b(?:Bearer|token)\s+[A-Za-z0-9._~+/=-]{16,}")),
    (
        "password",
        re.compile(
            r"(?i)(?<![\[\w])(password|passwd|pwd|secret|api_key|apikey|token)\s*[=:]\s*[^\s\"'&;\[]{4,}"
        ),
    ),
    ("url-credentials", re.compile(r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)")),
)


def secret_env_values(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Values of environment variables whose names say they hold a secret (value -> variable name)."""
    env = os.environ if env is None else env
    out: dict[str, str] = {}
    for k, v in env.items():
        if not v or len(v) < 6 or _NOT_SECRET_NAME_RE.search(k):
            continue
        if _SECRET_NAME_RE.search(k) or re.search(r"https?://\S*webhook", v, re.I):
            out[v] = k
    return out


def scrub_secrets(text: str, env_values: Mapping[str, str]) -> str:
    """Mask secrets: known environment values first (longest first), then token-shaped strings."""
    for value in sorted(env_values, key=len, reverse=True):
        if value in text:
            text = text.replace(value, f"[secret:{env_values[value]}]")
    for name, rx in _SECRET_PATTERNS:
        if name == "password":
            text = rx.sub(lambda m: f"{m.group(1)}=[secret:password]", text)
        else:
            text = rx.sub(f"[secret:{name}]", text)
    return text


# --------------------------------------------------------------------------------------------- redaction

_UUID_RE = re.compile(
    r"\b(?:(GPU|MIG)-)?([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})\b"
)
_IPV4_RE = re.compile(
    r"(?<![\w.])((?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3})(?![\w.])"
)
_IPV6_RE = re.compile(r"(?<![\w:.])([0-9a-fA-F]{0,4}(?::[0-9a-fA-F]{0,4}){2,7})(?![\w:.])")
_MAC_RE = re.compile(r"(?<![\w:])((?:[0-9a-fA-F]{2}[:-]){5}[0-9a-fA-F]{2})(?![\w:])")
_SERIAL_RES = (
    re.compile(r"(Serial Number\s*:\s*)([^\s\]]+)"),
    re.compile(r"(<serial>)([^<]+)(?=</serial>)"),
    re.compile(r"(\[SN\] Serial number:\s*)(\S+)"),
    re.compile(r"(\"serial\":\s*\")([^\"]+)(?=\")"),
    re.compile(r"(Board Serial\w*\s*[:=]\s*)(\S+)"),
)
_KEEP_IPS = {"127.0.0.1", "0.0.0.0", "255.255.255.255", "::1", "::"}


class Redactor:
    """Consistent masking: the same value becomes the same token in every file of a bundle."""

    def __init__(self, hostnames: list[str] | None = None) -> None:
        self.tokens: dict[tuple[str, str], str] = {}
        self.counts: dict[str, int] = {}
        self.serials: set[str] = set()
        # Hostnames are replaced as whole words only (never inside "kvm" for host "vm").
        self.hostnames = sorted(
            {
                h
                for h in (hostnames or [])
                if h and h.lower() not in ("localhost", "localhost.localdomain") and not h.isdigit()
            },
            key=len,
            reverse=True,
        )

    def token(self, kind: str, value: str) -> str:
        key = (kind, value.lower())
        tok = self.tokens.get(key)
        if tok is None:
            n = self.counts.get(kind, 0) + 1
            self.counts[kind] = n
            tok = {
                "uuid": f"00000000-0000-4000-8000-{n:012d}",
                "serial": f"SERIAL{n:07d}",
                "host": f"host{n:04d}",
                "ipv4": f"192.0.2.{n % 250 + 1}" if n < 250 else f"ip-redacted-{n}",
                "ipv6": f"2001:db8::{n:x}",
                "mac": f"02:00:00:00:{(n >> 8) & 0xFF:02x}:{n & 0xFF:02x}",
            }.get(kind, f"{kind}-{n}")
            self.tokens[key] = tok
        return tok

    def learn(self, text: str) -> None:
        """First pass: find serial numbers wherever a format labels them."""
        for rx in _SERIAL_RES:
            for m in rx.finditer(text):
                v = m.group(2).strip()
                if v and v.upper() not in ("N/A", "[N/A]", "NONE", "UNKNOWN") and len(v) >= 4:
                    self.serials.add(v)

    def apply(self, text: str) -> str:
        for s in sorted(self.serials, key=len, reverse=True):
            if s in text:
                text = re.sub(rf"(?<![\w-]){re.escape(s)}(?![\w-])", self.token("serial", s), text)
        text = _UUID_RE.sub(
            lambda m: (f"{m.group(1)}-" if m.group(1) else "") + self.token("uuid", m.group(2)), text
        )
        text = _MAC_RE.sub(lambda m: self.token("mac", m.group(1)), text)
        text = _IPV4_RE.sub(
            lambda m: m.group(1) if m.group(1) in _KEEP_IPS else self.token("ipv4", m.group(1)), text
        )
        text = _IPV6_RE.sub(self._ipv6, text)
        for h in self.hostnames:
            text = re.sub(rf"(?<![\w.-]){re.escape(h)}(?![\w-])", self.token("host", h), text, flags=re.I)
        return text

    def _ipv6(self, m: re.Match[str]) -> str:
        v = m.group(1)
        # only real-looking addresses: "::" compression or eight groups; times and bus ids have fewer colons
        if v in _KEEP_IPS or v.startswith("2001:db8:") or ("::" not in v and v.count(":") != 7):
            return v
        if v.count("::") > 1 or ":::" in v or not re.search(r"[0-9a-fA-F]", v):
            return v
        return self.token("ipv6", v)


# --------------------------------------------------------------------------------------------- running


@dataclass
class RawOutput:
    name: str  # path inside the bundle, e.g. raw/nvidia-smi-q.txt
    argv: list[str] | None
    text: str
    rc: int | None = None
    seconds: float = 0.0


@dataclass
class Bundle:
    snapshot: Snapshot
    raw: list[RawOutput] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)
    commands: list[dict[str, Any]] = field(default_factory=list)
    hung: set[str] = field(default_factory=set)  # tools that timed out once: not run again


Runner = Callable[[list[str], float], "subprocess.CompletedProcess[bytes]"]


def _default_runner(argv: list[str], timeout: float) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, capture_output=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL)


def _run(bundle: Bundle, name: str, argv: list[str], runner: Runner, tail_lines: int | None = None) -> None:
    if argv[0] in bundle.hung:
        # a lost GPU can make every nvidia-smi call hang: one timeout is enough evidence
        bundle.failed.append({"what": " ".join(argv), "why": f"skipped: an earlier {argv[0]} call timed out"})
        return
    exe = shutil.which(argv[0])
    if exe is None:
        bundle.failed.append({"what": " ".join(argv), "why": f"{argv[0]} not found on PATH"})
        return
    t0 = time.monotonic()
    try:
        cp = runner([exe, *argv[1:]], CMD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        bundle.failed.append({"what": " ".join(argv), "why": f"timed out after {CMD_TIMEOUT_S:.0f}s"})
        bundle.hung.add(argv[0])
        return
    except OSError as e:
        bundle.failed.append({"what": " ".join(argv), "why": f"could not run ({e.strerror or e})"})
        return
    dt = time.monotonic() - t0
    out = (cp.stdout or b"")[-MAX_RAW_BYTES:].decode("utf-8", errors="replace")
    err = (cp.stderr or b"")[-65536:].decode("utf-8", errors="replace")
    if tail_lines is not None:
        out = "\n".join(out.splitlines()[-tail_lines:]) + "\n"
    text = out if not err.strip() else (out + ("\n" if out and not out.endswith("\n") else "") + err)
    bundle.commands.append({"name": name, "argv": argv, "rc": cp.returncode, "seconds": round(dt, 3)})
    if cp.returncode != 0 and not out.strip():
        bundle.failed.append(
            {"what": " ".join(argv), "why": (err.strip().splitlines() or [f"exit {cp.returncode}"])[-1][:300]}
        )
        if text.strip():  # keep the error text: "NVIDIA-SMI has failed ..." is itself evidence
            bundle.raw.append(RawOutput(name, argv, text, cp.returncode, dt))
        return
    bundle.raw.append(RawOutput(name, argv, text, cp.returncode, dt))


def _read_file(bundle: Bundle, name: str, path: str) -> None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            bundle.raw.append(RawOutput(name, None, fh.read(MAX_RAW_BYTES)))
    except OSError as e:
        bundle.failed.append({"what": path, "why": e.strerror or str(e)})


def gather(
    opts: CollectOptions | None = None,
    runner: Runner | None = None,
    collect: Callable[[CollectOptions], Snapshot] | None = None,
) -> Bundle:
    """Collect the live snapshot and the raw outputs (each command time-boxed, never via a shell)."""
    opts = opts or CollectOptions()
    runner = runner or _default_runner
    snap = (collect or collect_live)(opts)
    bundle = Bundle(snapshot=snap)
    _run(bundle, "raw/nvidia-smi-q.txt", ["nvidia-smi", "-q"], runner)
    _run(bundle, "raw/nvidia-smi-q.xml", ["nvidia-smi", "-q", "-x"], runner)
    _run(bundle, "raw/nvidia-smi.txt", ["nvidia-smi"], runner)
    _run(bundle, "raw/nvidia-smi-topo.txt", ["nvidia-smi", "topo", "-m"], runner)
    _run(bundle, "raw/nvidia-smi-nvlink.txt", ["nvidia-smi", "nvlink", "-s"], runner)
    _read_file(bundle, "raw/proc-driver-nvidia-version.txt", "/proc/driver/nvidia/version")
    _run(bundle, "raw/dmesg.txt", ["dmesg"], runner, tail_lines=LOG_TAIL_LINES)
    _run(
        bundle,
        "raw/journalctl-k.txt",
        ["journalctl", "-k", "-b", "--no-pager", "-o", "short-iso", "-n", str(LOG_TAIL_LINES)],
        runner,
    )
    _run(bundle, "raw/lspci-vvv.txt", ["lspci", "-D", "-nn", "-vvv", "-d", "10de:"], runner)
    for s in snap.skipped:
        bundle.failed.append({"what": s.what, "why": s.why})
    return bundle


# --------------------------------------------------------------------------------------------- writing


def render_files(
    bundle: Bundle,
    redact: bool,
    env: Mapping[str, str] | None = None,
    secrets_given: Mapping[str, str] | None = None,
) -> dict[str, bytes]:
    """The bundle's files, secrets always masked, identifiers masked when ``redact``.

    ``secrets_given`` (label -> value) are secrets from flags or files, e.g. a BMC password: masked
    whatever their length, since they did not come through a variable whose name says "secret"."""
    secrets = secret_env_values(env)
    secrets.update({v: k for k, v in (secrets_given or {}).items() if v})
    snap_dict = bundle.snapshot.to_dict()
    redactor: Redactor | None = None
    if redact:
        hosts = [socket.gethostname(), socket.getfqdn(), bundle.snapshot.hostname or ""]
        hosts += [h.split(".")[0] for h in hosts if h]
        redactor = Redactor(hosts)
        if snap_dict.get("hostname"):  # structured field: masked even if the text pass would miss it
            snap_dict["hostname"] = redactor.token("host", str(snap_dict["hostname"]))
    texts: dict[str, str] = {"snapshot.json": json.dumps(snap_dict, indent=1)}
    for r in bundle.raw:
        texts[r.name] = r.text
    if redactor is not None:
        for name in sorted(texts):
            redactor.learn(texts[name])
        for g in bundle.snapshot.gpus:
            if g.serial:
                redactor.serials.add(g.serial)
    out: dict[str, bytes] = {}
    for name in ["snapshot.json", *sorted(n for n in texts if n != "snapshot.json")]:
        t = scrub_secrets(texts[name], secrets)
        if redactor is not None:
            t = redactor.apply(t)
        out[name] = t.encode("utf-8")
    manifest = {
        "schema": BUNDLE_SCHEMA,
        "gpuclinic_version": __version__,
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
        "redacted": redact,
        "commands": bundle.commands,
        "failed": bundle.failed,
        "files": [
            {"name": n, "bytes": len(b), "sha256": hashlib.sha256(b).hexdigest()} for n, b in out.items()
        ],
    }
    m = scrub_secrets(json.dumps(manifest, indent=1), secrets)
    if redactor is not None:
        m = redactor.apply(m)
    out["manifest.json"] = m.encode("utf-8")
    return out


def check_output(path: str) -> None:
    """Refuse an output path before minutes of collecting: a missing directory, a directory, or a
    file that is not an earlier capture (a mistyped -o must not replace someone's log)."""
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        raise InputError(f"{path}: directory {d} does not exist")
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory; give a file name")
    if os.path.lexists(path) and not _is_capture(path):
        raise InputError(f"{path}: exists and is not a gpuclinic capture; choose another -o or remove it")
    require_writable_dir(d, path)


def _is_capture(path: str) -> bool:
    try:
        with tarfile.open(path, "r:gz") as tf:
            return any(n in ("manifest.json", "snapshot.json") for n in tf.getnames())
    except (OSError, tarfile.TarError, EOFError):
        return False


def write_bundle(files: Mapping[str, bytes], path: str) -> None:
    """Write the tar.gz atomically (temporary file in the same directory, then rename; mode 0600)."""
    check_output(path)
    d = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".gpuclinic-capture-", suffix=".tmp", dir=d)
    except OSError as e:
        raise GpuclinicError(f"cannot write in {d}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            with tarfile.open(fileobj=fh, mode="w:gz") as tf:
                now = time.time()
                for name, data in files.items():
                    ti = tarfile.TarInfo(name)
                    ti.size = len(data)
                    ti.mtime = int(now)
                    ti.mode = 0o644
                    ti.uname = ti.gname = ""
                    tf.addfile(ti, io.BytesIO(data))
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise GpuclinicError(f"could not write {path}: {e.strerror or e}") from None
        raise


def default_name(snap: Snapshot, redact: bool) -> str:
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    host = "redacted" if redact else re.sub(r"[^A-Za-z0-9_.-]", "_", snap.hostname or "host")[:64]
    return f"gpuclinic-capture-{host}-{stamp}.tar.gz"
