"""Knowledge as data: XID catalog, CUDA/driver/framework compatibility, error signatures, GPU specs.

Each data file under ``knowledge/data/`` carries a source for every entry; modules here only load
and index them.
"""

from __future__ import annotations

import json
import os
from functools import cache
from typing import Any


@cache
def load_data(name: str) -> Any:
    """Load ``knowledge/data/<name>`` (JSON) shipped inside the package."""
    path = os.path.join(os.path.dirname(__file__), "data", name)
    if os.path.isfile(path):  # the usual install: plain files (skips importlib.resources' import cost)
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    from importlib import resources

    ref = resources.files("gpuclinic.knowledge").joinpath("data").joinpath(name)
    with ref.open("r", encoding="utf-8") as fh:
        return json.load(fh)
