"""Small file helpers for sources that read /proc, /sys and /etc under a replaceable root.

Sources take a ``root`` so tests can point them at fake trees; reads are bounded and never raise,
since an unreadable file is a fact ("could not check"), not an error.
"""

from __future__ import annotations

import os
from pathlib import Path


def under(root: str | os.PathLike[str], rel: str) -> Path:
    """``rel`` (an absolute system path such as ``/proc/1/cgroup``) inside ``root``."""
    return Path(root) / rel.lstrip("/")


def read_text(path: Path, limit: int = 1 << 20) -> str | None:
    """Up to ``limit`` bytes of ``path`` as text, or None when it cannot be read."""
    try:
        with path.open("rb") as fh:
            return fh.read(limit).decode("utf-8", "replace")
    except OSError:
        return None
