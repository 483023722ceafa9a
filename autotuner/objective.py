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


class SloViolated(ValueError):
    """No load level met the SLO: the configuration cannot serve this workload as required."""


def slo_violations(metrics: Mapping[str, float], slo: Mapping[str, float]) -> list[str]:
    """The SLO limits this level breaks, e.g. ["ttft_ms_p99 3120.5 > 2000"]."""
    return [f"{name} {metrics[name]:.1f} > {limit:g}" for name, limit in slo.items()
            if name in metrics and not metrics[name] <= limit]  # NaN (nothing measured) breaks it too


def trial_value(levels: Sequence[Mapping[str, float]], objective: ObjectiveConfig) -> float:
    """The best value among the levels that meet the SLO (all levels when there is none)."""
    if not levels:
        raise ValueError("a trial without measured levels has no value")
    valid = [m for m in levels if not slo_violations(m, objective.slo)]
    if not valid:
        raise SloViolated("no load level met the SLO: " + "; ".join(slo_violations(levels[0], objective.slo)))
    values = [level_value(m, objective) for m in valid]
    return max(values) if objective.direction == "maximize" else min(values)


def saturated(throughputs: Sequence[float], min_gain: float) -> bool:
    """True when the last level's throughput did not beat the best before it by `min_gain` (relative):
    more load no longer buys throughput, so higher levels would only measure queueing."""
    if len(throughputs) < 2:
        return False
    return not throughputs[-1] > max(throughputs[:-1]) * (1 + min_gain)
