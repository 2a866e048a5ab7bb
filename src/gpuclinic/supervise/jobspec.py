"""The job as ``gpuclinic run`` was given it: its options and its command line.

Why a module of its own: the options are read by the supervisor loop (runner.py), each attempt
(attempt.py), the CLI and the Slurm subclass; the command line is filled in per attempt
(``{resume}``, ``{ngpus}``, ``{attempt}``) and must be redacted the same way wherever it is shown,
logged or stored.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuclinic.supervise.classify import default_retry

Notifier = Callable[[dict[str, Any]], None]


@dataclass
class RunOptions:
    cmd: list[str]
    max_restarts: int = 3
    backoff_s: float = 10.0
    backoff_max_s: float = 600.0
    retry_on: frozenset[str] = field(default_factory=lambda: frozenset(default_retry()))
    exclude_bad_gpu: bool = False
    min_gpus: int = 1
    checkpoint_dir: Path | None = None
    hang_timeout_s: float | None = None
    gpu_fault_grace_s: float | None = (
        60.0  # stop a job still running this long after a fatal fault on its GPU
    )
    heartbeat: Path | None = None
    stop_timeout_s: float = 30.0
    log_path: Path | None = None
    kernel_logs: list[str] = field(default_factory=list)
    watch_kernel: bool = True
    sample_interval_s: float = 5.0
    poll_s: float = 0.1
    settle_s: float = 0.5
    db_path: Path | None = None
    echo: bool = True
    env: dict[str, str] | None = None  # base environment (default: ours)
    cwd: str | None = None


def substitute(cmd: list[str], *, resume: str | None, ngpus: int, attempt: int) -> list[str]:
    """Fill ``{resume}``, ``{ngpus}``, ``{attempt}`` in the arguments.

    Without a checkpoint an argument holding ``{resume}`` is dropped, and so is an option right
    before a bare ``{resume}`` (``--resume {resume}``), so the first start runs from scratch.
    """
    out: list[str] = []
    for a in cmd:
        if "{resume}" in a:
            if resume is None:
                if a == "{resume}" and out and out[-1].startswith("-") and "=" not in out[-1]:
                    out.pop()
                continue
            a = a.replace("{resume}", resume)
        out.append(a.replace("{ngpus}", str(ngpus)).replace("{attempt}", str(attempt)))
    return out


_SECRET_WORDS = {
    "key",
    "apikey",
    "token",
    "secret",
    "password",
    "passwd",
    "pass",
    "auth",
    "credential",
    "credentials",
}
_SECRET_VAL = re.compile(
    r"\b(hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}"
    r"|AKIA[0-9A-Z]{16})\b"
)


def _secret_option(name: str) -> bool:
    """``--hf-token``, ``--api_key``, ``--wandb.key``, ``--hftoken`` yes; ``--tokenizer``, ``--keep`` no."""
    parts = [p for p in re.split(r"[-_.]", name.lstrip("-").lower()) if p]
    return any(p in _SECRET_WORDS or p.endswith(("token", "secret", "password")) for p in parts)


def redact_argv(argv: list[str]) -> list[str]:
    """The command as it may be shown, logged and stored: values of token/secret/password options and
    well-known token formats (Hugging Face, GitHub, OpenAI, Slack, AWS) become ``***``."""
    out: list[str] = []
    hide_next = False
    for a in argv:
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        name, eq, _ = a.partition("=")
        if name.startswith("-") and _secret_option(name):
            if eq:
                out.append(f"{name}=***")
                continue
            hide_next = True
        out.append(_SECRET_VAL.sub("***", a))
    return out
