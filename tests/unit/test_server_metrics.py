"""The /metrics parser and the per-level summary, on real exposition text of each engine."""

from __future__ import annotations

import asyncio
import http.server
import threading
import time

import pytest

from autotuner.bench.server_metrics import (
    MetricsConnection,
    Sample,
    ServerMetricsSampler,
    canonical,
    parse_prometheus,
    read_canonical,
    server_summary,
)
from autotuner.engines._base import get_engine

VLLM_SERIES = get_engine("vllm").server_metrics

LLAMACPP = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 6
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 0
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 1
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 4
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 2
# TYPE llamacpp:n_busy_slots_per_decode gauge
llamacpp:n_busy_slots_per_decode 2
"""

VLLM = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 7.0
vllm:num_requests_running{engine="1",model_name="m"} 5.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.93
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 2.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 1234.0
# TYPE vllm:generation_tokens_created gauge
vllm:generation_tokens_created{engine="0",model_name="m"} 1.7e9
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.001",model_name="m"} 0.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 12.5
vllm:time_to_first_token_seconds_count{model_name="m"} 40.0
"""


def test_parse_adds_label_sets_and_skips_histograms():
    raw = parse_prometheus(VLLM)
    assert raw["vllm:num_requests_running"] == 12.0  # two engines added up
    assert raw["vllm:kv_cache_usage_perc"] == pytest.approx(0.93)
    assert not any("time_to_first_token" in k for k in raw)


def test_parse_ignores_garbage_and_nan():
    assert parse_prometheus("not metrics at all\n{}\nx NaN\n# TYPE y gauge\ny 2\n") == {"y": 2.0}


@pytest.mark.parametrize("engine, text, expected", [
    ("llamacpp", LLAMACPP, {"requests_running": 4, "requests_waiting": 2, "busy_slots_per_decode": 2,
                            "generation_tokens_total": 0, "prompt_tokens_total": 6, "decode_calls_total": 1}),
    ("vllm", VLLM, {"requests_running": 12, "requests_waiting": 3, "kv_cache_usage": 0.93,
                    "preemptions_total": 2, "generation_tokens_total": 1234}),
    ("sglang", "sglang:token_usage 0.5\nsglang:num_running_reqs 3\nsglang:num_queue_reqs 0\n",
     {"kv_cache_usage": 0.5, "requests_running": 3, "requests_waiting": 0}),
    ("unknown-engine", LLAMACPP, {}),
])
def test_canonical_names_per_engine(engine, text, expected):
    series = get_engine(engine).server_metrics if engine != "unknown-engine" else {}
    assert canonical(series, parse_prometheus(text)) == pytest.approx(expected)
    assert read_canonical(series, text.encode()) == pytest.approx(expected)  # the sampler's fast path agrees


def test_summarize_gauges_and_counters():
    samples = [Sample(0.0, {"requests_running": 2, "requests_waiting": 0, "kv_cache_usage": 0.5,
                            "generation_tokens_total": 100, "preemptions_total": 1}),
               Sample(0.5, {"requests_running": 4, "requests_waiting": 2, "kv_cache_usage": 0.9,
                            "generation_tokens_total": 300, "preemptions_total": 3})]
    out = server_summary(samples, VLLM_SERIES)
    assert out["server_samples"] == 2
    assert out["server_requests_running_mean"] == 3 and out["server_requests_running_max"] == 4
    assert out["server_kv_cache_usage_max"] == pytest.approx(0.9)
    assert out["server_generation_tokens"] == 200 and out["server_preemptions"] == 2
    assert server_summary([], VLLM_SERIES) == {"server_samples": 0.0}  # a level too short to sample says so


class MetricsServer:
    """A real HTTP server on loopback, in its own thread: /metrics shows a counter that grows by 10 on
    every poll and a gauge equal to the poll's number."""

    def __init__(self) -> None:
        polls = self.polls = [0]

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                polls[0] += 1
                body = (f"vllm:num_requests_running {polls[0]}\n"
                        f"vllm:generation_tokens_total {10 * polls[0]}\n").encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def wait_for(sampler: ServerMetricsSampler, n: int) -> None:
    """A loaded machine polls late: wait for samples, not for time."""
    for _ in range(400):
        if len([s for s in sampler.samples if not s.boundary]) >= n:
            return
        time.sleep(0.025)


