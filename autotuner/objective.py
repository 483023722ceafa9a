"""Load-level results -> the value the study optimizes (pure).

A trial is scored by its best load level: throughput is what the server sustains at the load that
suits it, so the sweep's best level, not its last, is the trial's value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from autotuner.config import ObjectiveConfig


def level_value(metrics: Mapping[str, float], objective: ObjectiveConfig) -> float:
    try:
        return float(metrics[objective.metric])
    except KeyError:
        raise KeyError(f"objective metric '{objective.metric}' is not measured "
                       f"(metrics: {', '.join(sorted(metrics))})") from None


def trial_value(levels: Sequence[Mapping[str, float]], objective: ObjectiveConfig) -> float:
    """The best level's value under the objective's direction."""
    if not levels:
        raise ValueError("a trial without measured levels has no value")
    values = [level_value(m, objective) for m in levels]
    return max(values) if objective.direction == "maximize" else min(values)
