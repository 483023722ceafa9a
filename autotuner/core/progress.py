"""What a person watching a long study sees: trial n of N, phase, last and best result.

One line per event, so the same output reads well in a terminal and in a CI or nohup log.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.markup import escape


class Progress:
    def __init__(self, total: int | None, metric: str, console: Console | None = None, worker: str | None = None):
        self.total = total
        self.worker = worker  # which of several workers on one study prints this line
        self.metric = metric
        self.console = console or Console(stderr=True, highlight=False)
        self._index = 0
        self._number = 0
        self._started = 0.0
        self._label: str | None = None

    def _prefix(self) -> str:
        of = f"/{self.total}" if self.total else ""
        who = f"{self.worker} · " if self.worker else ""
        what = self._label or f"trial {self._index}{of} · #{self._number}"
        return f"[bold cyan]{escape(f'[{who}{what}]')}[/]"

    def confirming(self, number: int, what: str, measurement: int, measurements: int) -> None:
        """The phases that follow belong to a re-measurement of trial `number` (`what`: "#1 of 2", "the
        baseline"), not to the last trial."""
        self._label = f"confirm {measurement}/{measurements} · #{number}"
        self.phase(f"confirming {what} (one round, interleaved)")

    def trial_started(self, index: int, number: int, what: str) -> None:
        self._index, self._number, self._started = index, number, time.monotonic()
        self._label = None
        self.phase(what)

    def phase(self, text: str) -> None:
        self.console.print(f"{self._prefix()} {escape(text)}", soft_wrap=True)

    def trial_finished(self, state: str, value: float | None, reason: str | None,
                       best: tuple[int, float] | None) -> None:
        colour = {"COMPLETE": "green", "PRUNED": "yellow"}.get(state, "red")
        what = f"{value:,.1f} {self.metric}" if value is not None else escape(reason or "")
        best_text = f" · best {best[1]:,.1f} (#{best[0]})" if best else ""
        took = time.monotonic() - self._started
        self.console.print(f"{self._prefix()} [{colour}]{state}[/] {what}{best_text} · {took:.1f} s", soft_wrap=True)

    def note(self, text: str) -> None:
        self.console.print(escape(f"[{self.worker}] {text}" if self.worker else text), soft_wrap=True)
