"""Which load level a trial measures next, inside one launch (pure: no I/O, no clock).

Two plans answer `next_level(measured)` from the metrics of the levels measured so far, or None when
the trial's sweep is over (`done` then says why):

- `LevelList`: the experiment's levels in order, ending early once more load no longer raises
  throughput (saturation).
- `Bisection`: the highest load that still meets the SLO. It probes the low end, then the high end,
  then the geometric midpoint of the highest passing and the lowest failing load above it, until
  `steps` levels are measured or the two cannot be told apart (concurrency: no integer between them;
  rate: within `tolerance` of each other). Geometric midpoints because loads span orders of magnitude
  (1 to 64: 8, not 32). Every probe falls between a pass and a fail, so a noisy measurement can only
  narrow the interval, never send the search outside it; the answer is the highest load that passed.

A level "passes" when `passes(metrics)` says so (objective.meets: the SLO and the error-rate limit).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from autotuner.config import LoadConfig
from autotuner.core.objective import saturated

Metrics = Mapping[str, float]


class LevelList:
    """The listed levels, lowest first; stops at saturation when `saturation_gain` is not None."""

    def __init__(self, levels: Sequence[dict[str, Any]], saturation_gain: float | None):
        self.levels, self.saturation_gain = list(levels), saturation_gain
        self.total = len(self.levels)
        self.done = ""

    def next_level(self, measured: Sequence[Metrics]) -> dict[str, Any] | None:
        n = len(measured)
        if n >= len(self.levels):
            self.done = "every level measured"
            return None
        if n and self.saturation_gain is not None and saturated(
                [m["output_tok_per_s"] for m in measured], self.saturation_gain):
            self.done = f"saturated at {level_text(self.levels[n - 1])}: higher loads skipped"
            return None
        return self.levels[n]


class Bisection:
    """The highest load in [low, high] that passes, within `steps` measured levels (module docstring)."""

    def __init__(self, kind: str, low: float, high: float, steps: int, passes: Callable[[Metrics], bool],
                 tolerance: float = 0.1):
        self.kind, self.low, self.high, self.steps = kind, low, high, steps
        self.passes, self.tolerance = passes, tolerance
        self.integer = kind == "max_concurrency"
        self.total = steps
        self.done = ""

    def next_level(self, measured: Sequence[Metrics]) -> dict[str, Any] | None:
        load = self._next(measured)
        return None if load is None else {self.kind: load}

    def _next(self, measured: Sequence[Metrics]) -> float | None:
        if not measured:
            return self.low
        found = highest_passing(measured, self.kind, self.passes)
        if len(measured) >= self.steps:
            self.done = f"{len(measured)} levels measured" + (f": highest passing {self._text(found)}"
                                                                  if found is not None else "")
            return None
        if found is None:
            self.done = f"the lowest load, {self._text(self.low)}, does not meet the SLO"
            return None
        above = [m[self.kind] for m in measured if m[self.kind] > found and not self.passes(m)]
        if not above:
            if found >= self.high:
                self.done = f"even the highest load, {self._text(self.high)}, meets the SLO"
                return None
            return self.high
        fail = min(above)
        mid = self._midpoint(found, fail)
        if mid is None:
            self.done = f"highest passing {self._text(found)}, {self._text(fail)} fails"
        return mid

    def _midpoint(self, lo: float, hi: float) -> float | None:
        mid = math.sqrt(lo * hi)
        if self.integer:
            if hi - lo <= 1:
                return None
            return int(min(max(round(mid), lo + 1), hi - 1))
        return None if hi <= lo * (1 + self.tolerance) else mid

    def _text(self, load: float | None) -> str:
        return level_text({self.kind: load}) if load is not None else "-"


def highest_passing(measured: Sequence[Metrics], kind: str, passes: Callable[[Metrics], bool]) -> float | None:
    """The highest `kind` load among the levels that pass (None: none passed or none has that load)."""
    loads = [m[kind] for m in measured if kind in m and passes(m)]
    return max(loads) if loads else None


def make_plan(load: LoadConfig, passes: Callable[[Metrics], bool]) -> LevelList | Bisection:
    if load.search:
        s = load.search
        low, high = s.max_concurrency or s.request_rate or [0, 0]
        return Bisection(s.kind, low, high, s.steps, passes, s.tolerance)
    return LevelList(load.levels(), load.saturation_gain if load.stop_at_saturation else None)


def level_text(level: Mapping[str, Any]) -> str:
    if "max_concurrency" in level:
        return f"concurrency {level['max_concurrency']:g}"
    if "speedup" in level:
        return f"trace at {level['speedup']:g}x"
    return f"rate {level['request_rate']:g} req/s"
