"""Load-level results -> the value the study optimizes (pure).

A trial is scored by its best load level: throughput is what the server sustains at the load that
suits it, so the sweep's best level, not its last, is the trial's value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from autotuner.bench.metrics import client_limit_note
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
    """The SLO limits this level breaks, e.g. ["ttft_ms_p99 3120.5 > 2000"]; a p99 of fewer than 100
    requests says it is about the maximum (the 99th percentile of 32 values is between the top two)."""
    completed = metrics.get("completed")
    few = f" (a p99 of {completed:.0f} requests: about their maximum)" if completed and completed < 100 else ""
    return [f"{name} {metrics[name]:.1f} > {limit:g}" + (few if name.endswith("_p99") else "")
            for name, limit in slo.items()
            if name in metrics and not metrics[name] <= limit]  # NaN (nothing measured) breaks it too


def violations(metrics: Mapping[str, float], objective: ObjectiveConfig) -> list[str]:
    """Why this level does not count: the SLO limits it breaks, too many failed requests, and a load
    generator that fell behind its schedule (the level measured the client, not the server)."""
    broken = slo_violations(metrics, objective.slo)
    if client := client_limit_note(metrics):
        broken.append(client)
    rate = metrics.get("error_rate")
    if rate is not None and rate > objective.max_error_rate:
        broken.append(f"error_rate {rate:.1%} > {objective.max_error_rate:.0%}")
    return broken


def meets(metrics: Mapping[str, float], objective: ObjectiveConfig) -> bool:
    return not violations(metrics, objective)


def best_level(levels: Sequence[Mapping[str, float]], objective: ObjectiveConfig) -> Mapping[str, float]:
    """The level a trial is scored by: the best on the (first) metric among the levels that count."""
    if not levels:
        raise ValueError("a trial without measured levels has no value")
    valid = [m for m in levels if meets(m, objective)]
    if not valid:
        raise SloViolated("no load level met the SLO: " + "; ".join(violations(levels[0], objective)))
    pick = max if objective.direction == "maximize" else min
    return pick(valid, key=lambda m: level_value(m, objective))


def scored_index(levels: Sequence[Mapping[str, float]], objective: ObjectiveConfig) -> int | None:
    """Which level `best_level` picks (None: no level counts), so no reader guesses it from the value."""
    try:
        chosen = best_level(levels, objective)
    except (ValueError, KeyError):
        return None
    return next(i for i, m in enumerate(levels) if m is chosen)


def slo_within(metrics: Mapping[str, float], slo: Mapping[str, float], margin: float) -> bool:
    """This level would meet every SLO limit raised by `margin` (relative): a miss within the noise."""
    return bool(slo) and all(name in metrics and metrics[name] <= limit * (1 + margin) for name, limit in slo.items())


def trial_value(levels: Sequence[Mapping[str, float]], objective: ObjectiveConfig) -> float:
    """The best value among the levels that meet the SLO."""
    return level_value(best_level(levels, objective), objective)


def trial_values(levels: Sequence[Mapping[str, float]], objective: ObjectiveConfig) -> list[float]:
    """Every objective metric, read at the level the first metric picks (`best_level`).

    One level for all metrics, so each trial is a point a server really reached: the best of each
    metric taken from different levels (throughput at high load, latency at low) would be a point no
    single load gives.
    """
    level = best_level(levels, objective)
    values = []
    for name in objective.names:
        if name not in level:
            raise KeyError(f"objective metric '{name}' is not measured (metrics: {', '.join(sorted(level))})")
        values.append(float(level[name]))
    return values


def saturated(throughputs: Sequence[float], min_gain: float) -> bool:
    """True when the last level's throughput did not beat the best before it by `min_gain` (relative):
    more load no longer buys throughput, so higher levels would only measure queueing."""
    if len(throughputs) < 2:
        return False
    return not throughputs[-1] > max(throughputs[:-1]) * (1 + min_gain)
