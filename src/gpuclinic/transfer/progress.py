"""Progress display for the engine: a total bar plus one bar per active file, on stderr.

Why polling: workers move tens of thousands of chunks per second; updating rich from each of them
would cost more than the download.  A display thread reads the engine's counters 5x per second.
"""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from gpuclinic.transfer.engine import Engine
from gpuclinic.transfer.redact import redact

MAX_FILE_ROWS = 8


class ProgressDisplay:
    """``with ProgressDisplay(engine, quiet=False): engine.run(...)``."""

    def __init__(self, engine: Engine, *, quiet: bool = False, console: Console | None = None) -> None:
        self.engine = engine
        self.quiet = quiet
        self.console = console or Console(stderr=True)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._progress: Progress | None = None
        self._rows: dict[int, TaskID] = {}
        self._total: TaskID | None = None
        self._last_line = 0.0

    def __enter__(self) -> ProgressDisplay:
        if self.quiet:
            return self
        if self.console.is_terminal:
            self._progress = Progress(
                TextColumn("{task.description}", justify="left"),
                BarColumn(bar_width=30),
                DownloadColumn(binary_units=True),
                TransferSpeedColumn(),
                TimeRemainingColumn(),
                console=self.console,
                transient=False,
            )
            self._progress.start()
            self._total = self._progress.add_task("total", total=None)
        self._thread = threading.Thread(target=self._loop, name="gpuclinic-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
        self._tick(final=True)
        if self._progress is not None:
            self._progress.stop()

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            self._tick()

    def _tick(self, final: bool = False) -> None:
        rows = self.engine.progress()
        done = sum(r[1] for r in rows)
        total = sum(r[2] or 0 for r in rows)
        known = all(r[2] is not None for r in rows)
        if self._progress is None:
            # not a terminal: one plain line every 5 s (and at the end) so logs stay readable
            now = time.monotonic()
            if self.quiet or done == 0 or (not final and now - self._last_line < 5.0):
                return
            self._last_line = now
            pct = f"{100 * done / total:.0f}%" if known and total else "?"
            nfiles = sum(1 for r in rows if r[3] == "done")
            print(
                redact(
                    f"gpuclinic get: {pct} {done / 2**20:.1f}/{total / 2**20:.1f} MiB, "
                    f"{nfiles}/{len(rows)} files"
                ),
                file=sys.stderr,
                flush=True,
            )
            return
        p = self._progress
        assert self._total is not None
        p.update(self._total, completed=done, total=total if known else None)
        active = [i for i, r in enumerate(rows) if r[3] in ("opening", "open", "verifying")]
        for i in list(self._rows):
            if rows[i][3] in ("done", "failed") or i not in active[:MAX_FILE_ROWS]:
                p.remove_task(self._rows.pop(i))
        for i in active[:MAX_FILE_ROWS]:
            label, got, size, state = rows[i]
            desc = redact(f"  {label[-40:]}")
            if i not in self._rows:
                self._rows[i] = p.add_task(desc, total=size)
            p.update(self._rows[i], completed=got, total=size, description=desc)
