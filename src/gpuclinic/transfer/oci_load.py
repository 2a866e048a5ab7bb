"""``get image --load``: hand the pulled image to a container runtime that can really take it.

Why a choice and not ``which docker``: a host often has the docker CLI without a daemon (rootless
setups, CI images, podman hosts with the ``docker`` shim missing its socket); ``docker load`` then
fails after the whole pull.  ``auto`` uses docker only when its daemon answers ``docker version``,
else podman (daemonless, so an installed podman can always load).  ``--runtime`` or
``GPUCLINIC_RUNTIME`` forces one; either way the command that will run is said before it runs.
podman honours its own environment (``CONTAINERS_STORAGE_CONF``, ``CONTAINERS_CONF``) as usual.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from gpuclinic.errors import EXIT_USAGE, GpuclinicError, InputError

RUNTIMES = ("auto", "docker", "podman")
DAEMON_TIMEOUT_S = 10.0


def docker_daemon_answers(docker: str) -> tuple[bool, str]:
    """(True, version) when the docker daemon answers; else (False, the CLI's one-line reason)."""
    try:
        r = subprocess.run(
            [docker, "version", "--format", "{{.Server.Version}}"],
            capture_output=True,
            text=True,
            timeout=DAEMON_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return False, f"no answer from the docker daemon in {DAEMON_TIMEOUT_S:.0f} s"
    except OSError as e:
        return False, str(e)
    if r.returncode == 0 and r.stdout.strip():
        return True, r.stdout.strip()
    lines = [ln.strip() for ln in (r.stderr or r.stdout).splitlines() if ln.strip()]
    return False, (lines[-1] if lines else f"docker version exited {r.returncode}")[:200]


def runtime_choice(want: str | None) -> str:
    """auto | docker | podman from ``--runtime`` or ``GPUCLINIC_RUNTIME`` (checked before the pull)."""
    choice = (want or os.environ.get("GPUCLINIC_RUNTIME") or "auto").strip().lower()
    if choice not in RUNTIMES:
        raise InputError(
            f"--runtime / GPUCLINIC_RUNTIME must be one of {', '.join(RUNTIMES)}: {choice!r}",
            exit_code=EXIT_USAGE,
        )
    return choice


def choose_runtime(want: str | None) -> tuple[str, str, str]:
    """(name, path, why not docker) of the runtime to load into, or a one-line error that says what
    was found.

    ``want``: auto | docker | podman (None: ``GPUCLINIC_RUNTIME`` or auto)."""
    choice = runtime_choice(want)
    docker, podman = shutil.which("docker"), shutil.which("podman")
    if choice == "podman":
        if podman is None:
            raise GpuclinicError("--load: podman is not installed", exit_code=3)
        return "podman", podman, ""
    why = "docker is not installed"
    if docker is not None:
        ok, detail = docker_daemon_answers(docker)
        if ok:
            return "docker", docker, ""
        why = f"docker is installed but its daemon does not answer ({detail})"
    if choice == "docker":
        raise GpuclinicError(f"--load: {why}", exit_code=3)
    if podman is not None:
        return "podman", podman, why
    if docker is None:
        raise GpuclinicError("--load: neither docker nor podman is installed", exit_code=3)
    raise GpuclinicError(f"--load: {why}, and podman is not installed", exit_code=3)


def run_load(name: str, path: str, archive: Path) -> str:
    """``NAME load -i ARCHIVE``; returns the runtime's "Loaded image" line (or the last line)."""
    try:
        r = subprocess.run([path, "load", "-i", str(archive)], capture_output=True, text=True, timeout=3600)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise GpuclinicError(f"--load: {name} load failed: {e}", exit_code=3) from None
    if r.returncode != 0:
        why = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
        raise GpuclinicError(f"--load: {name} load failed: {why[0][:300]}", exit_code=3)
    lines = [ln.strip() for ln in r.stdout.splitlines() if re.match(r"\s*Loaded image", ln)]
    return lines[-1] if lines else ""


def load_archive(
    name: str, path: str, archive: Path, *, say: bool, keep_note: str, why_not_docker: str = ""
) -> str:
    """Load and, on failure, append where the image still is (``keep_note``) to the one-line error."""
    if say:
        because = f" ({why_not_docker})" if why_not_docker else ""
        print(f"gpuclinic: loading into {name}{because}: {Path(path).name} load -i {archive}", flush=True)
    try:
        return run_load(name, path, archive)
    except GpuclinicError as e:
        raise GpuclinicError(f"{e}; {keep_note}", exit_code=3) from None


def cleanup(tmp: Path | None) -> None:
    if tmp is not None:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
