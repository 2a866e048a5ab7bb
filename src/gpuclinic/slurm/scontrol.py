"""Talk to Slurm through ``scontrol``: read this node's state and reason, drain, resume, requeue.

We call the real client (argv lists, no shell, a timeout each) rather than the REST API: every
compute node has ``scontrol`` and the munge key it needs; ``slurmrestd`` is rarely deployed.
``SLURM_CONF`` in the environment is honoured by scontrol itself.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass

from gpuclinic.errors import GpuclinicError

#: Every reason gpuclinic sets starts with this; only such drains are ever undone by gpuclinic.
REASON_PREFIX = "gpuclinic:"
REASON_MAX = 120  # Slurm keeps longer reasons, but sinfo -R shows 20 chars and people read one line
_TIMEOUT_S = 20.0
# "Reason=text [user@2026-12-01T18:37:42]" at the end of `scontrol -o show node`
_REASON = re.compile(r"(?:^|\s)Reason=(.*?)(?:\s\[([^\]@\s]+)@([^\]\s]+)\])?\s*$")


class SlurmError(GpuclinicError):
    """scontrol missing, failing or timing out: the check could not act (exit 3)."""


@dataclass(frozen=True)
class NodeState:
    name: str
    state: str  # e.g. "IDLE+DRAIN", "MIXED", "DOWN+NOT_RESPONDING"
    reason: str | None
    reason_user: str | None = None

    @property
    def flags(self) -> set[str]:
        return {p for p in self.state.upper().split("+") if p}

    @property
    def drained(self) -> bool:
        """Drained or draining (DRAIN flag) or down: no new jobs land here."""
        f = self.flags
        return bool(f & {"DRAIN", "DRAINED", "DRAINING", "DOWN", "FAIL"})

    @property
    def ours(self) -> bool:
        """Drained with a reason gpuclinic wrote; any other reason belongs to someone else."""
        return bool(self.reason) and str(self.reason).startswith(REASON_PREFIX)


def this_node(explicit: str | None = None) -> str:
    """The Slurm node name: --node, else SLURMD_NODENAME (set for HealthCheckProgram/Prolog), else hostname
    -s."""
    name = explicit or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    if not name or any(c.isspace() or c in "=,[]" for c in name):
        raise GpuclinicError(f"not a Slurm node name: {name!r}", exit_code=64)
    return name


def clean_reason(text: str) -> str:
    """One printable line, short, and always carrying the gpuclinic prefix."""
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    if not text.startswith(REASON_PREFIX):
        text = f"{REASON_PREFIX} {text}"
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 3].rstrip() + "..."


class Scontrol:
    """A thin wrapper over the scontrol binary (path overridable for non-standard installs)."""

    def __init__(self, binary: str | None = None, timeout_s: float = _TIMEOUT_S) -> None:
        path = binary or shutil.which("scontrol")
        if not path:
            raise SlurmError("scontrol not found in PATH (install slurm-client, or pass --scontrol PATH)")
        self.binary = path
        self.timeout_s = timeout_s

    def _run(self, *args: str) -> str:
        try:
            p = subprocess.run(
                [self.binary, *args],
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise SlurmError(
                f"scontrol {args[0]} timed out after {self.timeout_s:g}s (slurmctld down?)"
            ) from None
        except OSError as e:
            raise SlurmError(f"cannot run {self.binary}: {e.strerror or e}") from None
        if p.returncode != 0:
            msg = (p.stderr or p.stdout).strip().splitlines()
            raise SlurmError(
                f"scontrol {' '.join(args[:2])} failed: {msg[-1] if msg else f'exit {p.returncode}'}"
            )
        return p.stdout

    def node(self, name: str) -> NodeState:
        out = self._run("-o", "show", "node", name)
        line = next((ln for ln in out.splitlines() if ln.startswith(f"NodeName={name} ")), None)
        if line is None:
            raise SlurmError(f"scontrol does not know node {name!r}")
        return parse_node_line(line)

    def drain(self, name: str, reason: str) -> None:
        self._run("update", f"NodeName={name}", "State=DRAIN", f"Reason={clean_reason(reason)}")

    def resume(self, name: str) -> None:
        self._run("update", f"NodeName={name}", "State=RESUME")

    def requeue(self, job_id: str) -> None:
        if not re.fullmatch(r"\d+(_\d+)?", job_id):
            raise SlurmError(f"not a Slurm job id: {job_id!r}")
        self._run("requeue", job_id)


def parse_node_line(line: str) -> NodeState:
    """One ``scontrol -o show node`` line -> state and reason (the reason may contain spaces)."""
    name = re.search(r"(?:^|\s)NodeName=(\S+)", line)
    state = re.search(r"(?:^|\s)State=(\S+)", line)
    reason: str | None = None
    user: str | None = None
    m = _REASON.search(line)
    if m:
        reason = m.group(1).strip() or None
        user = m.group(2)
        if reason in ("(null)", "none"):
            reason = None
    return NodeState(
        name=name.group(1) if name else "?",
        state=state.group(1) if state else "UNKNOWN",
        reason=reason,
        reason_user=user,
    )
