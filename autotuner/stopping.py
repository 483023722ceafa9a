"""When to stop a study (pure): a target met, or convergence.

Convergence: the best value has not improved by more than the measurement noise over the last
`patience` finished trials. Noise is measured, not assumed: the relative spread of repeated
measurements of one configuration (retries, confirmations); until the study has any, a configured
floor (`min_improvement`, 5% by default: what repeats of one config differ by on a shared 2-core box)
stands in. Every number here is relative to the best value, so units never matter.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class StopDecision:
    reason: str  # "target" or "converged"
    message: str


def relative_noise(repeats: Mapping[object, Sequence[float]]) -> float | None:
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
