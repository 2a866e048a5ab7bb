"""Live BMC reads: in-band and LAN ``ipmitool`` (or FreeIPMI), Redfish over HTTPS, hwmon.

Read-only by construction: only ``sdr``/``sensor``/``sel elist``/``fru print``/``chassis status``/
``dcmi power reading`` and HTTP GET. Every call has a timeout. The BMC password never reaches an argv
(ipmitool gets it through ``IPMI_PASSWORD`` with ``-E``, or ``-f FILE``), and every message that
leaves this module goes through :func:`BmcOptions.redact`.
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import time
from dataclasses import dataclass, field

from gpuclinic.facts import room as R
from gpuclinic.sources.bmc import freeipmi, ipmitool

IPMI_DEVICES = ("/dev/ipmi0", "/dev/ipmi/0", "/dev/ipmidev/0")
_CIPHER_ERRORS = (
    "invalid authentication algorithm",
    "unable to establish ipmi v2",
    "no matching cipher suite",
    "invalid integrity algorithm",
    "invalid confidentiality algorithm",
)
IPMI_COMMANDS: tuple[tuple[str, ...], ...] = (
    ("sdr", "elist"),
    ("sensor",),
    ("sel", "elist", "last", "500"),
    ("chassis", "status"),
    ("dcmi", "power", "reading"),
    ("fru", "print", "0"),
)


class BmcError(Exception):
    """The BMC could not be read; the message is already free of secrets."""


@dataclass
class BmcOptions:
    """Where and how to read the BMC. ``password`` is never printed (repr=False) and never put in argv."""

    host: str | None = None  # IPMI over LAN (lanplus)
    port: int = 623
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    password_file: str | None = None
    cipher: int | None = None  # ipmitool -C; None: ipmitool's default, then suite 3 if the BMC refuses it
    redfish: str | None = None  # https://host[:port]
    redfish_user: str | None = None
    redfish_password: str | None = field(default=None, repr=False)
    redfish_verify: bool | str | ssl.SSLContext = (
        True  # False for a self-signed BMC certificate, or a CA bundle path
    )
    timeout_s: float = 15.0  # per ipmitool call / Redfish request
    deadline_s: float = 60.0  # all Redfish requests together
    in_band: bool = True  # try /dev/ipmi0 when no host is given
    hwmon: bool = True
    hwmon_root: str = "/sys/class/hwmon"

    def secrets(self) -> list[str]:
        out = [s for s in (self.password, self.redfish_password) if s]
        for p in (self.password_file,):
            if p:
                try:
                    with open(p, encoding="utf-8", errors="replace") as fh:
                        s = fh.readline().strip()
                    if s:
                        out.append(s)
                except OSError:
                    pass
        return out

    def redact(self, text: str) -> str:
        for s in self.secrets():
            text = text.replace(s, "********")
        return text

    def where(self) -> str:
        if self.host:
            return f"{self.host}:{self.port}" if self.port != 623 else self.host
        return "in-band"


def _run(argv: list[str], opts: BmcOptions, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    try:
        p = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=opts.timeout_s,
            stdin=subprocess.DEVNULL,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return 124, "", f"timed out after {opts.timeout_s:.0f} s"
    except OSError as e:
        return 127, "", str(e)
    return p.returncode, p.stdout, p.stderr


def ipmitool_argv(
    opts: BmcOptions, args: tuple[str, ...], cipher: int | None
) -> tuple[list[str], dict[str, str] | None]:
    """The argv and environment for one ipmitool call; the password is only ever in the environment."""
    exe = shutil.which("ipmitool") or "ipmitool"
    if not opts.host:
        return [exe, *args], None
    argv = [exe, "-I", "lanplus", "-H", opts.host, "-p", str(opts.port), "-N", "3", "-R", "2"]
    if cipher is not None:
        argv += ["-C", str(cipher)]
    if opts.user:
        argv += ["-U", opts.user]
    env = None
    if opts.password_file:
        argv += ["-f", opts.password_file]
    elif opts.password is not None:
        env = {**os.environ, "IPMI_PASSWORD": opts.password}
        argv += ["-E"]
    elif os.environ.get("IPMI_PASSWORD"):
        argv += ["-E"]
    return argv + list(args), env


def shown(argv: list[str]) -> str:
    return " ".join(["ipmitool", *argv[1:]])


def read_ipmitool(
    opts: BmcOptions, commands: tuple[tuple[str, ...], ...] = IPMI_COMMANDS
) -> tuple[R.RoomFacts, list[str]]:
    """Run the read-only ipmitool commands; returns the facts and one note per command that failed."""
    room = R.RoomFacts(bmc=opts.where())
    notes: list[str] = []
    cipher = opts.cipher
    ok = 0
    t0 = time.monotonic()
    for args in commands:
        if time.monotonic() - t0 > opts.deadline_s:
            notes.append(
                f"ipmitool {' '.join(args[:2])}: skipped, the BMC used up its {opts.deadline_s:.0f} s"
            )
            continue
        argv, env = ipmitool_argv(opts, args, cipher)
        rc, out, err = _run(argv, opts, env)
        if rc != 0 and opts.host and cipher is None and any(c in err.lower() for c in _CIPHER_ERRORS):
            cipher = 3  # many BMCs (and ipmi_sim) refuse ipmitool's default suite 17 but take 3
            argv, env = ipmitool_argv(opts, args, cipher)
            rc, out, err = _run(argv, opts, env)
        if opts.host and cipher is None and "get channel cipher suites" in err.lower():
            cipher = 3  # the BMC cannot list its suites: ipmitool waited for that; do not wait again per call
        what = " ".join(args[:2])
        if rc != 0:
            lines = [
                ln.strip() for ln in err.splitlines() if ln.strip() and "cipher suites" not in ln.lower()
            ]
            msg = opts.redact((lines or [f"exit {rc}"])[-1])[:200]
            notes.append(f"ipmitool {what}: {msg}")
            if ok == 0 and args == commands[0] and _fatal(err, rc):
                raise BmcError(f"{shown(argv)}: {msg}")
            continue
        ok += 1
        part = _parse_command(args, out)
        room.merge(part)
    if ok == 0:
        raise BmcError("; ".join(notes) or "ipmitool gave nothing")
    return room, notes


def _fatal(err: str, rc: int) -> bool:
    e = err.lower()
    return rc in (124, 127) or any(
        x in e
        for x in (
            "unable to establish",
            "could not open device",
            "error: unable",
            "rakp",
            "no such file",
            "activate session",
            "insufficient privilege",
            "connection refused",
            "unable to get",
        )
    )


def _parse_command(args: tuple[str, ...], out: str) -> R.RoomFacts:
    if args[0] == "sdr":
        return ipmitool.parse_sdr(out)
    if args[0] == "sensor":
        return ipmitool.parse_sensor(out)
    if args[0] == "sel":
        return ipmitool.parse_sel(out)
    if args[0] == "chassis":
        return ipmitool.parse_chassis(out)
    if args[0] == "dcmi":
        return ipmitool.parse_dcmi(out)
    return ipmitool.parse_fru(out)


def read_freeipmi(opts: BmcOptions) -> tuple[R.RoomFacts, list[str]]:
    """In-band FreeIPMI, for hosts that have it and not ipmitool."""
    room = R.RoomFacts(bmc="in-band")
    notes: list[str] = []
    rc, out, err = _run(
        [
            shutil.which("ipmi-sensors") or "ipmi-sensors",
            "--output-sensor-state",
            "--output-sensor-thresholds",
        ],
        opts,
    )
    if rc != 0:
        raise BmcError(f"ipmi-sensors: {opts.redact(err.strip()[:200]) or f'exit {rc}'}")
    room.merge(freeipmi.parse_sensors(out))
    rc, out, err = _run([shutil.which("ipmi-sel") or "ipmi-sel"], opts)
    if rc == 0:
        room.merge(freeipmi.parse_sel(out))
    else:
        notes.append(f"ipmi-sel: {opts.redact(err.strip()[:200])}")
    return room, notes


def in_band_device() -> str | None:
    return next((d for d in IPMI_DEVICES if os.path.exists(d)), None)


def read_redfish(opts: BmcOptions) -> tuple[R.RoomFacts, list[str]]:
    import httpx

    from gpuclinic.sources.bmc.redfish_live import RedfishReader

    assert opts.redfish
    base = opts.redfish.rstrip("/")
    if "://" not in base:
        base = "https://" + base
    verify = opts.redfish_verify
    if isinstance(verify, str):
        verify = ssl.create_default_context(cafile=verify)
    auth = None
    user = opts.redfish_user or opts.user
    pw = opts.redfish_password if opts.redfish_password is not None else opts.password
    if user and pw is not None:
        auth = httpx.BasicAuth(user, pw)
    try:
        with httpx.Client(
            base_url=base,
            auth=auth,
            verify=verify,
            timeout=opts.timeout_s,
            follow_redirects=False,
            headers={"Accept": "application/json"},
        ) as client:
            reader = RedfishReader(client, deadline_s=opts.deadline_s)
            room = reader.walk()
    except PermissionError as e:
        raise BmcError(str(e)) from None
    except httpx.HTTPError as e:
        hint = (
            " (a self-signed BMC certificate? give --redfish-ca FILE, or --redfish-insecure)"
            if "CERTIFICATE_VERIFY_FAILED" in str(e)
            else ""
        )
        raise BmcError(opts.redact(f"Redfish {base}: {type(e).__name__}: {e}")[:300] + hint) from None
    room.bmc = base
    if not reader.docs:
        raise BmcError(f"Redfish {base}: no service root")
    return room, [opts.redact(x) for x in reader.errors[:10]]
