"""Real external tools that tests start: one place that decides skip versus fail.

A test that needs a real component (Prometheus, Chromium, slurmctld, ipmi_sim, the docker
registry, sshd, ...) calls :func:`require`.  On a developer's machine a missing tool skips the
test with the Debian package to install; with ``CI=true`` it fails the test, so CI cannot go green
by skipping what it was meant to exercise.  ``scripts/test`` installs every package listed here.
"""

from __future__ import annotations

import os
import shutil

import pytest

# tool -> Debian package that ships it (scripts/test installs these)
PACKAGES: dict[str, str] = {
    "aria2c": "aria2",
    "prometheus": "prometheus",
    "promtool": "prometheus",
    "amtool": "prometheus-alertmanager",
    "chromium": "chromium",
    "git": "git",
    "openssl": "openssl",
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "scontrol": "slurm-client",
    "sbatch": "slurm-client",
    "scancel": "slurm-client",
    "munged": "munge",
    "ipmi_sim": "openipmi",
    "ipmitool": "ipmitool",
    "docker-registry": "docker-registry",
    "skopeo": "skopeo",
    "podman": "podman",
    "sshd": "openssh-server",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "rsync": "rsync",
    "python3-torch": "python3-torch",  # not a command: /usr/bin/python3 can import torch (see CHECKS)
}

# "tools" that are not executables on PATH: name -> a probe returning the path to use, or None
TORCH_PYTHON = "/usr/bin/python3"


def _torch_python() -> str | None:
    import subprocess

    if not os.access(TORCH_PYTHON, os.X_OK):
        return None
    try:
        ok = (
            subprocess.run([TORCH_PYTHON, "-c", "import torch"], capture_output=True, timeout=120).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return TORCH_PYTHON if ok else None


CHECKS = {"python3-torch": _torch_python}

_SBIN = ("/usr/sbin", "/sbin", "/usr/local/sbin")


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def which(tool: str) -> str | None:
    """``shutil.which`` that also looks in sbin (sshd, slurmctld and munged live there)."""
    if tool in CHECKS:
        return CHECKS[tool]()
    found = shutil.which(tool)
    if found:
        return found
    for d in _SBIN:
        p = os.path.join(d, tool)
        if os.access(p, os.X_OK):
            return p
    return None


def require(*tools: str) -> dict[str, str]:
    """Return the paths of ``tools``; skip (or, with CI=true, fail) when one is missing."""
    paths: dict[str, str] = {}
    for t in tools:
        p = which(t)
        if p is None:
            pkg = PACKAGES.get(t, t)
            msg = f"{t} not installed (Debian package {pkg}; scripts/test installs it)"
            if in_ci():
                pytest.fail(f"CI=true: {msg}", pytrace=False)
            pytest.skip(msg)
        paths[t] = p
    return paths
