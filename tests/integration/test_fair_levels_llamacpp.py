"""No configuration gets a prefix-cache head start: llama-server's own count of prompt tokens it had to
process (`llamacpp:prompt_tokens_total` excludes tokens reused from a slot's cache) stays at the
workload's intended level at every load level of a real study.

A level that re-sent earlier prompts would find them in llama.cpp's slots and process almost none of
them; a workload with a shared prefix reuses that prefix, at every level alike.
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

pytestmark = pytest.mark.engine
INPUT_LEN = 48


def processed_share(tmp_path: Path, model: Path, binary: str, shared_prefix_len: int) -> list[float]:
    """Per load level: prompt tokens llama-server processed / prompt tokens sent, in a 1-trial study."""
    (tmp_path / "space.yaml").write_text("engine: llamacpp\nparams:\n  parallel: {type: int, low: 4, high: 4}\n")
    (tmp_path / "exp.yaml").write_text(f"""\
name: fair
engine: llamacpp
model: {{path: {model}, name: tiny}}
search_space: space.yaml
workload: {{num_prompts: 16, input_len: {INPUT_LEN}, output_len: 4, warmup_requests: 4,
            shared_prefix_len: {shared_prefix_len}}}
load: {{max_concurrency: [4, 4, 4], stop_at_saturation: false}}
objective: {{metric: goodput_req_per_s, slo: {{ttft_ms_p99: 60000}}}}
study: {{storage: "sqlite:///{tmp_path}/study.db"}}
engine_args: ["-np", "4"]
startup_timeout_s: 30
""")
    tuner = make_driver(load_experiment(tmp_path / "exp.yaml"), engine=get_engine("llamacpp"),
                  launcher=ProcessLauncher(tmp_path / "procs"), tracker=MlflowTracker(root=tmp_path / "mlruns"),
                  results_dir=tmp_path / "results", binary=binary,
                  progress=lambda total: Progress(total, "goodput_req_per_s"))
    (trial,) = tuner.run(1).get_trials()
    assert trial.user_attrs["failure_class"] is None, trial.user_attrs["failure_reason"]
    levels = trial.user_attrs["levels"]
    assert len(levels) == 3
    for level in levels:
        assert level["usage_missing_rate"] == 0  # llama-server reports usage
        # Every request met the generous SLO: goodput is the request rate, and the trial's value.
        assert level["goodput_req_per_s"] == pytest.approx(level["request_per_s"])
    assert trial.value == pytest.approx(max(level["goodput_req_per_s"] for level in levels))
    shares = [level["server_prompt_tokens"] / level["input_tokens"] for level in levels]
    print(f"shared_prefix_len {shared_prefix_len}: processed share per level {[round(s, 3) for s in shares]}")
    return shares


def test_every_level_sends_prompts_the_server_has_not_cached(tmp_path, tiny_model, llama_server):
    shares = processed_share(tmp_path, tiny_model, llama_server, 0)
    # All but the BOS token of each prompt is processed, at every level (re-sent prompts: ~0 at levels 2, 3).
    assert all(share > 0.9 for share in shares), shares


def test_a_shared_prefix_is_reused_alike_at_every_level(tmp_path, tiny_model, llama_server):
    shares = processed_share(tmp_path, tiny_model, llama_server, 32)
    # 32 of 48 words are the prefix every slot holds after the warm-up: about a third is processed.
    assert all(0.2 < share < 0.5 for share in shares), shares
    assert max(shares) - min(shares) < 0.1, shares
