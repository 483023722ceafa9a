"""Ctrl-C and SIGTERM, the way a person watching an overnight run expects.

First signal: finish the measurement under way, record it, stop the engine, exit with a line saying how
to resume. Second signal: stop now. During a measurement "now" is a cancellation of the measuring task
(a KeyboardInterrupt raised from a signal handler can land in a weakref callback or a library's finally
block and be swallowed); elsewhere it is a KeyboardInterrupt. Handlers are only installed from the main
thread and are restored on exit.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable
from types import FrameType


class StopRequests:
    def __init__(self, on_first: Callable[[str], None] = lambda name: None):
        self.requested: str | None = None  # the signal's name once one arrived
        self.at_once = False  # a second signal arrived
        self.task: asyncio.Task | None = None  # the measurement under way, cancelled by a second signal
        self._on_first = on_first
        self._previous: dict[int, object] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            self.at_once = True
            if self.task is not None and not self.task.done():
                self.task.get_loop().call_soon_threadsafe(self.task.cancel)
                return
            raise KeyboardInterrupt
        self.requested = signal.Signals(signum).name
        self._on_first(self.requested)

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]  # getsignal may give None (a C handler)
        self._previous.clear()
