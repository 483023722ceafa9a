"""The /metrics parser and the per-level summary, on real exposition text of each engine."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from autotuner.bench.server_metrics import Sample, ServerMetricsSampler, canonical, parse_prometheus, summarize

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
    ("sglang", "sglang:token_usage 0.5\nsglang:num_running_reqs 3\nsglang:num_queue_req 0\n",
     {"kv_cache_usage": 0.5, "requests_running": 3, "requests_waiting": 0}),
    ("unknown-engine", LLAMACPP, {}),
])
def test_canonical_names_per_engine(engine, text, expected):
    assert canonical(engine, parse_prometheus(text)) == pytest.approx(expected)


def test_summarize_gauges_and_counters():
    samples = [Sample(0.0, {"requests_running": 2, "requests_waiting": 0, "kv_cache_usage": 0.5,
                            "generation_tokens_total": 100, "preemptions_total": 1}),
               Sample(0.5, {"requests_running": 4, "requests_waiting": 2, "kv_cache_usage": 0.9,
                            "generation_tokens_total": 300, "preemptions_total": 3})]
    out = summarize(samples, "vllm")
    assert out["server_samples"] == 2
    assert out["server_requests_running_mean"] == 3 and out["server_requests_running_max"] == 4
    assert out["server_kv_cache_usage_max"] == pytest.approx(0.9)
    assert out["server_generation_tokens"] == 200 and out["server_preemptions"] == 2
    assert summarize([], "vllm") == {"server_samples": 0.0}  # a level too short to sample says so


def test_sampler_polls_a_real_socket_and_splits_samples_by_level():
    """A real HTTP server on loopback whose /metrics changes between polls."""
    polls = {"n": 0}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        polls["n"] += 1
        body = f"vllm:num_requests_running {polls['n']}\nvllm:generation_tokens_total {10 * polls['n']}\n".encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        await writer.drain()
        writer.close()

    async def go() -> ServerMetricsSampler:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        sampler = ServerMetricsSampler(f"http://127.0.0.1:{port}", "vllm", interval_s=0.05)
        async def until(n: int) -> None:  # a loaded machine polls late: wait for samples, not for time
            for _ in range(200):
                if len(sampler.samples) >= n:
                    return
                await asyncio.sleep(0.025)

        sampler.start()
        sampler.mark()
        await until(2)
        sampler.mark()
        await until(len(sampler.samples) + 2)
        await sampler.stop()
        server.close()
        await server.wait_closed()
        return sampler

    sampler = asyncio.run(go())
    first, second = sampler.level_samples(0), sampler.level_samples(1)
    assert len(first) >= 2 and len(second) >= 2 and sampler.failures == 0
    assert [s.values["requests_running"] for s in first + second] == list(range(1, len(first) + len(second) + 1))
    assert all(a.t_s < b.t_s for a, b in zip(first, first[1:]))
    assert summarize(second, "vllm")["server_generation_tokens"] == 10 * (len(second) - 1)
    assert sampler.poll_cpu_s > 0


def test_sampler_survives_a_server_without_metrics():
    async def go():
        sampler = ServerMetricsSampler("http://127.0.0.1:9", "vllm", interval_s=0.05)  # nothing listens on 9
        async with httpx.AsyncClient(timeout=0.5) as client:
            assert await sampler.sample_once(client) is None
        return sampler

    sampler = asyncio.run(go())
    assert sampler.samples == [] and sampler.failures == 1
