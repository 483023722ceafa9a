"""The quality gate on the real vLLM CPU build: the baseline (bfloat16, as the model was written) answers
the prompt set for the reference; a float32 config, which changes the numbers, answers measurably
differently in the same study, with its agreement and log-prob delta recorded.

One 2-trial study (~20 s per start), with a short prompt set (bfloat16 on a CPU without it is slow). Needs scripts/setup-vllm.sh: skipped locally without it, a failure
under CI.
"""

from __future__ import annotations

import pytest

from autotuner.compose import make_driver
from autotuner.config import load_experiment
from autotuner.core.progress import Progress
from autotuner.engines._base import get_engine
from autotuner.launchers.process import ProcessLauncher
from autotuner.tracking import MlflowTracker

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def test_float32_answers_differently_from_bfloat16(tmp_path, hf_model, vllm_python, vllm_caches):
    (tmp_path / "space.yaml").write_text("engine: vllm\nparams:\n  dtype: {type: categorical, choices: [float32]}\n")
    (tmp_path / "exp.yaml").write_text(f"""\
name: dtype
engine: vllm
model: {{path: {hf_model}, name: m}}
search_space: space.yaml
workload: {{num_prompts: 4, input_len: 16, output_len: 4, warmup_requests: 0}}
load: {{max_concurrency: [2]}}
study: {{storage: "sqlite:///{tmp_path}/study.db"}}
confirm: {{top_k: 0}}
quality: {{prompts: 6, max_tokens: 12}}
advisors: []
startup_timeout_s: 240
engine_args: ["--enforce-eager", "--max-model-len", "512"]
env: {{VLLM_CPU_KVCACHE_SPACE: "1", HF_HUB_OFFLINE: "1", TRANSFORMERS_OFFLINE: "1"}}
""")
    driver = make_driver(load_experiment(tmp_path / "exp.yaml"), engine=get_engine("vllm"),
                         launcher=ProcessLauncher(tmp_path / "procs"), tracker=MlflowTracker(root=tmp_path / "mlruns"),
                         results_dir=tmp_path / "results", binary=str(vllm_python),
                         progress=lambda total: Progress(total, "output_tok_per_s"))
    baseline, fp32 = driver.run(2).get_trials()
    assert baseline.state.name == "COMPLETE", baseline.user_attrs.get("failure_reason")
    assert baseline.user_attrs["quality"]["quality_tok_per_s"] > 0  # the reference was answered
    q = fp32.user_attrs["quality"]
    assert fp32.params == {"dtype": "float32"} and q, fp32.user_attrs.get("failure_reason")
    # vLLM returned per-token log-probabilities, and float32 moved them (and usually the tokens too).
    assert q.get("quality_logprob_delta", 0) > 0 or q["quality_token_agreement"] < 1, q
    print(f"float32 against bfloat16: {q}; {fp32.state.name} {fp32.user_attrs.get('failure_reason') or ''}")
