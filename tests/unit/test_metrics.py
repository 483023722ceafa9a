"""Metric math on hand-made RequestRecords: every expected number is worked out in the comments."""

from __future__ import annotations

import json
import math
import random

import pytest

from autotuner.bench.client import RequestRecord
from autotuner.bench.metrics import (
    MAX_ERROR_SAMPLES,
    LatencyStats,
    LevelResult,
    dropped_only,
    goodput,
    percentile,
    usage_note,
)

MS = 1_000_000  # ns


def rec(start_ms: float, chunks_ms: list[float], end_ms: float, *, out: int, prompt: int = 0,
        error: str | None = None, usage: bool = True) -> RequestRecord:
    chunks = [round(c * MS) for c in chunks_ms]
    return RequestRecord(start_ns=round(start_ms * MS), first_token_ns=chunks[0] if chunks else None,
                         chunk_times_ns=chunks, end_ns=round(end_ms * MS), prompt_tokens=prompt,
                         output_tokens=out, usage_reported=usage, error=error)


@pytest.fixture
def level() -> LevelResult:
    records = [
        # TTFT 10, E2E 16, TPOT (16-10)/(4-1) = 2, ITL 2, 3 (4 tokens in 3 chunks)
        rec(0, [10, 12, 15], 16, out=4, prompt=100),
        # TTFT 20, E2E 24, TPOT (24-20)/1 = 4, ITL 4
        rec(1, [21, 25], 25, out=2, prompt=50),
        # failed: counted, but in no latency and no token total
        rec(0, [3], 5, out=1, prompt=1000, error="HTTP 500: boom"),
        # one token: TTFT 30, E2E 30, no TPOT, no ITL
        rec(0, [30], 30, out=1, prompt=10),
    ]
    return LevelResult.from_records(records, 2.0, max_concurrency=4)


def test_counts_and_throughput_exclude_failed_requests(level: LevelResult) -> None:
    assert (level.completed, level.failed) == (3, 1)
    assert (level.input_tokens, level.output_tokens) == (160, 7)
    assert level.request_per_s == pytest.approx(1.5)  # 3 completed / 2 s
    assert level.output_tok_per_s == pytest.approx(3.5)  # 7 / 2
    assert level.total_tok_per_s == pytest.approx(83.5)  # (160 + 7) / 2
    assert level.error_rate == pytest.approx(0.25)
    assert level.error_samples == {"HTTP 500: boom": 1}


def test_latency_statistics_follow_vllm_definitions(level: LevelResult) -> None:
    # TTFT [10, 20, 30]: p90 rank 1.8 -> 20 + 0.8 * 10 = 28; p99 rank 1.98 -> 29.8
    assert level.ttft_ms == LatencyStats(count=3, mean=pytest.approx(20), p50=pytest.approx(20),
                                         p90=pytest.approx(28), p99=pytest.approx(29.8), max=pytest.approx(30))
    # TPOT [2, 4]: p90 rank 0.9 -> 3.8
    assert level.tpot_ms == LatencyStats(count=2, mean=pytest.approx(3), p50=pytest.approx(3),
                                         p90=pytest.approx(3.8), p99=pytest.approx(3.98), max=pytest.approx(4))
    # ITL pooled [2, 3, 4]
    assert level.itl_ms == LatencyStats(count=3, mean=pytest.approx(3), p50=pytest.approx(3),
                                        p90=pytest.approx(3.8), p99=pytest.approx(3.98), max=pytest.approx(4))
    # E2E [16, 24, 30]: p90 rank 1.8 -> 24 + 0.8 * 6 = 28.8
    assert level.e2e_ms == LatencyStats(count=3, mean=pytest.approx(70 / 3), p50=pytest.approx(24),
                                        p90=pytest.approx(28.8), p99=pytest.approx(29.88), max=pytest.approx(30))


