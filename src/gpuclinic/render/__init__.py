"""Renderers turn a :class:`~gpuclinic.diagnose.Report` into text; they know nothing about hardware."""

from __future__ import annotations

from gpuclinic.render.jsonout import render_json
from gpuclinic.render.markdown import render_markdown
from gpuclinic.render.terminal import render_terminal

__all__ = ["render_json", "render_markdown", "render_terminal"]
