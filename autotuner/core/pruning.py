"""Pruning where the value is decided: what a trial reports after each load level, and the pruner that
stops a trial only when it cannot win any more (pure rules plus one small Optuna pruner).

A trial's value is its best load level that meets the SLO, usually the highest load. Reporting each
level's own value made the pruner compare a config at concurrency 4 with others' values at 4, so a
config that shines only under load was stopped before that load ran. Instead a trial reports its
**ceiling** after each level: the best value it can still reach.

- Throughput-like metrics (per second, maximized): at a higher load L a server gives at most what it
  gave at a lower load l scaled by L / l (more load never makes a single request faster; batching at
  best keeps its time). So the ceiling is the best passing value so far or, for the levels still to
  come, the tightest such bound over the measured levels, scaled to the plan's highest load.
  That bound is sound but loose (4x from concurrency 4 to 16, where servers measured here grow at most
  1.5x), so once `MIN_SCALINGS` trials of the study measured both loads, the steepest growth they
  measured, plus `SCALING_MARGIN`, replaces it (`measured_scaling`): an estimate from this study's own
  servers, never steeper than the sound bound.
- Latency-like metrics (minimized): more load never lowers latency, so the best passing value so far
  is already the floor. Nothing passing yet: no bound.
- Other metrics: no bound until the last level.

`CeilingPruner` prunes when the ceiling cannot beat the best finished trial by more than the noise
margin: with the sound bound a pruned trial provably could not have won; with the measured scaling it
could only if it grew faster with load than every measured trial, by more than the margin.
Optuna's own pruners (median, ...) also take ceilings, and so compare the same quantity step by step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import optuna
from optuna.pruners import BasePruner
from optuna.trial import FrozenTrial, TrialState

Metrics = Mapping[str, float]
MIN_SCALINGS = 3  # trials that measured both loads before their growth replaces the sound bound
SCALING_MARGIN = 0.25  # headroom over the steepest growth measured (a config may scale a little better)


def scales_with_load(metric: str) -> bool:
    """Rates (tokens or requests per second): what a server delivers grows at most linearly with load."""
    return metric.endswith("_per_s")


def measured_scaling(trials: Sequence[Sequence[Metrics]], *, metric: str, load_key: str,
                     max_load: float) -> dict[float, float]:
    """Per lower load l: the steepest growth value(max_load) / value(l) over finished trials that measured
    both, plus the margin; only loads seen in at least MIN_SCALINGS trials (the rest keep the sound bound)."""
    growth: dict[float, list[float]] = {}
    for levels in trials:
        values = {float(m[load_key]): float(m[metric]) for m in levels if m.get(metric) and m.get(load_key)}
        top = values.get(float(max_load))
        if top is None:
            continue
        for load, value in values.items():
            if load < max_load and value > 0:
                growth.setdefault(load, []).append(top / value)
    return {load: max(g) * (1 + SCALING_MARGIN) for load, g in growth.items() if len(g) >= MIN_SCALINGS}


def ceiling(levels: Sequence[Metrics], *, metric: str, direction: str, load_key: str, max_load: float,
            passes: Callable[[Metrics], bool], last_level: bool,
            scaling: Mapping[float, float] | None = None) -> float | None:
    """The best value the trial can still reach after measuring `levels` (None: no bound yet).
    `scaling`: the study's measured growth per lower load (`measured_scaling`), where it has one."""
    passing = [float(m[metric]) for m in levels if passes(m) and m.get(metric) is not None]
    if direction == "minimize":
        return min(passing) if passing else None
    best = max(passing) if passing else None
    if last_level:
        return best
    if not scales_with_load(metric):
        return None
    scaling = scaling or {}
    bounds = [float(m[metric]) * min(max_load / float(m[load_key]), scaling.get(float(m[load_key]), math.inf))
              for m in levels if m.get(metric) is not None and m.get(load_key)]
    if not bounds:
        return best
    future = min(bounds)
    return future if best is None else max(best, future)


class CeilingPruner(BasePruner):
    """Prune a trial whose reported ceiling cannot beat the best finished trial by more than `margin`."""

    def __init__(self, margin: float = 0.05):
        self.margin = margin

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        step = trial.last_step
        if step is None:
            return False
        bound = trial.intermediate_values[step]
        done = [t.values[0] for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                if t.values and t.user_attrs.get("duplicate_of") is None]
        if not done:
            return False
        if study.direction == optuna.study.StudyDirection.MAXIMIZE:
            return bound * (1 + self.margin) < max(done)
        return bound * (1 - self.margin) > min(done)