def start_level(sampler: ServerMetricsSampler) -> None:
    """Mark a new level and wait for two samples of it under load."""
    sampler.mark()
    wait_for(sampler, len([s for s in sampler.samples if not s.boundary]) + 2)


def test_sampler_polls_on_its_own_thread_and_splits_samples_by_level():
    server = MetricsServer()
    sampler = ServerMetricsSampler(server.url, VLLM_SERIES, interval_s=0.05)
    try:
        sampler.start()
        start_level(sampler)
        first = sampler.level_samples(0)  # closes level 0 with a boundary sample
        start_level(sampler)
        second = sampler.level_samples(1)
        start_level(sampler)
        forgotten = sampler.samples[sampler.marks[2]:]
        sampler.forget_level()  # level 2 is measured again, from a new mark
        start_level(sampler)
        again = sampler.level_samples(2)
        asyncio.run(sampler.stop())  # awaitable from the measurement's event loop
    finally:
        server.close()
    assert sampler.failures == 0 and len(first) >= 4 and len(second) >= 4
    assert any(s.boundary for s in first) and any(s.boundary for s in second)  # each level's start and end
    # Every poll is one sample, in order, each in exactly one level.
    # (The thread's very first poll may land before the first mark, so level 0 starts at poll 1 or 2.)
    polls = [s.values["requests_running"] for s in first + second]
    assert polls[0] in (1, 2) and polls == list(range(int(polls[0]), int(polls[0]) + len(polls)))
    assert all(a.t_s < b.t_s for a, b in zip(first, first[1:], strict=False))
    out = server_summary(second, VLLM_SERIES)
    # The counter's increase runs from the level's first (boundary) sample to its last.
    assert out["server_generation_tokens"] == 10 * (len(second) - 1)
    # Gauges come from the samples under load only.
    inside = [s.values["requests_running"] for s in second if not s.boundary]
    assert out["server_samples"] == len(inside) and out["server_requests_running_max"] == max(inside)
    assert sampler.poll_cpu_s > 0
    # The forgotten samples are gone; the level measured again has only its own.
    assert len(sampler.marks) == 3 and len(forgotten) >= 2
    assert not set(map(id, forgotten)) & set(map(id, sampler.samples))
    assert min(s.values["requests_running"] for s in again) > max(s.values["requests_running"] for s in forgotten)
    sampler.close()  # safe twice


def test_a_level_shorter_than_the_interval_still_counts_its_counters():
    """A level of ~10 ms, far below the 10 s interval: the boundary samples alone give its counters."""
    server = MetricsServer()
    sampler = ServerMetricsSampler(server.url, VLLM_SERIES, interval_s=10.0)
    try:
        sampler.start()
        sampler.mark()
        time.sleep(0.01)
        samples = sampler.level_samples(0)
        sampler.close()
    finally:
        server.close()
    assert len(samples) >= 2
    out = server_summary(samples, VLLM_SERIES)
    assert out["server_generation_tokens"] == samples[-1].values["generation_tokens_total"] - samples[0].values[
        "generation_tokens_total"] > 0


def test_sampler_survives_a_server_without_metrics():
    sampler = ServerMetricsSampler("http://127.0.0.1:9", VLLM_SERIES, interval_s=0.05)  # nothing listens on 9
    connection = MetricsConnection("http://127.0.0.1:9", 0.5)
    assert sampler.sample_once(connection) is None
    assert sampler.samples == [] and sampler.failures == 1
    sampler.start()
    sampler.mark()  # returns although no sample comes
    assert sampler.level_samples(0) == []
    sampler.close()
    assert sampler.failures >= 3


def test_prefix_cache_hit_rate_from_vllms_counters():
    samples = [Sample(0.0, {"prefix_cache_queries_total": 1000, "prefix_cache_hits_total": 100}, True),
               Sample(0.5, {"prefix_cache_queries_total": 3000, "prefix_cache_hits_total": 1100}, True)]
    out = server_summary(samples, VLLM_SERIES)
    assert out["server_prefix_cache_queries"] == 2000 and out["server_prefix_cache_hits"] == 1000
    assert out["server_prefix_cache_hit_rate"] == 0.5
    assert out["server_samples"] == 0  # boundary samples only: no gauge says anything
