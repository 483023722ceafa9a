"""The load generator against a real (fake) OpenAI server whose token send times are known exactly.

The fake server runs in a thread of this process and records when it wrote every token
(perf_counter_ns, the clock the client uses), so the truth for each measured time is at hand.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import statistics
import time
from itertools import pairwise
from typing import Any

import httpx
import pytest

from autotuner.bench.client import RequestRecord, make_client, stream_request
from autotuner.bench.metrics import CLIENT_CPU_LIMIT, CLIENT_LAG_MS, client_limit_note
from autotuner.bench.runner import format_level, run_level, run_level_sync
from autotuner.bench.transport import _ChunkedDecoder
from autotuner.workloads.synthetic import Workload, build_payloads
from tests.fake_openai_server import FakeOpenAIServer, FakeServerConfig, ServedRequest
from tests.support import with_timing_retries

MS = 1_000_000  # ns
TOLERANCE_NS = 1 * MS
# This process also runs the server thread, on a small VM that other work may share: a sample can be
# late by a scheduling hiccup that no client could avoid (and one hiccup delays every request in flight).
# So: every sample causal and under OUTLIER_NS, the median under half the tolerance, at most a fifth of
# the samples beyond TOLERANCE_NS; and a timing check may run several times (with_timing_retries), passing
# if one run passes (a real bug fails every run).
OUTLIER_NS = 50 * MS


def assert_lags_within_tolerance(what: str, lags_ns: list[int], *, causal: bool = True) -> None:
    """lags_ns: measured - true, one per sample (ns). causal: a sample can be late, never early
    (gaps are not causal: one late sample makes the next gap short)."""
    assert lags_ns
    shown = f"{what}: {[round(lag / MS, 3) for lag in lags_ns]} ms"
    lowest = -TOLERANCE_NS if causal else -OUTLIER_NS
    assert all(lowest < lag < OUTLIER_NS for lag in lags_ns), shown
    late = [lag for lag in lags_ns if abs(lag) >= TOLERANCE_NS]
    assert len(late) <= max(1, len(lags_ns) // 5), shown
    assert abs(statistics.median(lags_ns)) < TOLERANCE_NS / 2, shown


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def served_by_prompt(server: FakeOpenAIServer) -> dict[str, ServedRequest]:
    out = {}
    for s in server.requests:
        prompt = s.body["messages"][0]["content"] if "messages" in s.body else s.body["prompt"]
        out[prompt] = s
    return out


def prompts_of(workload: Workload) -> list[str]:
    return [p["messages"][0]["content"] if "messages" in p else p["prompt"] for p in build_payloads(workload, "m")]


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_ttft_itl_and_token_counts_match_the_server_truth(endpoint: str) -> None:
    def check() -> None:
        config = FakeServerConfig(ttft_s=0.030, itl_s=0.008)
        workload = Workload(endpoint=endpoint, num_prompts=16, input_len=24, output_len=6)  # type: ignore[arg-type]
        with FakeOpenAIServer(config) as server:
            result, records = run(run_level(server.base_url, "m", workload, max_concurrency=4))
            truth = served_by_prompt(server)
        assert result.completed == 16 and result.failed == 0
        arrival_lags, ttft_errors, gap_errors, schedule_errors = [], [], [], []
        ttfts_true, itls_true, tpots_true = [], [], []
        for prompt, record in zip(prompts_of(workload), records, strict=False):
            served = truth[prompt]
            assert record.usage_reported
            assert record.output_tokens == 6 and record.prompt_tokens == 24
            # Exactly one time per token: the chat role chunk and the empty finish chunk do not count.
            assert len(record.chunk_times_ns) == len(served.token_sent_ns) == 6
            arrival_lags += [seen - sent for seen, sent in zip(record.chunk_times_ns, served.token_sent_ns, strict=False)]
            assert all(seen >= sent for seen, sent in zip(record.chunk_times_ns, served.token_sent_ns, strict=False))
            # TTFT as measured vs. as it truly was for this client (server's first write - client's start).
            assert record.first_token_ns is not None
            ttft_true = served.token_sent_ns[0] - record.start_ns
            ttfts_true.append(ttft_true / MS)
            ttft_errors.append((record.first_token_ns - record.start_ns) - ttft_true)
            client_gaps = [b - a for a, b in pairwise(record.chunk_times_ns)]
            server_gaps = [b - a for a, b in pairwise(served.token_sent_ns)]
            itls_true += [g / MS for g in server_gaps]
            tpots_true.append((served.token_sent_ns[-1] - served.token_sent_ns[0]) / MS / 5)
            gap_errors += [seen - sent for seen, sent in zip(client_gaps, server_gaps, strict=False)]
            schedule_errors.append((served.token_sent_ns[0] - served.received_ns) - 30 * MS)
        # The server kept its schedule, so the level's statistics mean what the config says.
        assert statistics.median(schedule_errors) < 2 * TOLERANCE_NS, schedule_errors  # the instrument
        assert_lags_within_tolerance("chunk arrival - server send", arrival_lags)
        assert_lags_within_tolerance("TTFT measured - true", ttft_errors)
        assert_lags_within_tolerance("ITL measured - true", gap_errors, causal=False)
        # The level's statistics agree with the truth's.
        assert result.ttft_ms.mean == pytest.approx(statistics.fmean(ttfts_true), abs=1)
        assert result.itl_ms.mean == pytest.approx(statistics.fmean(itls_true), abs=1)
        assert result.itl_ms.p50 == pytest.approx(statistics.median(itls_true), abs=1)
        assert result.tpot_ms.mean == pytest.approx(statistics.fmean(tpots_true), abs=1)
        # The instrument itself: its median gap is the configured one (single sends may be late on a busy VM).
        assert statistics.median(itls_true) == pytest.approx(8, abs=1)
        assert result.output_tokens == 16 * 6 and result.input_tokens == 16 * 24

    with_timing_retries(check)


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
@pytest.mark.parametrize("text", ["a\u2028b", "\u2029\u0085x\n\r\"", "“é中"])
def test_unicode_line_separators_in_content_do_not_break_parsing(endpoint: str, text: str) -> None:
    workload = Workload(endpoint=endpoint, num_prompts=4, input_len=8, output_len=20)  # type: ignore[arg-type]
    with FakeOpenAIServer(FakeServerConfig(token_text=text)) as server:
        result, records = run(run_level(server.base_url, "m", workload, max_concurrency=2))
    assert result.failed == 0, result.error_samples
    assert [len(r.chunk_times_ns) for r in records] == [20] * 4
    assert result.output_tokens == 80


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_crlf_framing_and_spaced_json_are_understood(endpoint: str) -> None:
    workload = Workload(endpoint=endpoint, num_prompts=3, input_len=8, output_len=7)  # type: ignore[arg-type]
    with FakeOpenAIServer(FakeServerConfig(crlf=True, json_spaces=True, itl_s=0.001)) as server:
        result, records = run(run_level(server.base_url, "m", workload))
    assert result.failed == 0, result.error_samples
    assert [(len(r.chunk_times_ns), r.output_tokens, r.usage_reported) for r in records] == [(7, 7, True)] * 3


def test_without_usage_tokens_are_counted_from_chunks_and_marked() -> None:
    workload = Workload(endpoint="chat", num_prompts=2, input_len=8, output_len=5)
    with FakeOpenAIServer(FakeServerConfig(send_usage=False)) as server:
        result, records = run(run_level(server.base_url, "m", workload))
    assert result.failed == 0
    assert [(r.output_tokens, r.usage_reported, r.prompt_tokens) for r in records] == [(5, False, 0)] * 2
    assert result.usage_missing == 2
    assert "without usage" in format_level(result)


def test_http_error_status_is_recorded_with_the_body() -> None:
    workload = Workload(num_prompts=5, input_len=8, output_len=4)
    with FakeOpenAIServer(FakeServerConfig(status=503)) as server:
        result, records = run(run_level(server.base_url, "m", workload, max_concurrency=2))
    assert result.completed == 0 and result.failed == 5
    assert all(r.error is not None and r.error.startswith("HTTP 503") and "fake failure 503" in r.error
               for r in records)
    assert list(result.error_samples.values()) == [5]
    assert result.error_rate == 1.0


def test_error_event_mid_stream_is_a_failure_and_the_next_requests_still_work() -> None:
    workload = Workload(num_prompts=4, input_len=8, output_len=10)
    with FakeOpenAIServer(FakeServerConfig(error_after_tokens=3)) as server:
        result, records = run(run_level(server.base_url, "m", workload, max_concurrency=1))
    assert result.failed == 4
    for r in records:
        assert r.error is not None and "fake mid-stream failure" in r.error, r.error
        assert len(r.chunk_times_ns) == 3


def test_llama_server_style_error_event_is_a_failure() -> None:
    body = (b'data: {"choices":[{"text":"a"}]}\n\n'
            b'error: {"code":500,"message":"slot unavailable","type":"server_error"}\n\n')
    record = run(_mock_stream([body]))
    assert record.error is not None and "slot unavailable" in record.error
    assert len(record.chunk_times_ns) == 1


def test_connection_dropped_mid_body_is_a_failure() -> None:
    workload = Workload(num_prompts=2, input_len=8, output_len=10)
    with FakeOpenAIServer(FakeServerConfig(drop_after_tokens=2)) as server:
        result, records = run(run_level(server.base_url, "m", workload, max_concurrency=1))
    assert result.failed == 2
    assert all(r.error is not None and "closed" in r.error for r in records), [r.error for r in records]


def test_connection_refused_is_a_failure_not_an_exception() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free once closed: nobody listens there
    result, records = run(run_level(f"http://127.0.0.1:{port}", "m", Workload(num_prompts=3), max_concurrency=3))
    assert result.failed == 3
    assert all(r.error is not None and r.error.startswith("ConnectError") for r in records)


def test_per_request_timeout() -> None:
    workload = Workload(num_prompts=2, input_len=8, output_len=4)
    with FakeOpenAIServer(FakeServerConfig(ttft_s=5.0)) as server:
        t0 = time.perf_counter()
        result, records = run(run_level(server.base_url, "m", workload, timeout_s=0.2))
        elapsed_s = time.perf_counter() - t0
    assert elapsed_s < 2.0
    assert result.failed == 2
    assert all(r.error == "timeout after 0.2 s" for r in records)


def test_concurrency_limit_is_respected_and_reached() -> None:
    workload = Workload(num_prompts=30, input_len=8, output_len=4)
    # Long enough per request that all six are surely in flight together, even on a busy machine.
    with FakeOpenAIServer(FakeServerConfig(ttft_s=0.050, itl_s=0.002)) as server:
        result, _ = run(run_level(server.base_url, "m", workload, max_concurrency=6, warmup_requests=3))
        assert server.max_in_flight == 6
        assert server.served == 33
        assert server.connections == 6  # kept alive and reused, never more than the limit
    assert result.completed == 30


def test_unlimited_sends_everything_at_once() -> None:
    workload = Workload(num_prompts=20, input_len=8, output_len=2)
    # Long enough per request that twenty new connections are surely all in flight, even on a busy machine.
    with FakeOpenAIServer(FakeServerConfig(ttft_s=0.5)) as server:
        result, _ = run(run_level(server.base_url, "m", workload))
        assert server.max_in_flight == 20
    assert result.completed == 20


def test_poisson_arrivals_at_the_requested_rate() -> None:
    rate = 200.0
    workload = Workload(num_prompts=200, input_len=8, output_len=2)

    def check() -> None:  # one stall of the process sends the overdue requests back to back: try again
        with FakeOpenAIServer() as server:
            result, records = run(run_level(server.base_url, "m", workload, request_rate=rate, seed=3))
        assert result.completed == 200
        starts = sorted(r.start_ns for r in records)
        gaps_s = [(b - a) / 1e9 for a, b in pairwise(starts)]
        mean_gap_s = statistics.fmean(gaps_s)
        assert mean_gap_s == pytest.approx(1 / rate, rel=0.2)
        # Exponential gaps: standard deviation close to the mean (a fixed pace would give ~0).
        assert 0.7 < statistics.stdev(gaps_s) / mean_gap_s < 1.3
        assert result.request_per_s == pytest.approx(rate, rel=0.2)

    with_timing_retries(check)


def test_plain_httpx_transport_gives_the_same_measurements() -> None:
    def check() -> None:
        config = FakeServerConfig(ttft_s=0.020, itl_s=0.005)
        workload = Workload(endpoint="chat", num_prompts=4, input_len=8, output_len=5)

        async def go() -> tuple[Any, list[RequestRecord]]:
            async with make_client(2, fast=False) as client:
                # warm-up: the first request through httpcore imports and sets up anyio (milliseconds)
                return await run_level(server.base_url, "m", workload, max_concurrency=2, client=client,
                                       warmup_requests=2)

        with FakeOpenAIServer(config) as server:
            result, records = run(go())
            truth = served_by_prompt(server)
        assert result.failed == 0
        lags_ns = []
        for prompt, record in zip(prompts_of(workload), records, strict=False):
            sent = truth[prompt].token_sent_ns
            assert len(record.chunk_times_ns) == 5 == record.output_tokens
            lags_ns += [seen - s for seen, s in zip(record.chunk_times_ns, sent, strict=False)]
        assert_lags_within_tolerance("chunk arrival - server send", lags_ns)

    with_timing_retries(check)


def test_connections_closed_by_the_server_after_a_response_are_not_reused() -> None:
    workload = Workload(num_prompts=6, input_len=8, output_len=3)
    for config in (FakeServerConfig(close_after_response=True),
                   FakeServerConfig(close_after_response=True, itl_s=0.001)):
        with FakeOpenAIServer(config) as server:
            result, _ = run(run_level(server.base_url, "m", workload, max_concurrency=1))
            assert server.connections == 6
        assert result.failed == 0, result.error_samples


def test_a_timed_out_request_frees_its_connection_slot() -> None:
    workload = Workload(num_prompts=2, input_len=8, output_len=3)

    async def go(server: FakeOpenAIServer) -> tuple[Any, Any]:
        async with make_client(2) as client:
            slow, _ = await run_level(server.base_url, "m", workload, max_concurrency=2, client=client, timeout_s=0.1)
            server.configure(ttft_s=0.0)
            async with asyncio.timeout(5):  # leaked slots would make this wait forever
                fast, _ = await run_level(server.base_url, "m", workload, max_concurrency=2, client=client)
            return slow, fast

    with FakeOpenAIServer(FakeServerConfig(ttft_s=5.0)) as server:
        slow, fast = run(go(server))
    assert slow.failed == 2 and fast.completed == 2


def test_load_generation_client_serves_ordinary_httpx_calls() -> None:
    async def go(base_url: str) -> tuple[Any, ...]:
        async with make_client(4) as client:
            health = await client.get(f"{base_url}/health")
            models = await client.get(f"{base_url}/v1/models")
            not_streamed = await client.post(f"{base_url}/v1/completions", json={"prompt": "a", "stream": False})
            missing = await client.get(f"{base_url}/nowhere")
            return health, models, not_streamed, missing

    with FakeOpenAIServer() as server:
        health, models, not_streamed, missing = run(go(server.base_url))
        assert server.connections == 1  # one kept-alive connection for all four
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    assert models.json()["data"][0]["id"] == "fake"
    assert not_streamed.status_code == 200 and not_streamed.json()["choices"][0]["text"]  # a whole answer
    assert missing.status_code == 404


def test_two_worker_processes_share_the_level() -> None:
    workload = Workload(num_prompts=40, input_len=8, output_len=16)
    with FakeOpenAIServer(FakeServerConfig(ttft_s=0.005, itl_s=0.001)) as server:
        result, records = run_level_sync(server.base_url, "m", workload, max_concurrency=4, workers=2,
                                         warmup_requests=2)
        assert server.max_in_flight <= 4
        assert server.served == 42
    assert result.completed == 40 and result.output_tokens == 40 * 16
    assert all(r.output_tokens == 16 for r in records)
    # Records of both processes share one clock: all inside the level's wall duration.
    span_ns = max(r.end_ns for r in records) - min(r.start_ns for r in records)
    assert span_ns / 1e9 <= result.duration_s
    assert 5 <= result.ttft_ms.p50 < 25  # the server's 5 ms, plus whatever a busy machine adds


# ---- framing details, with an in-memory transport -------------------------------------------------


class _PieceStream(httpx.AsyncByteStream):
    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    async def __aiter__(self) -> Any:
        for piece in self.pieces:
            yield piece


async def _mock_stream(pieces: list[bytes], endpoint: str = "completions") -> RequestRecord:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, stream=_PieceStream(pieces)))
    async with httpx.AsyncClient(transport=transport) as client:
        return await stream_request(client, "http://test/v1/completions", {"stream": True}, endpoint=endpoint)  # type: ignore[arg-type]


def _sse_body(endpoint: str, n: int) -> bytes:
    events = []
    if endpoint == "chat":
        events.append({"choices": [{"delta": {"role": "assistant", "content": ""}}]})
        events += [{"choices": [{"delta": {"content": f"t\u2028{i}"}}]} for i in range(n)]
        events.append({"choices": [{"delta": {}, "finish_reason": "length"}]})
    else:
        events += [{"choices": [{"text": f"t\u2028{i}"}]} for i in range(n)]
        events.append({"choices": [{"text": "", "finish_reason": "length"}]})
    events.append({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": 3 + n}})
    out = b"".join(b"data: " + json.dumps(e, ensure_ascii=False).encode() + b"\n\n" for e in events)
    return out + b"data: [DONE]\n\n"


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_events_split_across_reads_at_every_byte_boundary(endpoint: str) -> None:
    body = _sse_body(endpoint, 3)
    for cut in range(1, len(body)):
        record = run(_mock_stream([body[:cut], body[cut:]], endpoint))
        assert record.error is None, (cut, record.error)
        assert (len(record.chunk_times_ns), record.output_tokens, record.prompt_tokens) == (3, 3, 3), cut


def test_chunked_decoder_handles_any_split() -> None:
    payloads = [b"data: one\n\n", b"x" * 300, b"\r\n", b"data: [DONE]\n\n"]
    wire = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in payloads) + b"0\r\n\r\n"
    rng = random.Random(0)
    for _ in range(300):
        cuts = sorted(rng.sample(range(1, len(wire)), rng.randint(1, 12)))
        decoder = _ChunkedDecoder()
        out = b""
        for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=False):
            out += decoder.feed(wire[a:b])
        assert out == b"".join(payloads)
        assert decoder.done
    with pytest.raises(Exception, match="chunk"):
        _ChunkedDecoder().feed(b"zz\r\n")


@pytest.mark.parametrize("workers", [1, 2])
def test_a_time_bound_ends_the_level_early_and_lets_requests_in_flight_finish(workers: int) -> None:
    workload = Workload(num_prompts=400, input_len=8, output_len=4)
    # Each request takes ~0.1 s at concurrency 4: 400 would take ~10 s; the bound stops new ones at 0.6 s.
    with FakeOpenAIServer(FakeServerConfig(ttft_s=0.1)) as server:
        result, records = run(run_level(server.base_url, "m", workload, max_concurrency=4, duration_s=0.6,
                                        workers=workers))
    assert 8 <= len(records) < 100 and result.failed == 0 and result.completed == len(records)
    assert len(server.requests) == len(records)  # every request sent finished and is measured
    assert 0.6 <= result.duration_s < 3.0
    prompts = set(prompts_of(workload))  # the same prompts as without a bound: a prefix of them, in order
    assert set(served_by_prompt(server)) <= prompts


def test_a_time_bound_stops_poisson_arrivals_too() -> None:
    workload = Workload(num_prompts=400, input_len=8, output_len=4)
    with FakeOpenAIServer(FakeServerConfig(ttft_s=0.01)) as server:
        result, records = run(run_level(server.base_url, "m", workload, request_rate=50.0, duration_s=0.5))
    assert 5 <= len(records) < 100 and result.completed == len(records) and result.duration_s < 3.0


# ---- the client watches itself ----------------------------------------------------------------------


def test_a_level_reports_its_own_client_load_and_is_not_limited_when_idle() -> None:
    workload = Workload(num_prompts=20, input_len=8, output_len=8)
    with FakeOpenAIServer(FakeServerConfig(ttft_s=0.02, itl_s=0.01)) as server:
        result, _ = run(run_level(server.base_url, "m", workload, max_concurrency=4))
    assert result.client_lag_ms.count >= 5  # one sample per 10 ms sleep over a level of ~0.5 s
    assert 0.0 <= result.client_cpu < 0.9 and not result.client_limited
    assert result.metrics()["client_limited"] == 0.0 and "client_lag_ms_p99" in result.metrics()


def test_a_load_generator_that_burns_its_core_marks_the_level_it_limited() -> None:
    """Another task on the client's loop holds it 250 ms at a time: the loop wakes late and runs at a full
    core (less where other processes take the core: it then wakes later still), so the level is marked
    client-limited and the objective refuses it, with the reason."""
    workload = Workload(num_prompts=20, input_len=8, output_len=8)

    async def level_beside_a_busy_loop(url: str) -> Any:
        done = asyncio.Event()

        async def spin() -> None:
            while not done.is_set():
                t = time.perf_counter()
                while time.perf_counter() - t < 0.25:  # hold the loop 250 ms at a time
                    pass
                await asyncio.sleep(0)

        spinner = asyncio.ensure_future(spin())
        try:
            return await run_level(url, "m", workload, max_concurrency=4)
        finally:
            done.set()
            await spinner

    with FakeOpenAIServer(FakeServerConfig(ttft_s=0.02, itl_s=0.01)) as server:
        result, _ = run(level_beside_a_busy_loop(server.base_url))
    assert result.client_lag_ms.p99 > CLIENT_LAG_MS and result.late_loop and result.client_limited
    note = result.client_note() or ""
    assert note.startswith("the load generator's event loop") and "limited the level" in note
    if result.client_cpu >= CLIENT_CPU_LIMIT:  # the core was the loop's own: the CPU is named first
        assert "of a core" in note
    assert client_limit_note(result.metrics()) == note


def test_two_workers_report_the_busiest_process() -> None:
    workload = Workload(num_prompts=20, input_len=8, output_len=8)
    with FakeOpenAIServer(FakeServerConfig(ttft_s=0.01, itl_s=0.005)) as server:
        result, _ = run_level_sync(server.base_url, "m", workload, max_concurrency=4, workers=2)
    assert 0.0 <= result.client_cpu < 0.9 and result.client_lag_ms.count >= 4
