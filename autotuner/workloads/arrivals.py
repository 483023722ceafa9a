"""When each request of a level is sent, as offsets in seconds from the level's start.

- `poisson` (burstiness 1) and gamma (burstiness k: gaps from a gamma distribution of shape k and mean
  1/rate; k < 1 burstier, k > 1 more even), then rescaled so the last of n arrivals falls at n / rate:
  the schedule offers exactly the rate it names. This is `vllm bench serve`'s own schedule (serve.py,
  get_request: n gaps, the first before the first request, normalised to n / rate). Unrescaled, seed 0
  and 64 requests offered 0.857x the rate the level was called.
- `constant`: one request every 1 / rate seconds (vLLM's infinite burstiness), the first after one gap.
- `scaled`: a trace's own timestamps, replayed `speedup` times faster, its first request at 0.

Pure: the same arguments give the same schedule.
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
        return [(i + 1) / rate for i in range(n)]
    if not burstiness > 0:
        raise ValueError(f"burstiness must be > 0, got {burstiness}")
    rng = random.Random(seed)
    offsets, t = [], 0.0
    for _ in range(n):
        # Gamma of shape k and scale 1/(rate k): mean 1/rate; k = 1 is the exponential (Poisson arrivals).
        t += rng.gammavariate(burstiness, 1.0 / (rate * burstiness))
        offsets.append(t)
    # n arrivals at rate R take n / R seconds: stretch the draw to exactly that.
    return [o * (n / rate) / t for o in offsets] if t > 0 else offsets


def scaled(timestamps_s: Sequence[float], speedup: float = 1.0) -> list[float]:
    """A trace's timestamps (seconds, non-decreasing) as offsets from its first, `speedup` times faster."""
    if not speedup > 0:
        raise ValueError(f"speedup must be > 0, got {speedup}")
    if not timestamps_s:
        return []
    first = timestamps_s[0]
    return [(t - first) / speedup for t in timestamps_s]


def offered_rate(offsets_s: Sequence[float], *, gap_first: bool) -> float | None:
    """Requests per second a schedule offers. `gap_first`: a rate's schedule (`schedule`), whose first
    request waits one gap: n requests over the time to the last. Else a trace's (`scaled`), whose first
    goes at 0: its n - 1 gaps over its span. None for fewer than 2 requests, or all at once."""
    n = len(offsets_s)
    if n < 2 or offsets_s[-1] <= offsets_s[0]:
        return None
    return n / offsets_s[-1] if gap_first else (n - 1) / (offsets_s[-1] - offsets_s[0])
