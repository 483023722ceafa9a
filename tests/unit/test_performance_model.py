"""The performance-model advisor: our vLLM params as AIConfigurator's inputs, its ranking, the configs it
predicts out of memory, and the one line it steps aside with. A fake estimator stands in for AIConfigurator;
the real one is asked by the last test, skipped where it is not installed."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from autotuner.advisors import StudySoFar
from autotuner.advisors.aic_inputs import database_versions, gpu_system, match_model, vllm_inputs
from autotuner.advisors.aic_runner import AicRunner, CannotEstimate, Coverage, Estimate
from autotuner.advisors.performance_model import PerformanceModel, Target, grid, performance_model
from autotuner.config import SearchSpaceConfig, load_experiment
from autotuner.config.space import SearchSpace
from autotuner.engines._base import get_engine
from autotuner.util import paths

REPO = Path(__file__).resolve().parents[2]
SPACE = SearchSpace(SearchSpaceConfig.model_validate({"engine": "vllm", "params": {
    "max_num_seqs": {"type": "categorical", "choices": [64, 256, 1024]},
    "kv_cache_dtype": {"type": "categorical", "choices": ["auto", "fp8"]},
    "block_size": {"type": "categorical", "choices": [16, 32]},  # not modeled: left to the sampler
}}))
TARGET = Target(model_names=("Llama-3.1-8B-Instruct", "llama-3.1-8b"), model_folder=None, system="h100_sxm",
                engine="vllm", engine_version="0.32.0", isl=1024, osl=256, clients=256, metric="output_tok_per_s")
VLLM = get_engine("vllm")


class FakeAic:
    """Throughput grows with the batch; fp8 at batch 1024 does not fit (a made-up rule to test the dropping)."""

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []

    def describe(self) -> Coverage:
        return Coverage("0.12.0", {"h100_sxm": {"vllm": ["0.1.dev1", "0.24.0", "0.27.0"]}, "l40s": {"sglang": ["0.5.9"]}},
                        ["meta-llama/Meta-Llama-3.1-8B", "zai-org/GLM-5"])

    def covered(self, model: str, system: str, backend: str, backend_versions: Sequence[str]) -> str | None:
        return "0.24.0" if "Llama" in model else None

    def estimate(self, model: str, system: str, backend: str, backend_version: str,
                 points: Sequence[dict[str, Any]]) -> list[Estimate]:
        self.asked += points
        return [Estimate(oom="OOM: does not fit") if p["batch_size"] == 256 and p["kvcache_quant_mode"] == "fp8"
                else Estimate(tokens_per_s=10.0 * p["batch_size"] + (1 if p["kvcache_quant_mode"] else 0))
                for p in points]


def advisor(target: Target = TARGET, estimator: Any = None) -> PerformanceModel:
    return PerformanceModel(target, effective=lambda p: VLLM.effective(p, ["--max-model-len", "8192"]),
                            infeasible=lambda p: [], estimator=estimator or FakeAic())


def study() -> StudySoFar:
    return StudySoFar(trials=[], space=SPACE, load_key="max_concurrency", max_load=256, cpus=8, gpus=1,
                      metric="output_tok_per_s", direction="maximize")


def test_vllm_params_become_its_inputs() -> None:
    got = vllm_inputs(VLLM.effective({"parallel_layout": "TP2xDP2", "max_num_seqs": 512, "kv_cache_dtype": "fp8",
                                      "gpu_memory_utilization": 0.85, "enable_chunked_prefill": False,
                                      "max_num_batched_tokens": 5000}, ["--max-model-len", "8192"]),
                      isl=1024, osl=256, clients=128)
    assert (got.tp_size, got.pp_size, got.replicas) == (2, 1, 2)
    assert got.batch_size == 128  # 128 clients never fill 512 sequences
    assert got.ctx_tokens == 4096  # chunked prefill off: whole prompts of 1024 only
    assert (got.kvcache_quant_mode, got.free_gpu_memory_fraction, got.max_seq_len) == ("fp8", 0.85, 8192)
    defaults = vllm_inputs({}, isl=1024, osl=256, clients=None)
    assert (defaults.batch_size, defaults.ctx_tokens, defaults.kvcache_quant_mode) == (1024, 8192, None)
    assert "replicas" not in defaults.keywords()


def test_names_map_to_its_systems_models_and_databases() -> None:
    assert gpu_system("NVIDIA H100 80GB HBM3") == "h100_sxm"
    assert gpu_system("NVIDIA H100 PCIe") == "h100_pcie"
    assert gpu_system("NVIDIA RTX PRO 6000 Blackwell Server Edition") == "rtx_pro_6000_server"
    assert gpu_system("AMD Instinct MI300X") is None
    bundled = ["meta-llama/Meta-Llama-3.1-8B", "meta-llama/Meta-Llama-3.1-70B"]
    assert match_model(["Llama-3.1-8B-Instruct"], bundled) == "meta-llama/Meta-Llama-3.1-8B"
    assert match_model(["my-model"], bundled) is None
    assert database_versions(["0.1.dev5", "0.14.0", "0.24.0", "0.27.0"], "0.25.1") == ["0.24.0", "0.14.0", "0.27.0"]
    assert database_versions(["0.14.0", "0.24.0"], None) == ["0.24.0", "0.14.0"]


def test_grid_enumerates_only_what_it_models() -> None:
    configs = grid(SPACE, ["max_num_seqs", "kv_cache_dtype"])
    assert len(configs) == 6 and all(set(c) == {"max_num_seqs", "kv_cache_dtype"} for c in configs)


def test_it_proposes_the_predicted_best_and_drops_predicted_oom() -> None:
    fake = FakeAic()
    proposals = advisor(estimator=fake).propose(study())
    assert [p.params for p in proposals] == [
        {"max_num_seqs": 256, "kv_cache_dtype": "auto"},  # fp8 at 256 is predicted out of memory
        {"max_num_seqs": 64, "kv_cache_dtype": "fp8"}, {"max_num_seqs": 64, "kv_cache_dtype": "auto"}]
    assert proposals[0].reason == ("predicted 2,560 tok/s by AIConfigurator 0.12.0 (vllm 0.24.0 data, h100_sxm) "
                                   "(a prior, not a measurement)")
    assert len(fake.asked) == 4  # 1024 and 256 sequences are the same batch for 256 clients: asked once


def test_it_steps_aside_with_one_line() -> None:
    from dataclasses import replace

    cases = {
        replace(TARGET, model_names=("GLM-5",)): "does not cover zai-org/GLM-5 on h100_sxm with vllm",
        replace(TARGET, model_names=("my-model",)): "bundles no model named like my-model",
        replace(TARGET, system="rtx_pro_6000_server"): "no data for GPU system 'rtx_pro_6000_server'",
        replace(TARGET, system=None): "set hardware.gpu_system",
        replace(TARGET, engine="llamacpp"): "no mapping of llamacpp's params",
        replace(TARGET, metric="ttft_ms_p99"): "this study is scored by ttft_ms_p99",
    }
    for target, why in cases.items():
        with pytest.raises(CannotEstimate, match=why):
            advisor(target).propose(study())


def test_not_installed_says_how_to_install() -> None:
    runner = AicRunner()
    runner.python = None
    with pytest.raises(CannotEstimate, match=r"AIConfigurator is not installed \(pip install 'autotuner\[aic"):
        runner.describe()


def test_the_experiment_names_the_target(tmp_path: Path) -> None:
    exp = load_experiment(REPO / "experiments" / "vllm-h100-8b.yaml")
    pm = performance_model(exp, VLLM, "0.32.0", "NVIDIA H100 80GB HBM3", estimator=FakeAic())
    assert (pm.target.system, pm.target.clients, pm.target.isl) == ("h100_sxm", 256, 1024)
    assert pm.target.model_names == ("Llama-3.1-8B-Instruct", "llama-3.1-8b")
    assert pm.inputs({}).max_seq_len == 8192  # the experiment's engine_args reach the estimate


def test_dry_run_shows_the_prediction_beside_each_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from autotuner.report import dryrun

    text = (REPO / "experiments" / "vllm-h100-8b.yaml").read_text().replace(
        "../search_spaces/", f"{REPO}/search_spaces/").replace("gpus: 1", "gpus: 1\n  gpu_system: h100_sxm")
    (tmp_path / "exp.yaml").write_text(text + "advisors: [performance-model, engine]\n")
    exp = load_experiment(tmp_path / "exp.yaml")
    made = dryrun.performance_model
    monkeypatch.setattr(dryrun, "performance_model", lambda *a: made(*a, estimator=FakeAic()))
    lines: list[str] = []
    dryrun.dry_run(exp, VLLM, 3, lines.append)
    assert "# advisor performance-model: predictions by AIConfigurator 0.12.0 (vllm 0.24.0 data, h100_sxm), a " \
           "prior, not a measurement" in lines
    baseline = lines.index("# trial 0: baseline: engine defaults")
    assert lines[baseline + 1] == ("#   predicted 2,560 tok/s by AIConfigurator 0.12.0 (vllm 0.24.0 data, h100_sxm) "
                                   "(a prior, not a measurement)")  # vLLM's 1024 sequences, 256 clients
    assert lines[baseline + 2].startswith("docker run")
    assert any(line.startswith("#   by performance-model: predicted") for line in lines)


@pytest.mark.skipif(paths.aic_python() is None, reason="AIConfigurator's venv is not installed")
def test_real_aiconfigurator_estimates_llama_8b_on_h100() -> None:
    pm = advisor(estimator=AicRunner())
    first = pm.predict([{"max_num_seqs": 256}, {"max_num_seqs": 64}])
    assert first[0] is not None and first[1] is not None
    assert first[0].tokens_per_s > first[1].tokens_per_s > 100  # a bigger batch, more throughput
    assert pm.label.startswith("AIConfigurator 0.12.0 (vllm ")