def test_metrics_flatten_with_units(level: LevelResult) -> None:
    m = level.metrics()
    expected_latency_keys = {f"{n}_ms_{s}" for n in ("ttft", "tpot", "itl", "e2e")
                             for s in ("mean", "p50", "p90", "p99", "max")}
    assert expected_latency_keys <= set(m)
    assert {"output_tok_per_s", "total_tok_per_s", "request_per_s", "error_rate", "completed", "failed"} <= set(m)
    assert all(isinstance(v, float) for v in m.values())
    assert m["ttft_ms_p90"] == pytest.approx(28)
    assert m["itl_ms_mean"] == pytest.approx(3)
    assert m["output_tok_per_s"] == pytest.approx(3.5)
    assert m["failed"] == 1.0


def test_json_round_trip(level: LevelResult) -> None:
    data = json.loads(json.dumps(level.to_json(), allow_nan=False))
    again = LevelResult.from_json(data)
    assert again == level
    assert again.max_concurrency == 4 and again.request_rate is None


def test_all_failed_gives_nan_latencies_not_zero() -> None:
    records = [rec(0, [], 5, out=0, error="ConnectError: refused") for _ in range(3)]
    level = LevelResult.from_records(records, 1.0)
    assert level.completed == 0 and level.failed == 3
    assert level.error_rate == 1.0
    assert level.output_tok_per_s == 0.0
    m = level.metrics()
    for name in ("ttft_ms_p99", "tpot_ms_mean", "itl_ms_p50", "e2e_ms_max"):
        assert math.isnan(m[name]), name
    data = level.to_json()
    assert data["ttft_ms"]["p99"] is None
    json.dumps(data, allow_nan=False)  # strict JSON
    assert math.isnan(LevelResult.from_json(data).ttft_ms.p99)


def test_no_records_at_all() -> None:
    level = LevelResult.from_records([], 0.0)
    assert level.completed == level.failed == 0
    assert math.isnan(level.error_rate)
    assert math.isnan(level.request_per_s)


def test_error_samples_keep_first_distinct_messages_with_counts() -> None:
    messages = [f"error {i}" for i in range(MAX_ERROR_SAMPLES + 3)]
    records = [rec(0, [], 1, out=0, error=m) for m in messages] + [rec(0, [], 1, out=0, error="error 0")]
    level = LevelResult.from_records(records, 1.0)
    assert level.failed == len(records)
    assert list(level.error_samples) == messages[:MAX_ERROR_SAMPLES]
    assert level.error_samples["error 0"] == 2


def test_requests_without_usage_are_counted() -> None:
    records = [rec(0, [1, 2], 3, out=2, usage=False), rec(0, [1, 2], 3, out=2)]
    assert LevelResult.from_records(records, 1.0).usage_missing == 1


def test_completed_request_without_content_has_e2e_but_no_ttft() -> None:
    level = LevelResult.from_records([rec(0, [], 7, out=0)], 1.0)
    assert level.completed == 1
    assert level.e2e_ms.mean == pytest.approx(7)
    assert level.ttft_ms.count == 0 and math.isnan(level.ttft_ms.mean)


def test_percentile_matches_numpy_linear_interpolation() -> None:
    np = pytest.importorskip("numpy")
    rng = random.Random(1)
    for n in (1, 2, 3, 10, 101):
        values = sorted(rng.uniform(0, 100) for _ in range(n))
        for p in (0, 1, 50, 90, 99, 99.9, 100):
            assert percentile(values, p) == pytest.approx(float(np.percentile(values, p)))
    assert math.isnan(percentile([], 50))


def test_usage_missing_rate_and_its_warning() -> None:
    records = [rec(0, [10, 12], 12, out=2), rec(0, [10, 12], 12, out=2, usage=False),
               rec(0, [10], 12, out=1, usage=False), rec(0, [5], 6, out=1, usage=False, error="HTTP 500: x")]
    result = LevelResult.from_records(records, 1.0)
    # Failed requests say nothing about usage: 2 of the 3 completed came without it.
    assert result.metrics()["usage_missing_rate"] == pytest.approx(2 / 3)
    assert usage_note(result).startswith("2 of 3 requests came without usage")
    assert usage_note(LevelResult.from_records(records[:1], 1.0)) is None
    assert math.isnan(LevelResult.from_records([], 1.0).metrics()["usage_missing_rate"])


