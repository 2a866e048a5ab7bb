"""A real single-node Slurm (munged + slurmctld + slurmd) in a temp dir, on 127.0.0.1, for tests.

Runs as root with proctrack/linuxproc, task/none and select/linear (no cgroups, no accounting), a
munged with its own key and socket (``AuthInfo=socket=``), and ports picked at start.  The node is
the real short hostname, so ``scontrol`` and slurmd agree on who this node is.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from ports import free_port


class SlurmCluster:
    def __init__(self, root: Path, tools: dict[str, str]) -> None:
        self.root = root
        self.tools = tools
        self.node = socket.gethostname().split(".")[0]
        self.conf = root / "slurm.conf"
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        self.prolog_scenario = root / "prolog-scenario"  # the scripted prolog reads the scenario name here
        self.health_scenario = root / "health-scenario"  # and the HealthCheckProgram this one

    def _write(self) -> None:
        r = self.root
        for d in ("munge", "state", "spool"):
            (r / d).mkdir(mode=0o700, exist_ok=True)
        key = r / "munge" / "munge.key"
        subprocess.run(["dd", "if=/dev/urandom", f"of={key}", "bs=1024", "count=1"], check=True,
                       capture_output=True, timeout=10)
        key.chmod(0o400)
        ctld, sd = free_port(), free_port()
        for kind, src in (("prolog", self.prolog_scenario), ("epilog", self.prolog_scenario),
                          ("healthcheck", self.health_scenario)):
            script = r / f"{kind}.sh"
            # Slurm gives these programs no user environment: the test names the scenario in a file
            script.write_text(
                "#!/bin/sh\n"
                f'[ -s "{src}" ] || exit 0\n'
                f'export SLURM_CONF="{self.conf}"  # slurm.conf is not at the default path here\n'
                f'exec "{sys.executable}" -m gpuclinic slurm {kind} --scenario "$(cat "{src}")" '
                f'>>"{r}/{kind}.log" 2>&1\n')
            script.chmod(0o755)
        self.conf.write_text(f"""\
ClusterName=gpuclinictest
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={ctld}
SlurmdPort={sd}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={r}/munge/munge.sock
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.pid
SlurmctldLogFile={r}/slurmctld.log
SlurmdLogFile={r}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/linear
SchedulerType=sched/builtin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=10
SlurmdTimeout=30
Prolog={r}/prolog.sh
Epilog={r}/epilog.sh
HealthCheckProgram={r}/healthcheck.sh
HealthCheckInterval=2
HealthCheckNodeState=ANY
NodeName={self.node} NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN
PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
""")

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.root / f"{name}.out", "wb")
        p = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env
        )
        log.close()
        self.procs.append((name, p))

    def scontrol(self, *args: str, check: bool = True) -> str:
        p = subprocess.run(
            [self.tools["scontrol"], *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=20,
            check=False,
        )
        if check and p.returncode != 0:
            raise AssertionError(f"scontrol {' '.join(args)}: {p.stderr.strip()}")
        return p.stdout

    def node_line(self) -> str:
        return self.scontrol("-o", "show", "node", self.node).strip()

    def state(self) -> str:
        line = self.node_line()
        return line.split(" State=", 1)[1].split()[0]

    def reason(self) -> str | None:
        line = self.node_line()
        return line.split(" Reason=", 1)[1] if " Reason=" in line else None

    def logs(self) -> str:
        out = []
        for f in ("munge.out", "slurmctld.log", "slurmd.log", "slurmctld.out", "slurmd.out"):
            p = self.root / f
            if p.exists():
                out.append(f"--- {f}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:]))
        return "\n".join(out)

    def wait(self, pred: object, what: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            for name, p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(
                        f"{name} exited ({p.returncode}) while waiting for {what}\n{self.logs()}"
                    )
            try:
                last = pred() if callable(pred) else None
                if last:
                    return
            except (AssertionError, subprocess.TimeoutExpired, IndexError) as e:
                last = e
            time.sleep(0.3)
        raise RuntimeError(f"timed out after {timeout:g}s waiting for {what} (last: {last})\n{self.logs()}")

    def start(self) -> None:
        self._write()
        r = self.root
        self._spawn(
            "munge",
            [
                self.tools["munged"],
                "-F",
                "--force",
                f"--key-file={r}/munge/munge.key",
                f"--socket={r}/munge/munge.sock",
                f"--pid-file={r}/munge/munged.pid",
                f"--log-file={r}/munge/munged.log",
                f"--seed-file={r}/munge/munged.seed",
            ],
        )
        self.wait(lambda: (r / "munge" / "munge.sock").exists(), "the munge socket", 15)
        self._spawn("slurmctld", [self.tools["slurmctld"], "-D", "-f", str(self.conf)])
        self.wait(lambda: "UP" in self.scontrol("ping", check=False), "slurmctld (scontrol ping)", 30)
        self._spawn("slurmd", [self.tools["slurmd"], "-D", "-f", str(self.conf)])
        self.wait(
            lambda: self.state().startswith("IDLE") and "NOT_RESPONDING" not in self.state(),
            "the node to register IDLE",
            40,
        )

    def reset_node(self) -> None:
        """Back to IDLE with no reason, whatever the last test did."""
        self.prolog_scenario.unlink(missing_ok=True)
        self.health_scenario.unlink(missing_ok=True)
        if "DRAIN" in self.state() or "DOWN" in self.state():
            self.scontrol("update", f"NodeName={self.node}", "State=RESUME")
        self.wait(lambda: self.state() == "IDLE", "the node to be IDLE again", 30)

    def stop(self) -> None:
        for _, p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for _, p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        self.procs.clear()
