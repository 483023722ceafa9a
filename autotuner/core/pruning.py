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
- Latency-like metrics (minimized): more load never lowers latency, so the best passing value so far
  is already the floor. Nothing passing yet: no bound.
- Other metrics: no bound until the last level.

`CeilingPruner` prunes when the ceiling cannot beat the best finished trial by more than the noise
margin: a pruned trial provably could not have won, so pruning saves time without changing the winner.
Optuna's own pruners (median, ...) also take ceilings, and so compare the same quantity step by step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import optuna
from optuna.pruners import BasePruner
from optuna.trial import FrozenTrial, TrialState

Metrics = Mapping[str, float]


def scales_with_load(metric: str) -> bool:
    """Rates (tokens or requests per second): what a server delivers grows at most linearly with load."""
    return metric.endswith("_per_s")


def ceiling(levels: Sequence[Metrics], *, metric: str, direction: str, load_key: str, max_load: float,
            passes: Callable[[Metrics], bool], last_level: bool) -> float | None:
    """The best value the trial can still reach after measuring `levels` (None: no bound yet)."""
    passing = [float(m[metric]) for m in levels if passes(m) and m.get(metric) is not None]
    if direction == "minimize":
        return min(passing) if passing else None
    best = max(passing) if passing else None
    if last_level:
        return best
    if not scales_with_load(metric):
        return None
    bounds = [float(m[metric]) * max_load / float(m[load_key]) for m in levels
              if m.get(metric) is not None and m.get(load_key)]
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