def test_goodput_counts_requests_meeting_every_per_request_slo() -> None:
    records = [
        rec(0, [10, 12, 15], 16, out=4),   # TTFT 10, TPOT 2, E2E 16
        rec(0, [40, 41], 42, out=2),        # TTFT 40, TPOT 2, E2E 42
        rec(0, [5, 30], 35, out=2),         # TTFT 5, TPOT 30, E2E 35
        rec(0, [8], 9, out=1),              # TTFT 8, one token: TPOT 0 (as vLLM), E2E 9
        rec(0, [1], 2, out=1, error="HTTP 500: x"),  # failed: never good
    ]
    # Duration 2 s: goodput = good requests / 2.
    assert goodput(records, 2.0, {}) == 4 / 2  # no per-request limit: every completed request
    assert goodput(records, 2.0, {"ttft_ms_p99": 20}) == 3 / 2
    assert goodput(records, 2.0, {"ttft_ms_p99": 20, "tpot_ms_mean": 10}) == 2 / 2
    assert goodput(records, 2.0, {"ttft_ms_p99": 20, "tpot_ms_mean": 10, "e2e_ms_p50": 10}) == 1 / 2
    # Two limits on TTFT: the tighter one applies.
    assert goodput(records, 2.0, {"ttft_ms_p50": 9, "ttft_ms_p99": 100}) == 2 / 2
    # ITL and error_rate have no per-request meaning: they do not change goodput.
    assert goodput(records, 2.0, {"itl_ms_p99": 0.001, "error_rate": 0}) == 4 / 2
    assert math.isnan(goodput(records, 0.0, {}))


@pytest.mark.parametrize("errors, limit, expected", [
    (["RemoteProtocolError: server disconnected without sending a response"], 0.0, 1),
    (["RemoteProtocolError: Server disconnected without sending a response."], 0.0, 1),  # httpx's words
    (["RemoteProtocolError: peer closed connection without sending complete message body",
      "ReadError: connection lost: [Errno 104] Connection reset by peer"], 0.0, 2),
    (["RemoteProtocolError: server disconnected without sending a response"], 0.5, 0),  # within the limit
    (["RemoteProtocolError: server disconnected without sending a response", "HTTP 503: overloaded"], 0.0, 0),
    (["timeout after 30 s"], 0.0, 0),  # load, not a drop
    (["ConnectError: Connection refused (127.0.0.1:9)"], 0.0, 0),  # nobody listening: not a passing fault
    ([], 0.0, 0),
])
def test_a_level_is_measured_again_only_when_dropped_requests_alone_failed_it(errors, limit, expected):
    records = [RequestRecord(start_ns=0, error=e) for e in errors] + [RequestRecord(start_ns=0)]
    assert dropped_only(records, limit) == expected


def test_an_open_schedule_the_client_fell_behind_on_does_not_count():
    from autotuner.bench.client import RequestRecord
    from autotuner.bench.metrics import CLIENT_LIMITED
    from autotuner.config import ObjectiveConfig
    from autotuner.core.objective import violations

    def rec(late_ms: float) -> RequestRecord:
        return RequestRecord(start_ns=int(late_ms * 1e6) + 10**9, first_token_ns=2 * 10**9, end_ns=3 * 10**9,
                             output_tokens=4, usage_reported=True, due_ns=10**9)

    on_time = LevelResult.from_records([rec(1.0)] * 99 + [rec(5.0)], 10.0, request_rate=10.0, offered_rate=10.0)
    late = LevelResult.from_records([rec(1.0)] * 90 + [rec(400.0)] * 10, 10.0, request_rate=10.0, offered_rate=10.0)
    # Waiting for one of 4 slots is the server's doing: queue time, never the client's fault.
    slots = LevelResult.from_records([rec(400.0)] * 10, 10.0, max_concurrency=4, request_rate=10.0)
    assert not on_time.client_limited and late.client_limited and not slots.client_limited
    assert late.metrics()[CLIENT_LIMITED] == 1.0 and late.metrics()["queue_ms_p99"] == pytest.approx(400.0)
    why = violations(late.metrics(), ObjectiveConfig())
    assert why and "400 ms late (p99)" in why[0] and not violations(on_time.metrics(), ObjectiveConfig())


