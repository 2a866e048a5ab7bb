"""A real IPMI BMC on loopback: OpenIPMI's ``ipmi_sim`` with inlet, fan and PSU sensors and a SEL.

The sensors' SDRs are built here byte by byte (IPMI v2.0 full sensor record, type 01h) so
``ipmitool sdr elist`` names them; analog readings are polled from files, so a test changes a fan's
speed by writing a number, and discrete states and SEL entries are injected through the simulator's
console (its ``sensor_set_bit`` and ``sel_add`` commands).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from ports import free_port

BMC = 0x20
USER = "admin"


def full_sdr(
    rid: int,
    num: int,
    stype: int,
    entity: int,
    unit: int,
    name: str,
    *,
    event_type: int = 0x01,
    m: int = 1,
    thr: tuple[int, int, int, int, int, int] = (0, 0, 0, 0, 0, 0),
    mask: int = 0x3F3F,
) -> str:
    """A type 01h full sensor record; ``thr`` is (unr, ucr, unc, lnr, lcr, lnc) in raw units."""
    nb = name.encode()
    body = [
        BMC,
        0,
        num,
        entity,
        1,
        0x7F,
        0x68,
        stype,
        event_type,
        mask & 0xFF,
        mask >> 8,
        mask & 0xFF,
        mask >> 8,
        mask & 0xFF,
        mask >> 8,
        0x00 if event_type == 0x01 else 0xC0,
        unit,
        0,
        0,
        m & 0xFF,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0xFF,
        0,
        *thr,
        0,
        0,
        0,
        0,
        0,
        0xC0 | len(nb),
        *nb,
    ]
    hdr = [rid & 0xFF, rid >> 8, 0x51, 0x01, len(body)]
    return " ".join(f"0x{b:02x}" for b in hdr + body)


class SimBmc:
    """ipmi_sim with: 01 Inlet Temp, 02 FAN1, 03 FAN2 (RPM, x60), 04 PS1 Status, 05 PS2 Status."""

    def __init__(self, root: Path, password: str, inlet_c: int = 24) -> None:
        self.root = root
        self.password = password
        self.port = free_port(socket.SOCK_DGRAM)
        self.console = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        (root / "state").mkdir(parents=True)
        self.set_value("inlet", inlet_c)
        self.set_value("fan1", 150)  # x60 = 9000 RPM
        self.set_value("fan2", 150)
        (root / "lan.conf").write_text(f"""name "gpuclinic-sim"
set_working_mc 0x20
  startlan 1
    addr 127.0.0.1 {self.port}
    priv_limit admin
    allowed_auths_callback md5
    allowed_auths_user md5
    allowed_auths_operator md5
    allowed_auths_admin md5
    guid a123456789abcdefa123456789abcdef
  endlan
  console 127.0.0.1 {self.console}
  user 2 true "{USER}" "{password}" admin 10 md5
