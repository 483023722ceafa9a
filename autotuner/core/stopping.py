"""When to stop a study (pure): a target met, convergence, or the same start failure again and again.

Convergence: the best value has not improved by more than the measurement noise over the last
`patience` finished trials. Noise is measured, not assumed: the relative spread of repeated
measurements of one configuration (retries, confirmations); until the study has any, a configured
floor (`min_improvement`, 5% by default: what repeats of one config differ by on a shared 2-core box)
stands in. Every number here is relative to the best value, so units never matter.

With several objectives (a Pareto front) there is no single best: convergence is the front's
hypervolume not growing by more than the noise over the last `patience` trials (`decide_front`).

A host fault (a GPU that cannot initialise, a broken image) fails every config the same way: when the
last N launches all failed to start with the same class and the same telling line, the study stops and
says so instead of burning the night (`same_start_failure`).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StopDecision:
    reason: str  # "target", "converged" or "start-failures"
    message: str


# A host or image fault shows as a server that exits or never answers; running out of memory or refusing a
# flag's value depends on the config (and reads alike for every config that does it), so it stops nothing.
START_FAILURES = ("exited-at-start", "startup-timeout")


def same_start_failure(endings: Sequence[tuple[str | None, str | None]], n: int) -> StopDecision | None:
    """`endings`: (failure class or None, reason) of the launched trials, oldest first. A stop when the last
    `n` all failed to start alike (numbers, such as ports and pids, do not tell lines apart)."""
    if n <= 0 or len(endings) < n:
        return None
    last = {(cls, re.sub(r"0x[0-9a-f]+|\d+", "#", reason or "")) for cls, reason in endings[-n:]}
    if len(last) != 1:
        return None
    ((cls, _),) = last
    if cls not in START_FAILURES:
        return None
    reason = endings[-1][1] or ""
    return StopDecision("start-failures", f"the last {n} launches failed to start the same way ({cls}: "
                        f"{reason[:300]}): the host or the image, not the configs; fix it, then run again to resume")


def relative_noise(repeats: Mapping[Any, Sequence[float]]) -> float | None:
    """Median over configurations of (max - min) / median of their repeated values; None without repeats."""
    spreads = [(max(v) - min(v)) / statistics.median(v) for v in repeats.values()
               if len(v) >= 2 and statistics.median(v) > 0]
    return statistics.median(spreads) if spreads else None


def target_met(best: float | None, target: float | None, direction: str) -> bool:
    if best is None or target is None:
        return False
    return best >= target if direction == "maximize" else best <= target


def converged(values: Sequence[float | None], direction: str, patience: int, noise: float) -> bool:
    """`values`: the finished trials' values in order (None for failed or pruned ones).

    True when none of the last `patience` trials beat the best before them by more than `noise`.
    """
    if patience <= 0 or len(values) <= patience:
        return False
    head, tail = values[:-patience], values[-patience:]
    measured = [v for v in head if v is not None]
    if not measured:
        return False
    sign = 1.0 if direction == "maximize" else -1.0
    best = max(measured, key=lambda v: sign * v)
    threshold = abs(best) * noise
    return not any(v is not None and sign * (v - best) > threshold for v in tail)


def decide(values: Sequence[float | None], direction: str, *, target: float | None, patience: int | None,
           noise: float) -> StopDecision | None:
    measured = [v for v in values if v is not None]
    sign = 1.0 if direction == "maximize" else -1.0
    best = max(measured, key=lambda v: sign * v) if measured else None
    if target_met(best, target, direction):
        return StopDecision("target", f"target {target:g} reached (best {best:,.1f})")
    if patience and converged(values, direction, patience, noise):
        return StopDecision("converged", f"converged: no trial in the last {patience} beat the best "
                                         f"({best:,.1f}) by more than the noise ({noise:.1%})")
    return None


# --- several objectives: the Pareto front ---------------------------------------------------------------

def front_converged(points: Sequence[Sequence[float] | None], directions: Sequence[str], patience: int,
                    noise: float) -> bool:
    """`points`: the finished trials' objective values in order (None for failed or pruned ones).

    True when the hypervolume dominated by all the points is no more than `noise` (relative) above the
    one dominated by the points before the last `patience` trials: those trials did not move the front.
    Both volumes use one reference point, the worst value of each metric over all points pushed out by a
    tenth of its range, so they compare; a relative change is independent of each metric's unit.
    """
    if patience <= 0 or len(points) <= patience:
        return False
    head = [p for p in points[:-patience] if p is not None]
    measured = [p for p in points if p is not None]
    if not head:
        return False
    before, after = (_hypervolume(head, measured, directions), _hypervolume(measured, measured, directions))
    return not after > before * (1 + noise)


def _hypervolume(points: Sequence[Sequence[float]], frame: Sequence[Sequence[float]],
                 directions: Sequence[str]) -> float:
    import numpy as np
    from optuna._hypervolume import compute_hypervolume  # Optuna's own (WFG); private but long stable

    def losses(ps: Sequence[Sequence[float]]) -> np.ndarray:  # Optuna's hypervolume minimizes every axis
        return np.array(
            [[v if d == "minimize" else -v for v, d in zip(p, directions, strict=False)] for p in ps], dtype=float
        )

    all_losses = losses(frame)
    worst, best = all_losses.max(axis=0), all_losses.min(axis=0)
    reference = worst + 0.1 * np.maximum(worst - best, np.maximum(np.abs(worst), 1e-9))
    return float(compute_hypervolume(losses(points), reference))


def decide_front(points: Sequence[Sequence[float] | None], directions: Sequence[str], *, patience: int | None,
                 noise: float) -> StopDecision | None:
    """Multi-objective stopping: only convergence (a target is one value; config rejects it)."""
    if patience and front_converged(points, directions, patience, noise):
        return StopDecision("converged", f"converged: the last {patience} trials grew the Pareto front's "
                                         f"hypervolume by no more than the noise ({noise:.1%})")
    return None
