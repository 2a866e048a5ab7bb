"""Knowledge as data: XID catalog, CUDA/driver/framework compatibility, error signatures, GPU specs.

Each data file under ``knowledge/data/`` carries a source for every entry; modules here only load
and index them.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any


@cache
def load_data(name: str) -> Any:
    """Load ``knowledge/data/<name>`` (JSON) shipped inside the package."""
    ref = resources.files("gpuclinic.knowledge").joinpath("data").joinpath(name)
    with ref.open("r", encoding="utf-8") as fh:
        return json.load(fh)
