"""The quality gate on the real llama-server and the quickstart-sized model: configs that change the
numbers answer measurably differently from the defaults, repeats of the defaults answer identically,
and in a real study a config that answers fast and wrong (an absurd RoPE base) fails the gate and loses.

The answers are asked exactly as a trial asks them (`quality.collect`), and compared by the gate's own
rule (`quality.compare`, `quality.judge`) with the experiment's default bar.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from autotuner import quality
from autotuner.compose import make_driver
from autotuner.config import QualityConfig, load_experiment
from autotuner.core.progress import Progress
from autotuner.engines._base import LaunchContext, get_engine
from autotuner.launchers._base import free_port
from autotuner.launchers.process import ProcessLauncher
from autotuner.models.tiny_gguf import write_tiny_llama_gguf
from autotuner.tracking import MlflowTracker

pytestmark = pytest.mark.engine
BAR = QualityConfig()
SETTINGS = quality.Settings(prompts=BAR.prompts, max_tokens=BAR.max_tokens, endpoint="completions", concurrency=1)


def answers(binary: str, model: Path, params: dict[str, Any], work: Path) -> quality.Answers:
    engine, launcher = get_engine("llamacpp"), ProcessLauncher(work / "procs")
    spec = engine.build(params, LaunchContext(model_path=model, served_model_name="m", port=free_port(), binary=binary))
    handle = launcher.start(spec, work / f"server-{spec.port}.log", {"autotuner.test": "quality"})
    try:
        launcher.wait_ready(handle, 60)
        return asyncio.run(quality.collect(handle.base_url, "m", SETTINGS, 120))
    finally:
        launcher.stop(handle)


def test_number_changing_configs_diverge_and_the_defaults_repeat_exactly(llama_server, small_model, tmp_path):
    reference = answers(llama_server, small_model, {}, tmp_path)
    again = quality.compare(reference, answers(llama_server, small_model, {}, tmp_path))
    assert again.token_agreement == 1.0 and again.logprob_delta == 0.0
    assert quality.judge(again, BAR) is None
    q4_cache = quality.compare(reference, answers(llama_server, small_model, {"cache_type_k": "q4_0"}, tmp_path))
    assert q4_cache.logprob_delta is not None and q4_cache.logprob_delta > 0  # measurably different numbers
    q8_weights = write_tiny_llama_gguf(tmp_path / "q8.gguf", size="small", seed=0, quant="q8_0")
    quantized = quality.compare(reference, answers(llama_server, q8_weights, {}, tmp_path))
    assert quantized.token_agreement < 1.0 and quantized.logprob_delta > q4_cache.logprob_delta / 2
    assert quality.judge(quantized, BAR) is not None


def test_a_config_that_answers_fast_and_wrong_loses(llama_server, small_model, tmp_path):
    (tmp_path / "space.yaml").write_text("engine: llamacpp\nparams:\n"
                                         "  rope_freq_base: {type: categorical, choices: [0.001]}\n")
    (tmp_path / "exp.yaml").write_text(f"""\
name: wrong
engine: llamacpp
model: {{path: {small_model}, name: tiny}}
search_space: space.yaml
workload: {{num_prompts: 8, input_len: 16, output_len: 8, warmup_requests: 0}}
load: {{max_concurrency: [4]}}
study: {{storage: "sqlite:///{tmp_path}/study.db"}}
confirm: {{top_k: 0}}
startup_timeout_s: 60
""")
    driver = make_driver(load_experiment(tmp_path / "exp.yaml"), engine=get_engine("llamacpp"),
                         launcher=ProcessLauncher(tmp_path / "procs"), tracker=MlflowTracker(root=tmp_path / "mlruns"),
                         results_dir=tmp_path / "results", binary=llama_server,
                         progress=lambda total: Progress(total, "output_tok_per_s"))
    baseline, wrong = driver.run(2).get_trials()
    assert baseline.state.name == "COMPLETE", baseline.user_attrs.get("failure_reason")
    assert wrong.user_attrs["failure_class"] == "quality", wrong.user_attrs.get("failure_reason")
    assert wrong.user_attrs["quality"]["quality_token_agreement"] < BAR.min_token_agreement
    assert wrong.user_attrs["levels"] == []  # no load level was spent on it
    best = json.loads((tmp_path / "results" / "wrong" / "best.json").read_text())
    assert best["best"]["number"] == baseline.number
    report = (tmp_path / "results" / "wrong" / "report.md").read_text()
    assert "## Failed the quality gate" in report and "--rope-freq-base 0.001" in report
