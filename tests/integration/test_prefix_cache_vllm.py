"""No configuration gets a prefix-cache head start, measured by vLLM itself: with prefix caching on, the
engine's own counters (`vllm:prefix_cache_hits_total` / `vllm:prefix_cache_queries_total`, prompt tokens
found in / looked up in the cache) stay at the workload's intended level at every load level: about
none without a shared prefix, about the prefix's share of the prompt with one.

Two 1-trial studies against the real vLLM CPU build (~20 s to start each). Needs scripts/setup-vllm.sh:
skipped locally without it, a failure under CI.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from autotuner.compose import make_driver
from autotuner.config import load_experiment
from autotuner.core.progress import Progress
from autotuner.engines._base import get_engine
from autotuner.launchers.process import ProcessLauncher
from autotuner.tracking import MlflowTracker
from tests.support import processes_with_env

pytestmark = [pytest.mark.engine, pytest.mark.slow]
INPUT_LEN = 160
PREFIX_LEN = 128


def hit_rates(tmp_path: Path, model: Path, python: Path, shared_prefix_len: int) -> list[float]:
    """Per load level: vLLM's prefix-cache hit rate in a 1-trial study (the baseline, caching on)."""
    tmp_path.mkdir()
    (tmp_path / "space.yaml").write_text("engine: vllm\nparams:\n  max_num_seqs: {type: int, low: 8, high: 8}\n")
    (tmp_path / "exp.yaml").write_text(f"""\
name: prefix
engine: vllm
model: {{path: {model}, name: m}}
search_space: space.yaml
workload: {{num_prompts: 16, input_len: {INPUT_LEN}, output_len: 8, warmup_requests: 4,
            shared_prefix_len: {shared_prefix_len}}}
load: {{max_concurrency: [2, 4, 8], stop_at_saturation: false}}
study: {{storage: "sqlite:///{tmp_path}/study.db"}}
startup_timeout_s: 240
# float32 and no quality gate: neither matters to the cache, and on a CPU without bfloat16 instructions
# (emulated) the two launches took 7 min instead of ~2.
engine_args: ["--enforce-eager", "--max-model-len", "512", "--enable-prefix-caching", "--block-size", "32",
              "--dtype", "float32"]
quality: off
env: {{VLLM_CPU_KVCACHE_SPACE: "1", HF_HUB_OFFLINE: "1", TRANSFORMERS_OFFLINE: "1"}}
""")
    tuner = make_driver(load_experiment(tmp_path / "exp.yaml"), engine=get_engine("vllm"),
                  launcher=ProcessLauncher(tmp_path / "procs"), tracker=MlflowTracker(root=tmp_path / "mlruns"),
                  results_dir=tmp_path / "results", binary=str(python),
                  progress=lambda total: Progress(total, "output_tok_per_s"))
    (trial,) = tuner.run(1).get_trials()
    assert trial.user_attrs["failure_class"] is None, trial.user_attrs["failure_reason"]
    levels = trial.user_attrs["levels"]
    assert len(levels) == 3 and all(level["completed"] == 16 for level in levels)
    # Prompts exact in vLLM's tokens: the words found through its /tokenize count one token each.
    assert all(level["prompt_tokens_exact"] == 1.0 for level in levels), levels
    assert all(abs(level["prompt_tokens_measured_ratio"] - 1) < 0.01 for level in levels), levels
    # Every prompt token of the level was looked up (usage counts what vLLM reports as prompt tokens).
    assert all(level["server_prefix_cache_queries"] == level["input_tokens"] for level in levels), levels
    rates = [level["server_prefix_cache_hit_rate"] for level in levels]
    print(f"shared_prefix_len {shared_prefix_len}: prefix-cache hit rate per level {[round(r, 3) for r in rates]}, "
          f"prompt tokens per level {[level['input_tokens'] for level in levels]}")
    return rates


def test_prefix_cache_hits_stay_at_the_workloads_level(tmp_path, hf_model, vllm_python, vllm_caches):
    # Without a shared prefix nothing is found: a level that re-sent earlier prompts would hit ~100%.
    rates = hit_rates(tmp_path / "none", hf_model, vllm_python, 0)
    assert all(rate < 0.05 for rate in rates), rates
    # With 128 of 160 tokens shared, every level finds the prefix's full blocks, and about as many.
    rates = hit_rates(tmp_path / "prefix", hf_model, vllm_python, PREFIX_LEN)
    assert all(0.55 < rate <= PREFIX_LEN / INPUT_LEN + 0.05 for rate in rates), rates
    assert max(rates) - min(rates) < 0.1, rates
    assert processes_with_env(str(vllm_caches)) == []
