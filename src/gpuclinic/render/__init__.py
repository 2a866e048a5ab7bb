"""Renderers turn a :class:`~gpuclinic.diagnose.Report` into text; they know nothing about hardware.

Imported lazily (module ``__getattr__``): ``--json`` never pays for rich, which is the largest
import on doctor's startup path.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuclinic.render.jsonout import render_json
    from gpuclinic.render.markdown import render_markdown
    from gpuclinic.render.terminal import render_terminal

__all__ = ["render_json", "render_markdown", "render_terminal"]
_WHERE = {"render_json": "jsonout", "render_markdown": "markdown", "render_terminal": "terminal"}


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)
