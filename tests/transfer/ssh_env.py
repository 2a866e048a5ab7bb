"""A real sshd on 127.0.0.1 for the sync tests: its own host key, a user key made here, its own config.

The client side gets an ssh config file with a Host alias (``testbox``) pointing at a port of the
test's choosing (the capped TCP proxy in front of sshd), used through ``-e 'ssh -F CONFIG'``
exactly as a user's ~/.ssh/config would be.
"""

from __future__ import annotations

import getpass
import os
import socket
import subprocess
import time
from pathlib import Path

from ports import free_port


def _free_port() -> int:
    return free_port()  # tests/ports.py: a port the other xdist worker cannot take meanwhile


class Sshd:
    def __init__(self, sshd: str, keygen: str, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        if not os.path.isdir("/run/sshd"):  # Debian's sshd insists on its privilege-separation directory
            try:
                os.makedirs("/run/sshd", mode=0o755)
            except OSError as e:
                raise RuntimeError(f"sshd needs /run/sshd: {e}") from None
        self.port = _free_port()
        hostkey = root / "host_ed25519"
        self.key = root / "id_ed25519"
        for k in (hostkey, self.key):
            subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-f", str(k)], check=True)
        auth = root / "authorized_keys"
        auth.write_text((root / "id_ed25519.pub").read_text())
        os.chmod(auth, 0o600)
        self.user = getpass.getuser()
        cfg = root / "sshd_config"
        cfg.write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {hostkey}\nPidFile {root / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {auth}\nStrictModes no\nPasswordAuthentication "
            "no\nKbdInteractiveAuthentication no\n"
            "UsePAM no\nPermitRootLogin yes\nMaxStartups 100:30:200\nMaxSessions 100\nLogLevel ERROR\n"
            "Subsystem sftp internal-sftp\n"
        )
        self.log = open(root / "sshd.log", "wb")
        self.proc = subprocess.Popen(
            [sshd, "-D", "-e", "-f", str(cfg)], stdout=self.log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 15
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    if s.recv(64).startswith(b"SSH-"):
                        break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"sshd did not start: {(root / 'sshd.log').read_text()[-500:]}")
            time.sleep(0.1)

    def client_config(self, port: int, alias: str = "testbox") -> Path:
        """An ssh_config with a Host alias to ``port`` on 127.0.0.1 (the proxy, or sshd itself)."""
        p = self.root / f"ssh_config_{alias}"
        p.write_text(
            f"Host {alias}\n  HostName 127.0.0.1\n  Port {port}\n  User {self.user}\n  IdentityFile "
            f"{self.key}\n"
            "  IdentitiesOnly yes\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel "
            "ERROR\n"
        )
        return p

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()
