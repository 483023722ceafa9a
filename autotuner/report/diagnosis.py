"""What limits a configuration, where throughput stops growing, and what to try next (pure).

Reads only metric dicts (one per load level, as the tuner stores them in a trial's `levels`, with the
`server_*` summaries of the engine's /metrics and the `gpu_*` summaries of `bench.gpu_telemetry`) and
plain trial data; never a server, never a file.

Which limit binds, at a trial's best level, in this order:

- `kv-cache`  the engine preempted requests, or its KV cache was at least `KV_FULL` full at peak: more
              requests would fit in compute but not in memory (vLLM, SGLang report it; llama.cpp
              does not);
- `queueing`  requests waited inside the server (`requests_waiting` on average >= `QUEUED`) while the
              admitted ones ran: the server admits too few at once (slots, max-num-seqs);
- `power`     (GPU telemetry) the GPUs drew at least `POWER_AT_LIMIT` of their power limit, and the
              driver capped them (power-violation time) or their SM clock ran below `CLOCK_THROTTLED` of
              its maximum: a higher power limit, or fewer watts per token, is what would help;
- `communication` (GPU telemetry, two GPUs or more) PCIe or NVLink ran at `LINK_BUSY` or more of its
              bandwidth (the busier direction) while the SMs were busy less than `SM_BUSY` of the
              time: the GPUs wait on each other (tensor-parallel all-reduce, expert all-to-all): fewer
              GPUs per replica, other layouts, or all-reduce / all-to-all settings are what to try;
- `compute`   every request was admitted and the cache had room, yet that is the rate: the processor
              is the limit at this load;
- `unknown`   fewer than `MIN_SAMPLES` samples of the engine's metrics (a level shorter than about
              1.5 s at the sampler's 0.5 s), or none showed a request running.

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

MIN_SAMPLES = 3        # fewer /metrics samples in a level say nothing about it
KV_FULL = 0.9          # peak KV-cache usage that counts as full
QUEUED = 0.5           # mean requests waiting in the server that counts as queueing
PLATEAU_GAIN = 0.05    # a next load level adding less than this counts as the plateau
CONVERGED_GAIN = 0.01  # best-so-far improvements smaller than this count as none
EDGE_GAIN = 0.05       # best at a param's range edge, this much above the next value: widen the range
POWER_AT_LIMIT = 0.95  # mean draw over the power limit that counts as at the limit
CLOCK_THROTTLED = 0.9  # mean SM clock over its maximum below which the clocks count as held back
LINK_BUSY = 0.5        # mean PCIe or NVLink throughput (the busier direction) over its maximum that counts as busy
SM_BUSY = 60.0         # mean SM utilisation (%) below which the GPUs count as waiting


@dataclass(frozen=True)
class Limit:
    kind: str  # kv-cache, queueing, power, communication, compute, unknown
    why: str


def _num(m: Mapping[str, Any], key: str) -> float | None:
    v = m.get(key)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return float(v)


def binding_limit(level: Mapping[str, Any]) -> Limit:
    """Which limit binds at one load level, from its `server_*` metrics (see the module docstring)."""
    samples = _num(level, "server_samples") or 0.0
    if samples < MIN_SAMPLES:
        return Limit("unknown", f"{samples:.0f} sample(s) of the engine's metrics at this level: too short to tell")
    kv_max = _num(level, "server_kv_cache_usage_max")
    preempted = _num(level, "server_preemptions") or 0.0
    waiting = _num(level, "server_requests_waiting_mean")
    running = _num(level, "server_requests_running_mean")
    running_max = _num(level, "server_requests_running_max")
    if preempted > 0 or (kv_max is not None and kv_max >= KV_FULL):
        parts = []
        if kv_max is not None:
            parts.append(f"peak KV-cache usage {kv_max:.0%}")
        if preempted:
            parts.append(f"{preempted:.0f} preemption(s)")
        return Limit("kv-cache", "KV cache full: " + ", ".join(parts))
    if waiting is not None and waiting >= QUEUED:
        ran = f" while {running:.1f} ran (at most {running_max:.0f})" if running is not None and running_max else ""
        return Limit("queueing", f"on average {waiting:.1f} requests waited in the server{ran}: "
                     "it admits too few requests at once")
    if not running_max:
        return Limit("unknown", "no sample saw a request running")
    if gpu := gpu_limit(level):
        return gpu
    ran = f" ({running:.1f} running on average)" if running is not None else ""
    kv = f", KV cache at most {kv_max:.0%} full" if kv_max is not None else ""
    return Limit("compute", f"every request was admitted{ran}{kv}: the processor is the limit at this load")


def gpu_limit(level: Mapping[str, Any]) -> Limit | None:
    """`power` or `communication` from a level's `gpu_*` telemetry (see the module docstring); None when
    neither holds or fewer than MIN_SAMPLES seconds were sampled."""
    if (_num(level, "gpu_samples") or 0.0) < MIN_SAMPLES:
        return None
    power = _num(level, "gpu_power_frac_mean")
    capped = _num(level, "gpu_power_capped_pct_mean")
    clock = _num(level, "gpu_sm_clock_frac_mean")
    held_back = (capped or 0.0) > 0 or (clock is not None and clock < CLOCK_THROTTLED)
    if power is not None and power >= POWER_AT_LIMIT and held_back:
        held = f"power-capped {capped:.0f}% of the time" if capped else f"SM clock at {clock:.0%} of its maximum"
        return Limit("power", f"the GPUs drew {power:.0%} of their power limit, {held}: power is the limit")
    links = [(frac, name) for name, key in (("PCIe", "gpu_pcie_frac_mean"), ("NVLink", "gpu_nvlink_frac_mean"))
             if (frac := _num(level, key)) is not None]
    sm = _num(level, "gpu_sm_util_mean")
    if (_num(level, "gpu_count") or 0.0) >= 2 and links and sm is not None and sm < SM_BUSY:
        busiest, name = max(links)
        if busiest >= LINK_BUSY:
            return Limit("communication", f"{name} at {busiest:.0%} of its bandwidth while the SMs were busy "
                         f"{sm:.0f}% of the time: the GPUs wait on each other")
    return None


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
