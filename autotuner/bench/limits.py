"""Which limit binds a configuration at one load level, from what the measurement sampled (pure).

Reads one level's metric dict, as the tuner stores it in a trial's `levels`: the `server_*` summaries of
the engine's /metrics (`server_metrics.py`) and the `gpu_*` summaries of `gpu_telemetry.py`. Used by the
report (why a config is as fast as it is) and by the advisors (what to change next). In this order:

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
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MIN_SAMPLES = 3        # fewer /metrics samples in a level say nothing about it
KV_FULL = 0.9          # peak KV-cache usage that counts as full
QUEUED = 0.5           # mean requests waiting in the server that counts as queueing
POWER_AT_LIMIT = 0.95  # mean draw over the power limit that counts as at the limit
CLOCK_THROTTLED = 0.9  # mean SM clock over its maximum below which the clocks count as held back
LINK_BUSY = 0.5        # mean PCIe or NVLink throughput (the busier direction) over its maximum that counts as busy
SM_BUSY = 60.0         # mean SM utilisation (%) below which the GPUs count as waiting


@dataclass(frozen=True)
class Limit:
    kind: str  # kv-cache, queueing, power, communication, compute, unknown
    why: str


def number(m: Mapping[str, Any], key: str) -> float | None:
    v = m.get(key)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return float(v)


def binding_limit(level: Mapping[str, Any]) -> Limit:
    """Which limit binds at one load level, from its `server_*` metrics (see the module docstring)."""
    samples = number(level, "server_samples") or 0.0
    if samples < MIN_SAMPLES:
        return Limit("unknown", f"{samples:.0f} sample(s) of the engine's metrics at this level: too short to tell")
    kv_max = number(level, "server_kv_cache_usage_max")
    preempted = number(level, "server_preemptions") or 0.0
    waiting = number(level, "server_requests_waiting_mean")
    running = number(level, "server_requests_running_mean")
    running_max = number(level, "server_requests_running_max")
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
    if (number(level, "gpu_samples") or 0.0) < MIN_SAMPLES:
        return None
    power = number(level, "gpu_power_frac_mean")
    capped = number(level, "gpu_power_capped_pct_mean")
    clock = number(level, "gpu_sm_clock_frac_mean")
    held_back = (capped or 0.0) > 0 or (clock is not None and clock < CLOCK_THROTTLED)
    if power is not None and power >= POWER_AT_LIMIT and held_back:
        held = f"power-capped {capped:.0f}% of the time" if capped else f"SM clock at {clock:.0%} of its maximum"
        return Limit("power", f"the GPUs drew {power:.0%} of their power limit, {held}: power is the limit")
    links = [(frac, name) for name, key in (("PCIe", "gpu_pcie_frac_mean"), ("NVLink", "gpu_nvlink_frac_mean"))
             if (frac := number(level, key)) is not None]
    sm = number(level, "gpu_sm_util_mean")
    if (number(level, "gpu_count") or 0.0) >= 2 and links and sm is not None and sm < SM_BUSY:
        busiest, name = max(links)
        if busiest >= LINK_BUSY:
            return Limit("communication", f"{name} at {busiest:.0%} of its bandwidth while the SMs were busy "
                         f"{sm:.0f}% of the time: the GPUs wait on each other")
    return None
