"""Within-measurement spread of throughput, on synthetic records with known timing."""

from __future__ import annotations

import math

import pytest

from autotuner.bench.client import RequestRecord
from autotuner.bench.spread import output_rate_cv, request_rate_cv, spread_metrics

S = 1_000_000_000  # ns


def steady(n: int = 40, seconds: float = 8.0) -> list[RequestRecord]:
    """Requests back to back, each 10 tokens in 10 evenly spaced chunks."""
    each = int(seconds * S / n)
    out = []
    for i in range(n):
        start = i * each
        chunks = [start + (k + 1) * each // 10 for k in range(10)]
        out.append(RequestRecord(start_ns=start, first_token_ns=chunks[0], chunk_times_ns=chunks, end_ns=chunks[-1],
                                 output_tokens=10, usage_reported=True))
    return out


def test_a_steady_server_has_no_spread():
    assert output_rate_cv(steady()) == pytest.approx(0.0, abs=0.02)
    assert request_rate_cv(steady()) == pytest.approx(0.0, abs=0.1)


def test_a_stall_shows_as_spread():
    records = steady()
    # The second half of the level delivers at half the pace: chunks stretched over twice the time.
    slow = [RequestRecord(start_ns=r.start_ns, chunk_times_ns=[t if t < 4 * S else 4 * S + (t - 4 * S) * 2
                                                              for t in r.chunk_times_ns],
                          end_ns=r.end_ns if r.end_ns < 4 * S else 4 * S + (r.end_ns - 4 * S) * 2,
                          output_tokens=10) for r in records]
    assert output_rate_cv(slow) > 0.15


def test_failed_requests_and_short_levels_give_nan():
    failed = [RequestRecord(start_ns=0, end_ns=S, error="HTTP 500")]
    assert math.isnan(output_rate_cv(failed))
    assert math.isnan(output_rate_cv(steady(n=4, seconds=0.5)))  # windows under 0.25 s
    assert set(spread_metrics(steady())) == {"output_tok_per_s_cv", "request_per_s_cv"}
