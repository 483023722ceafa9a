"""When each request of a level is sent, as offsets in seconds from the level's start.

- `poisson` (burstiness 1) and gamma (burstiness k: gaps from a gamma distribution of shape k and mean
  1/rate; k < 1 burstier, k > 1 more even), then rescaled so the last arrival falls at n / rate: the
  schedule offers exactly the rate it names, as `vllm bench serve` rescales its own. Unrescaled, seed 0
  and 64 requests offered 0.857x the rate the level was called.
- `constant`: one request every 1 / rate seconds.
- `scaled`: a trace's own timestamps, replayed `speedup` times faster, from its first request.

The first request goes at 0. Pure: the same arguments give the same schedule.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Literal

Pattern = Literal["poisson", "constant"]


def schedule(n: int, rate: float, *, seed: int = 0, pattern: Pattern = "poisson",
             burstiness: float = 1.0) -> list[float]:
    """Offsets of `n` arrivals at a mean of `rate` requests/s."""
    if n < 1:
        return []
    if not rate > 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    if pattern == "constant":
        return [i / rate for i in range(n)]
    if not burstiness > 0:
        raise ValueError(f"burstiness must be > 0, got {burstiness}")
    rng = random.Random(seed)
    offsets, t = [0.0], 0.0
    for _ in range(n - 1):
        # Gamma of shape k and scale 1/(rate k): mean 1/rate; k = 1 is the exponential (Poisson arrivals).
        t += rng.gammavariate(burstiness, 1.0 / (rate * burstiness))
        offsets.append(t)
    if t > 0:
        # n arrivals at rate R span (n - 1) gaps of 1/R on average: stretch the draw to exactly that.
        target = (n - 1) / rate
        offsets = [o * target / t for o in offsets]
    return offsets


def scaled(timestamps_s: Sequence[float], speedup: float = 1.0) -> list[float]:
    """A trace's timestamps (seconds, non-decreasing) as offsets from its first, `speedup` times faster."""
    if not speedup > 0:
        raise ValueError(f"speedup must be > 0, got {speedup}")
    if not timestamps_s:
        return []
    first = timestamps_s[0]
    return [(t - first) / speedup for t in timestamps_s]


def offered_rate(offsets_s: Sequence[float]) -> float | None:
    """Requests per second the schedule offers: (n - 1) gaps over its span (None: fewer than 2, or all at once)."""
    if len(offsets_s) < 2 or offsets_s[-1] <= offsets_s[0]:
        return None
    return (len(offsets_s) - 1) / (offsets_s[-1] - offsets_s[0])