def test_a_p99_of_few_requests_says_it_is_about_their_maximum():
    from autotuner.config import ObjectiveConfig
    from autotuner.core.objective import violations

    why = violations({"ttft_ms_p99": 3000.0, "completed": 32.0, "error_rate": 0.0},
                     ObjectiveConfig(slo={"ttft_ms_p99": 2000}))
    assert why == ["ttft_ms_p99 3000.0 > 2000 (a p99 of 32 requests: about their maximum)"]


def _decoding(start_s: float, ttft_s: float, tokens: int, itl_s: float) -> RequestRecord:
    ns = 1_000_000_000
    first = int((start_s + ttft_s) * ns)
    chunks = [first + int(i * itl_s * ns) for i in range(tokens)]
    return RequestRecord(start_ns=int(start_s * ns), first_token_ns=first, chunk_times_ns=chunks,
                         end_ns=chunks[-1], output_tokens=tokens, prompt_tokens=4, usage_reported=True)


def test_steady_throughput_counts_the_tokens_between_the_first_and_the_last_request_sent() -> None:
    # Two requests at once, a third sent at 1 s when the first ends, alone in its drain until 2 s.
    records = [_decoding(0.0, 0.0, 10, 0.1), _decoding(0.0, 0.0, 10, 0.1), _decoding(1.0, 0.0, 10, 0.1)]
    result = LevelResult.from_records(records, 2.0, max_concurrency=2)
    assert result.output_tok_per_s == pytest.approx(15.0)  # as vLLM counts it: the whole level
    # From 0 s to 1 s (the last start): the first two requests' 20 tokens and the third's first one.
    assert result.steady_s == pytest.approx(1.0)
    assert result.output_tok_per_s_steady == pytest.approx(21.0)
    assert result.metrics()["output_tok_per_s_steady"] == pytest.approx(21.0)


def test_a_level_sent_all_at_once_has_no_steady_state() -> None:
    records = [_decoding(0.0, 0.1, 10, 0.1) for _ in range(4)]
    result = LevelResult.from_records(records, 1.0)
    assert math.isnan(result.output_tok_per_s_steady)
    assert LevelResult.from_json(result.to_json()).steady_s == 0.0


def test_a_client_at_a_full_core_limits_the_level_and_says_so() -> None:
    records = [_decoding(0.0, 0.1, 10, 0.1) for _ in range(4)]
    busy = LevelResult.from_records(records, 1.0, max_concurrency=4, client_cpu=0.97, client_lag_ms=[1.0, 40.0])
    idle = LevelResult.from_records(records, 1.0, max_concurrency=4, client_cpu=0.2, client_lag_ms=[1.0, 2.0])
    assert busy.client_limited and not idle.client_limited
    assert busy.metrics()["client_limited"] == 1.0 and idle.metrics()["client_limited"] == 0.0
    assert busy.client_note() == ("the load generator's event loop used 97% of a core: it, not the server, limited "
                                  "the level (raise load.workers)")
    restored = LevelResult.from_json(busy.to_json())
    assert restored.client_cpu == pytest.approx(0.97) and restored.client_lag_ms.max == pytest.approx(40.0)


def test_a_loop_that_wakes_late_limits_the_level_whoever_took_its_core() -> None:
    """A starved loop (other processes on its core) uses little CPU, yet stamps every token late."""
    records = [_decoding(0.0, 0.1, 10, 0.1) for _ in range(4)]
    starved = LevelResult.from_records(records, 1.0, max_concurrency=4, client_cpu=0.25,
                                       client_lag_ms=[240.0] * 99 + [5.0])
    busy_machine = LevelResult.from_records(records, 1.0, max_concurrency=4, client_cpu=0.25,
                                            client_lag_ms=[4.0] * 99 + [150.0])  # one stall is no limit
    assert starved.client_limited and starved.late_loop and not busy_machine.client_limited
    assert starved.client_note() == ("the load generator's event loop woke 240 ms late (p99): it, not the server, "
                                     "limited the level (raise load.workers, or leave the client a core of its own)")
