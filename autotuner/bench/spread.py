"""How steady a measurement was: the spread of throughput over time windows of one load level (pure).

A single number per trial hides whether the server delivered it evenly or in bursts; on a noisy
machine that decides whether two trials 5% apart differ at all. The level's span (first request sent
-> last one finished) is trimmed by `trim` at both ends (ramp-up and tail), cut into `windows` equal
windows, and the rate is counted per window:

- output tokens/s: each completed request's output tokens are spread evenly over its content chunks
  (a request without chunks counts them at its end);
- requests/s: completions (end of stream) per window.

The spread is the coefficient of variation of the per-window rates (population standard deviation /
mean): 0.05 means the rate moved by about ±5% within the measurement. NaN when the level is too short
or empty (windows under `MIN_WINDOW_S`). Metric names: `<metric>_cv`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from autotuner.bench.client import RequestRecord

WINDOWS = 4
TRIM = 0.1
MIN_WINDOW_S = 0.25  # shorter windows count scheduling jitter, not the server's pace


def _cv(values: Sequence[float]) -> float:
    if len(values) < 2:
        return math.nan
    mean = math.fsum(values) / len(values)
    if mean <= 0:
        return math.nan
    var = math.fsum((v - mean) ** 2 for v in values) / len(values)
    return math.sqrt(var) / mean


def _windows(records: Sequence[RequestRecord], windows: int, trim: float) -> tuple[int, int, int] | None:
    done = [r for r in records if r.error is None]
    if not done:
        return None
    start = min(r.start_ns for r in done)
    end = max(r.end_ns for r in done)
    span = end - start
    lo, hi = start + int(span * trim), end - int(span * trim)
    width = (hi - lo) // windows
    if width < MIN_WINDOW_S * 1e9:
        return None
    return lo, hi, width


def output_rate_cv(records: Sequence[RequestRecord], windows: int = WINDOWS, trim: float = TRIM) -> float:
    """Spread of output tokens/s over the level's windows (see the module docstring)."""
    bounds = _windows(records, windows, trim)
    if bounds is None:
        return math.nan
    lo, hi, width = bounds
    counts = [0.0] * windows
    for r in records:
        if r.error is not None or r.output_tokens <= 0:
            continue
        times = r.chunk_times_ns or [r.end_ns]
        share = r.output_tokens / len(times)
        for t in times:
            if lo <= t < lo + width * windows:
                counts[(t - lo) // width] += share
    return _cv(counts)


def request_rate_cv(records: Sequence[RequestRecord], windows: int = WINDOWS, trim: float = TRIM) -> float:
    """Spread of completed requests/s over the level's windows."""
    bounds = _windows(records, windows, trim)
    if bounds is None:
        return math.nan
    lo, hi, width = bounds
    counts = [0.0] * windows
    for r in records:
        if r.error is None and lo <= r.end_ns < lo + width * windows:
            counts[(r.end_ns - lo) // width] += 1
    return _cv(counts)


def spread_metrics(records: Sequence[RequestRecord]) -> dict[str, float]:
    return {"output_tok_per_s_cv": output_rate_cv(records), "request_per_s_cv": request_rate_cv(records)}
