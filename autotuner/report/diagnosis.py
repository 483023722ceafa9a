"""Where throughput stops growing, whether the search converged, and what to try next (pure).

Reads only metric dicts (one per load level, as the tuner stores them in a trial's `levels`, with the
`server_*` summaries of the engine's /metrics and the `gpu_*` summaries of `bench.gpu_telemetry`) and
plain trial data; never a server, never a file.

Which limit binds at a level is `bench.limits.binding_limit`.

A throughput plateau, across a trial's load levels ordered by load, is the first level after which
the next level adds less than `PLATEAU_GAIN` of the metric. Across the study, `param_trends` does the
same on the upper envelope of the objective against each numeric param (the best value seen at each
param value), which says whether the search space's edge still holds gains.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotuner.bench.limits import number as _num

PLATEAU_GAIN = 0.05    # a next load level adding less than this counts as the plateau
CONVERGED_GAIN = 0.01  # best-so-far improvements smaller than this count as none
EDGE_GAIN = 0.05       # best at a param's range edge, this much above the next value: widen the range


def _load(level: Mapping[str, Any]) -> float:
    for key in ("max_concurrency", "request_rate", "speedup"):
        if level.get(key) is not None:
            return float(level[key])
    return math.inf


def load_text(level: Mapping[str, Any]) -> str:
    if level.get("max_concurrency") is not None:
        return f"concurrency {level['max_concurrency']:g}"
    if level.get("request_rate") is not None:
        return f"{level['request_rate']:g} req/s"
    if level.get("speedup") is not None:
        return f"trace at {level['speedup']:g}x"
    return "the measured load"


@dataclass(frozen=True)
class Plateau:
    level: Mapping[str, Any] | None  # the level where it stops growing; None: still rising at the top
    text: str


def load_plateau(levels: Sequence[Mapping[str, Any]], metric: str) -> Plateau | None:
    """Where `metric` (a higher-is-better rate) stops growing with load; None with fewer than two levels.
    Levels must carry `max_concurrency` or `request_rate` (the tuner stores them)."""
    usable = [lv for lv in levels if _num(lv, metric) is not None]
    if len(usable) < 2:
        return None
    ordered = sorted(usable, key=_load)
    for a, b in zip(ordered, ordered[1:], strict=False):
        va, vb = float(a[metric]), float(b[metric])
        gain = (vb - va) / va if va > 0 else math.inf
        if gain < PLATEAU_GAIN:
            return Plateau(a, f"{metric} plateaus at {load_text(a)} ({va:,.1f}; {gain:+.0%} at {load_text(b)})")
    a, b = ordered[-2], ordered[-1]
    gain = (float(b[metric]) - float(a[metric])) / float(a[metric]) if float(a[metric]) > 0 else math.inf
    return Plateau(None, f"{metric} still rises at the highest load ({load_text(b)}: {gain:+.0%} over {load_text(a)})")


@dataclass(frozen=True)
class ParamTrend:
    param: str
    points: list[tuple[float, float]]  # (param value, best objective there), by param value
    text: str
    at_edge: str | None  # "high" / "low" when the best sits at the range's edge and still gains


def param_trends(trials: Sequence[tuple[Mapping[str, Any], float]], maximize: bool,
                 bounds: Mapping[str, tuple[float, float]] | None = None) -> list[ParamTrend]:
    """For each numeric param seen with at least three values among complete trials: the upper envelope
    of the objective against it, where it flattens, and whether the best sits at the search range's
    edge (`bounds`: param -> (low, high)) with a gain over its neighbour."""
    better = max if maximize else min
    by_param: dict[str, dict[float, float]] = {}
    for params, value in trials:
        for name, v in params.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            env = by_param.setdefault(name, {})
            env[float(v)] = better(env.get(float(v), value), value)
    out = []
    for name, env in sorted(by_param.items()):
        if len(env) < 3:
            continue
        points = sorted(env.items())
        values = [v for _, v in points]
        best_i = values.index(better(values))
        best_x, best_v = points[best_i]
        spread = (max(values) - min(values)) / abs(best_v) if best_v else 0.0
        if spread < PLATEAU_GAIN:
            out.append(
                ParamTrend(name, points, f"{name} barely matters here (best and worst within {spread:.0%})", None)
            )
            continue
        # the smallest param value whose best is within PLATEAU_GAIN of the overall best
        near = next(x for x, v in points if abs(v - best_v) <= PLATEAU_GAIN * abs(best_v))
        edge = None
        lo, hi = (bounds or {}).get(name, (points[0][0], points[-1][0]))
        if len(points) >= 2:
            if best_i == len(points) - 1 and best_x >= hi:
                prev = values[-2]
                if abs(best_v - prev) > EDGE_GAIN * abs(best_v):
                    edge = "high"
            elif best_i == 0 and best_x <= lo:
                nxt = values[1]
                if abs(best_v - nxt) > EDGE_GAIN * abs(best_v):
                    edge = "low"
        if edge == "high":
            text = f"the objective still improves at the top of {name}'s range ({best_x:g})"
        elif edge == "low":
            text = f"the objective is best at the bottom of {name}'s range ({best_x:g})"
        elif near < best_x:
            text = f"the objective flattens from {name}={near:g} (within {PLATEAU_GAIN:.0%} of the best, {best_x:g})"
        else:
            text = f"the objective peaks at {name}={best_x:g}"
        out.append(ParamTrend(name, points, text, edge))
    return out


@dataclass(frozen=True)
class Convergence:
    last_gain_trial: int | None  # trial number of the last improvement > CONVERGED_GAIN
    trials_since: int            # complete trials after it
    text: str


def convergence(values: Sequence[tuple[int, float]], maximize: bool) -> Convergence | None:
    """From (trial number, value) of complete trials in order: when the best last improved by more than
    CONVERGED_GAIN, and how many trials found nothing better since."""
    if not values:
        return None
    best = None
    last = values[0][0]
    for number, v in values:
        if best is None:
            best, last = v, number
            continue
        gain = (v - best) / abs(best) if best else math.inf
        if not maximize:
            gain = -gain
        if gain > CONVERGED_GAIN:
            last = number
        if (v > best) if maximize else (v < best):
            best = v
    since = sum(1 for n, _ in values if n > last)
    if since == 0:
        text = f"the best improved in the last complete trial (#{last}): not converged"
    else:
        text = (f"no gain above {CONVERGED_GAIN:.0%} in the {since} complete trial(s) since #{last}")
    return Convergence(last, since, text)
