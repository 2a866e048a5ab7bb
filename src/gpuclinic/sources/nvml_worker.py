"""The thread every NVML call runs in, so that a call hung inside the driver is abandoned, not waited on.

A GPU whose driver stopped answering (GSP timeout, fallen off the bus) can block an NVML call for
minutes; the reader gives each call a time box and moves on, keeping the stuck thread out of the way.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any


class Hung(Exception):
    """A call did not return within its time box; ``worker`` is the thread still stuck in it."""

    def __init__(self, worker: Worker | None = None) -> None:
        super().__init__()
        self.worker = worker


class Worker:
    """A daemon thread that runs NVML calls, so a hung call can be abandoned instead of waited on.

    Daemon, never joined: a thread stuck inside the driver must not keep the process alive.
    """

    def __init__(self) -> None:
        self._q: queue.SimpleQueue[
            tuple[Callable[..., Any], tuple[Any, ...], list[Any], threading.Event] | None
        ]
        self._q = queue.SimpleQueue()
        self.busy = False  # True while a call is inside NVML (stays True if it never returns)
        self._thread = threading.Thread(target=self._loop, name="gpuclinic-nvml", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            fn, args, box, done = item
            self.busy = True
            try:
                box.append((True, fn(*args)))
            except BaseException as e:  # handed back to the caller's thread
                box.append((False, e))
            self.busy = False
            done.set()

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...], timeout: float) -> Any:
        box: list[Any] = []
        done = threading.Event()
        self._q.put((fn, args, box, done))
        if not done.wait(timeout):
            raise Hung(self)
        ok, val = box[0]
        if ok:
            return val
        raise val

    def stop(self) -> None:
        self._q.put(None)
