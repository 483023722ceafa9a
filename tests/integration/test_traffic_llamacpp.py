"""Traffic as users send it, on a real llama-server through the study users run: a Mooncake trace
replayed on its own timestamps, a ShareGPT dataset, and synthetic lengths from a distribution, each
with prompts exact in the served model's tokens (what the server's own `usage` counts).

Needs a built llama-server (scripts/build-llama-server.sh): skipped locally without it, a failure in CI.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotuner.compose import make_driver
from autotuner.config import load_experiment
from autotuner.core.progress import Progress
from autotuner.engines._base import get_engine
from autotuner.launchers.process import ProcessLauncher
from autotuner.tracking import MlflowTracker
from autotuner.workloads.samples import write as write_samples
from autotuner.workloads.trace import read_trace

pytestmark = [pytest.mark.engine, pytest.mark.slow]

SPACE = "engine: llamacpp\nparams:\n  parallel: {type: categorical, choices: [4]}\n  ctx_size: {type: categorical, choices: [1024, 8192]}\n"


def study(tmp_path: Path, binary: str, model: Path, workload: str, load: str, enqueue: str = "") -> list:
    write_samples(tmp_path / "workloads")
    (tmp_path / "space.yaml").write_text(SPACE)
    (tmp_path / "exp.yaml").write_text(f"""\
name: traffic
engine: llamacpp
model: {{path: {model}, name: m}}
search_space: space.yaml
workload: {workload}
load: {load}
objective: {{metric: output_tok_per_s, slo: {{ttft_ms_p99: 30000}}}}
study: {{storage: "sqlite:///{tmp_path}/study.db", seed: 0}}
quality: off
advisors: []
confirm: {{top_k: 0}}
engine_args: ["-t", "1"]
{enqueue}
""")
    driver = make_driver(load_experiment(tmp_path / "exp.yaml"), engine=get_engine("llamacpp"),
                         launcher=ProcessLauncher(tmp_path / "procs"), tracker=MlflowTracker(root=tmp_path / "mlruns"),
                         results_dir=tmp_path / "results", binary=binary,
                         progress=lambda total: Progress(total, "output_tok_per_s"))
    return driver.run(2).get_trials()


def test_a_trace_replays_on_its_own_schedule_with_exact_prompts(tmp_path, llama_server, tiny_model):
    trials = study(tmp_path, llama_server, tiny_model,
                   "{trace: {path: workloads/trace.jsonl, block_size: 64, duration_s: 6}, warmup_requests: 2}",
                   "{speedup: [1, 2], stop_at_saturation: false}",
                   # 4 slots of 1024 / 4 = 256 tokens cannot hold the trace's prompts: refused before launch
                   "enqueue: [{parallel: 4, ctx_size: 1024}]")
    baseline, small = trials
    assert small.user_attrs["failure_class"] == "infeasible", small.user_attrs
    assert "ctx_size 1024 split over 4 slots is 256 tokens a slot, below the workload's longest request" in \
        small.user_attrs["failure_reason"]
    assert baseline.user_attrs["failure_class"] is None, baseline.user_attrs["failure_reason"]
    levels = baseline.user_attrs["levels"]
    assert [level["speedup"] for level in levels] == [1, 2]
    window = read_trace(tmp_path / "workloads" / "trace.jsonl", block_size=64, duration_s=6).requests
    span_s = window[-1].timestamp_s - window[0].timestamp_s
    for level in levels:
        assert level["failed"] == 0, level
        assert level["completed"] == len(window)
        # the words found are one token each: the server counted the very prompt tokens asked for
        assert level["prompt_tokens_exact"] == 1.0
        assert abs(level["prompt_tokens_measured_ratio"] - 1) < 0.01, level
        # the window's own rate, twice that at 2x: the replay offered what the trace holds
        assert level["offered_rate"] == pytest.approx((len(window) - 1) / span_s * level["speedup"], rel=0.15)
        assert level["queue_ms_p50"] < 50, level  # sent when due (no concurrency limit on a replay)
        assert level["duration_s"] >= span_s / level["speedup"]


def test_a_sharegpt_dataset_takes_its_answers_lengths_in_the_models_tokens(tmp_path, llama_server, tiny_model):
    (baseline, _) = study(tmp_path, llama_server, tiny_model,
                          "{dataset: {path: workloads/sharegpt.json, format: sharegpt, max_output_len: 256}, "
                          "num_prompts: 12, warmup_requests: 2}",
                          "{max_concurrency: [4]}")
    assert baseline.user_attrs["failure_class"] is None, baseline.user_attrs["failure_reason"]
    (level,) = baseline.user_attrs["levels"]
    assert level["completed"] == 12 and level["prompt_tokens_exact"] == 1.0
    assert abs(level["prompt_tokens_measured_ratio"] - 1) < 0.01, level
    # outputs as long as the reference answers (capped at 256), not one fixed length
    records = [json.loads(line) for line in (tmp_path / "results" / "traffic" / "trial-0000" / "requests.jsonl").open()]
    outputs = {r["output_tokens"] for r in records if r.get("level") == 0}
    assert len(outputs) > 3 and max(outputs) <= 256, outputs


def test_synthetic_lengths_from_a_distribution_are_exact(tmp_path, llama_server, tiny_model):
    (baseline, _) = study(tmp_path, llama_server, tiny_model,
                          "{num_prompts: 16, input_len: {dist: lognormal, mean: 120, stddev: 0.5, max: 400}, "
                          "output_len: {dist: uniform, min: 4, max: 24}, shared_prefix_len: 40, prefix_groups: 2, "
                          "warmup_requests: 2}",
                          "{request_rate: [8], arrival: poisson, burstiness: 0.5}")
    assert baseline.user_attrs["failure_class"] is None, baseline.user_attrs["failure_reason"]
    (level,) = baseline.user_attrs["levels"]
    assert level["completed"] == 16 and abs(level["prompt_tokens_measured_ratio"] - 1) < 0.01, level
    assert level["offered_rate"] == pytest.approx(8)  # rescaled to the rate it names


def test_sessions_send_each_turn_with_the_answers_the_server_gave(tmp_path, llama_server, tiny_model):
    (baseline, _) = study(tmp_path, llama_server, tiny_model,
                          "{endpoint: chat, num_prompts: 4, input_len: 30, output_len: 12, warmup_requests: 1, "
                          "sessions: {turns: 3, think_time_s: 0.1}}",
                          "{max_concurrency: [2]}")
    assert baseline.user_attrs["failure_class"] is None, baseline.user_attrs["failure_reason"]
    (level,) = baseline.user_attrs["levels"]
    assert level["completed"] == 12 and level["sessions_completed"] == 4  # 4 sessions of 3 turns
    # the server counted each turn's history: the earlier messages and the 12-token answers it gave
    first, second, third = (level[f"prompt_tokens_mean_turn{k}"] for k in (1, 2, 3))
    assert second - first >= 30 + 12 and third - second >= 30 + 12, level
    assert level["session_ms_p50"] >= 2 * 100  # two think times at least
    records = [json.loads(line) for line in (tmp_path / "results" / "traffic" / "trial-0000" / "requests.jsonl").open()]
    assert sorted({(r["session"], r["turn"]) for r in records if r.get("level") == 0}) == \
        [(s, t) for s in range(4) for t in (1, 2, 3)]
