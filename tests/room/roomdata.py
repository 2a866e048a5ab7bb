"""Paths shared by the room tests (a plain module: ``conftest`` is not importable by name in a full run)."""

from __future__ import annotations

from pathlib import Path

ROOM_FIXTURES = Path(__file__).parents[1] / "fixtures" / "room"