""")
        cmds = [
            "mc_setbmc 0x20",
            "mc_add 0x20 0 has-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02",
            "sel_enable 0x20 1000 0x0a",
            f'sensor_add 0x20 0 1 0x01 0x01 poll 500 file "{root}/inlet.val"',
            "sensor_set_threshold 0x20 0 1 settable 111000 45 42 40 00 00 00",
            "sensor_set_event_support 0x20 0 1 enable scanning per-state "
            + " ".join(["000111111000000"] * 4),
            "main_sdr_add 0x20 " + full_sdr(1, 1, 0x01, 0x40, 1, "Inlet Temp", thr=(45, 42, 40, 0, 0, 0)),
            f'sensor_add 0x20 0 2 0x04 0x01 poll 500 file "{root}/fan1.val"',
            "sensor_set_threshold 0x20 0 2 settable 000111 00 00 00 00 10 15",
            "sensor_set_event_support 0x20 0 2 enable scanning per-state "
            + " ".join(["000000000010101"] * 4),
            "main_sdr_add 0x20 " + full_sdr(2, 2, 0x04, 0x1D, 18, "FAN1", m=60, thr=(0, 0, 0, 0, 10, 15)),
            f'sensor_add 0x20 0 3 0x04 0x01 poll 500 file "{root}/fan2.val"',
            "sensor_set_threshold 0x20 0 3 settable 000111 00 00 00 00 10 15",
            "sensor_set_event_support 0x20 0 3 enable scanning per-state "
            + " ".join(["000000000010101"] * 4),
            "main_sdr_add 0x20 " + full_sdr(3, 3, 0x04, 0x1D, 18, "FAN2", m=60, thr=(0, 0, 0, 0, 10, 15)),
            "sensor_add 0x20 0 4 0x08 0x6f",
            "sensor_set_bit_clr_rest 0x20 0 4 0 1 0",
            "sensor_set_event_support 0x20 0 4 enable scanning per-state "
            + " ".join(["000000001111111"] * 4),
            "main_sdr_add 0x20 " + full_sdr(4, 4, 0x08, 0x0A, 0, "PS1 Status", event_type=0x6F, mask=0x007F),
            "sensor_add 0x20 0 5 0x08 0x6f",
            "sensor_set_bit_clr_rest 0x20 0 5 0 1 0",
            "sensor_set_event_support 0x20 0 5 enable scanning per-state "
            + " ".join(["000000001111111"] * 4),
            "main_sdr_add 0x20 " + full_sdr(5, 5, 0x08, 0x0A, 0, "PS2 Status", event_type=0x6F, mask=0x007F),
            "mc_enable 0x20",
        ]
        (root / "cmds").write_text("\n".join(cmds) + "\n")

    def set_value(self, name: str, raw: int) -> None:
        (self.root / f"{name}.val").write_text(f"{raw}\n")

    def start(self, ipmi_sim: str, ipmitool: str) -> None:
        log = open(self.root / "sim.log", "wb")
        self.proc = subprocess.Popen(
            [
                ipmi_sim,
                "-n",
                "-c",
                str(self.root / "lan.conf"),
                "-f",
                str(self.root / "cmds"),
                "-s",
                str(self.root / "state"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.root,
        )
        deadline = time.monotonic() + 15
        env = {**os.environ, "IPMI_PASSWORD": self.password}
        while time.monotonic() < deadline:
            r = subprocess.run(
                [
                    ipmitool,
                    "-I",
                    "lanplus",
                    "-C",
                    "3",
                    "-H",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                    "-U",
                    USER,
                    "-E",
                    "-N",
                    "1",
                    "-R",
                    "1",
                    "sdr",
                    "elist",
                ],
                capture_output=True,
                text=True,
                env=env,
                timeout=10,
                check=False,
            )
            if r.returncode == 0 and "FAN2" in r.stdout and "PS2 Status" in r.stdout:
                time.sleep(0.6)  # let the file-polled sensors take their first value
                return
            time.sleep(0.3)
        raise RuntimeError("ipmi_sim did not answer: " + (self.root / "sim.log").read_text()[-500:])

    def command(self, line: str) -> str:
        """Run one simulator command through its console."""
        with socket.create_connection(("127.0.0.1", self.console), timeout=5) as s:
            s.settimeout(1.0)
            with contextlib.suppress(OSError):
                s.recv(4096)  # the prompt
            s.sendall(line.encode() + b"\n")
            time.sleep(0.3)
            out = b""
            with contextlib.suppress(OSError):
                out = s.recv(4096)
        return out.decode(errors="replace")

    def psu_fail(self, num: int = 4) -> None:
        """PS1 Status: failure detected (offset 1) asserted, with its SEL record."""
        self.command(f"sensor_set_bit 0x20 0 {num} 1 1 0")
        now = int(time.time())
        ts = " ".join(f"0x{(now >> s) & 0xFF:02x}" for s in (0, 8, 16, 24))
        self.command(f"sel_add 0x20 0x02 {ts} 0x20 0x00 0x04 0x08 0x{num:02x} 0x6f 0x01 0xff 0xff")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
            self.proc = None


@contextlib.contextmanager
def running(root: Path, password: str, ipmi_sim: str, ipmitool: str, inlet_c: int = 24) -> Iterator[SimBmc]:
    sim = SimBmc(root, password, inlet_c)
    try:
        sim.start(ipmi_sim, ipmitool)
        yield sim
    finally:
        sim.stop()
