"""The kernel stage without a GPU: which tuning jobs a space needs, their cache keys, the tuners' commands
(parsed by the tuners' own argument lists), the trials' environment, the quantizations no tuner covers,
and a stage run through the process launcher with a stand-in tuner (resumed: a done job is never rerun)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import pytest

from autotuner.config import KernelsConfig, load_experiment
from autotuner.core.launch import planned
from autotuner.engines._base import get_engine
from autotuner.launchers.process import ProcessLauncher
from autotuner.stages import kernel_stage, kernels

REPO = Path(__file__).resolve().parents[2]
GLM5 = REPO / "experiments" / "glm5-nvfp4-8x-rtx-pro-6000.yaml"


def tuner_parser(engine: str) -> argparse.ArgumentParser:
    """The tuners' argument lists, recorded from their sources (option strings, choices, nargs):
    vLLM benchmarks/kernels/benchmark_moe.py at vllm-project/vllm commit 71acd375 (the v0.32.0 tag itself
    could not be fetched here); SGLang benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py at
    sgl-project/sglang commit 00e96592."""
    p = argparse.ArgumentParser(exit_on_error=False)
    p.add_argument("--model", type=str)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tune", action="store_true")
    if engine == "vllm":
        p.add_argument("--tp-size", "-tp", "--tensor-parallel-size", type=int, default=2)
        p.add_argument("--enable-expert-parallel", "-enable-ep", action="store_true")
        p.add_argument("--dtype", type=str, choices=["auto", "fp8_w8a8", "int8_w8a16"], default="auto")
        p.add_argument("--use-deep-gemm", action="store_true")
        p.add_argument("--save-dir", type=str, default="./")
        p.add_argument("--batch-size", type=int, nargs="+", required=False)
        p.add_argument("--trust-remote-code", action="store_true")
        p.add_argument("--model-prefix", type=str, required=False)
    else:
        p.add_argument("--tp-size", "--tp", type=int, default=2)
        p.add_argument("--ep-size", "--ep", type=int, default=1)
        p.add_argument("--dtype", type=str, choices=["auto", "fp8_w8a8", "int8_w8a16", "int8_w8a8", "int4_w4a16"])
        p.add_argument("--per-channel-quant", action="store_true")
        p.add_argument("--batch-size", type=int, required=False)
        p.add_argument("--batch-sizes", type=int, nargs="+")
        p.add_argument("--search-space-file", type=str)
        p.add_argument("--disable-shared-experts-fusion", action="store_true")
    return p


def with_kernels(exp, model: Path | None = None, **settings):
    update = {"kernels": KernelsConfig(**settings)}
    exp = exp.model_copy(update={"config": exp.config.model_copy(update=update)})
    return exp.model_copy(update={"model_path": model}) if model else exp


def model_dir(tmp_path: Path, quantization: dict | None) -> Path:
    model = tmp_path / "GLM-5"
    model.mkdir()
    config = {"architectures": ["GlmMoeDsaForCausalLM"], "num_attention_heads": 64, "num_key_value_heads": 64,
              "num_hidden_layers": 78, "n_routed_experts": 256, "max_position_embeddings": 202752}
    if quantization:
        config["quantization_config"] = quantization
    (model / "config.json").write_text(json.dumps(config))
    return model


def test_the_glm5_space_needs_one_job_per_moe_shard_keyed_by_version_gpu_ranks_ep_and_dtype(tmp_path):
    exp = with_kernels(load_experiment(GLM5), model_dir(tmp_path, None), gpu="NVIDIA RTX PRO 6000 Blackwell")
    plan = kernels.plan(exp, get_engine("vllm"))
    # TP8, TP4xPP2, TP2xPP4 x expert parallel on/off: PP leaves the MoE shard as it is.
    assert [str(j.key) for j in plan.jobs] == [
        f"vllm-0.32.0/NVIDIA_RTX_PRO_6000_Blackwell/tp{n}-ep{ep}-auto"
        for n in (2, 4, 8) for ep in (1, n)]
    assert plan.uncovered == []


def test_tpxdp_with_expert_parallel_shares_the_tp8_job_and_pp_does_not_split_experts():
    vllm = get_engine("vllm")
    assert kernels.shape(vllm, {"parallel_layout": "TP2xDP4", "enable_expert_parallel": True}) == \
        kernels.shape(vllm, {"parallel_layout": "TP8", "enable_expert_parallel": True}) == kernels.Shape(8, 8, "auto")
    assert kernels.shape(vllm, {"parallel_layout": "TP4xPP2"}) == kernels.Shape(4, 1, "auto")
    assert kernels.shape(vllm, {}, ("--tensor-parallel-size", "2")) == kernels.Shape(2, 1, "auto")
    assert kernels.shape(get_engine("sglang"), {"tp_size": 8, "ep_size": 8}) == kernels.Shape(8, 8, "auto")


def test_nvfp4_experts_get_no_job_and_one_line_saying_why(tmp_path):
    nvfp4 = {"quant_method": "modelopt", "quant_algo": "NVFP4"}
    exp = with_kernels(load_experiment(GLM5), model_dir(tmp_path, nvfp4), gpu="g")
    plan = kernels.plan(exp, get_engine("vllm"))
    assert plan.jobs == []
    assert len(plan.uncovered) == 1  # once, not once per shard
    assert plan.uncovered[0].startswith("modelopt NVFP4: NVFP4 experts run on FlashInfer")
    assert "tunes the Triton fused-MoE kernel only" in plan.uncovered[0]
    assert kernels.trial_env(exp, get_engine("vllm"), {"parallel_layout": "TP8"}) == {}


@pytest.mark.parametrize("quantization, checkpoint, expected", [
    ("auto", {}, "auto"),
    ("auto", {"method": "fp8"}, "fp8_w8a8"),
    ("fp8", {}, "fp8_w8a8"),
    ("experts_int8", {}, "int8_w8a16"),
    ("auto", {"method": "compressed-tensors", "algo": "NVFP4-PACK-QUANTIZED"}, None),
    ("modelopt_fp4", {}, None),
    ("auto", {"method": "mxfp4"}, None),
    ("gptq_marlin", {}, None),
    ("auto", {"method": "quark"}, None),
])
def test_the_tuner_dtype_of_each_quantization(quantization, checkpoint, expected):
    assert kernels.triton_dtype(kernels.VLLM_TUNER, quantization, checkpoint)[0] == expected


def test_the_checkpoint_quantization_is_read_from_config_json(tmp_path):
    from autotuner.engines.model_facts import read_quantization

    model = model_dir(tmp_path, {"quant_method": "compressed-tensors",
                                 "config_groups": {"group_0": {"format": "nvfp4-pack-quantized"}}})
    assert read_quantization(model) == {"method": "compressed-tensors", "algo": "NVFP4-PACK-QUANTIZED"}
    assert read_quantization(tmp_path / "nowhere") == {}


def test_versions_come_from_image_tags():
    assert kernels.version_from_image("vllm/vllm-openai:v0.32.0") == "0.32.0"
    assert kernels.version_from_image("lmsysorg/sglang:v0.5.23-cu129") == "0.5.23-cu129"
    assert kernels.version_from_image("registry:5000/vllm") is None
    assert kernels.version_from_image("vllm/vllm-openai:latest") is None
    assert kernels.slug("NVIDIA H100 80GB HBM3") == "NVIDIA_H100_80GB_HBM3"


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_tuner_commands_parse_with_the_tuners_own_arguments(engine):
    tuner = kernels.TUNERS[engine]
    for ep in (1, 8):
        job = kernels.TuningJob(engine, "1.0", "g", 8, ep, "fp8_w8a8")
        argv = kernels.tuner_argv(tuner, job, python="python3", script="t.py", model="/models/m", save_dir="/out",
                                  batch_sizes=[1, 64])
        assert argv[:2] == ["python3", "t.py"]
        args = tuner_parser(engine).parse_args(argv[2:])
        assert (args.model, args.tp_size, args.dtype, args.tune) == ("/models/m", 8, "fp8_w8a8", True)
        if engine == "vllm":
            assert (args.enable_expert_parallel, args.save_dir, args.batch_size) == (ep > 1, "/out", [1, 64])
        else:
            assert (args.ep_size, args.batch_sizes) == (ep, [1, 64])


def test_a_trial_of_a_tuned_shard_is_pointed_at_its_folder_in_the_mounted_cache(tmp_path):
    exp = with_kernels(load_experiment(GLM5), model_dir(tmp_path, None), gpu="G", cache_dir=tmp_path / "kc")
    exp = kernels.with_cache_mount(exp)
    line = shlex.split(planned(exp, get_engine("vllm"), {"parallel_layout": "TP4xPP2", "enable_expert_parallel": True},
                               port=8000, binary=None).command)
    assert f"{tmp_path / 'kc'}:/autotuner-kernels:ro" in line
    assert "VLLM_TUNED_CONFIG_FOLDER=/autotuner-kernels/vllm-0.32.0/G/tp4-ep4-auto" in line
    assert "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR" not in line  # FlashInfer's own tuning: the writable engine cache
    # A folder the config names itself wins over the stage's.
    named = planned(exp, get_engine("vllm"), {"parallel_layout": "TP8", "moe_config_folder": "/moe-configs/x"},
                    port=8000, binary=None).command
    assert "VLLM_TUNED_CONFIG_FOLDER=/moe-configs/x" in named


STAND_IN_TUNER = """\
import argparse, json, os
p = argparse.ArgumentParser()
p.add_argument("--model"); p.add_argument("--tp-size", type=int); p.add_argument("--dtype")
p.add_argument("--enable-expert-parallel", action="store_true"); p.add_argument("--save-dir")
p.add_argument("--tune", action="store_true")
a = p.parse_args()
if a.tp_size == 2 and not a.enable_expert_parallel:
    raise SystemExit("no GPU here")
E = 256 // a.tp_size if a.enable_expert_parallel else 256
with open(os.path.join(a.save_dir, f"E={E},N=1536,device_name=G.json"), "w") as f:
    json.dump({"1": {"BLOCK_SIZE_M": 16}}, f)
print("Writing best config", flush=True)
"""


def test_the_stage_runs_each_job_once_through_the_launcher_and_says_what_failed(tmp_path, monkeypatch):
    script = tmp_path / "tuner.py"
    script.write_text(STAND_IN_TUNER)
    exp = load_experiment(GLM5)
    exp = exp.model_copy(update={"config": exp.config.model_copy(update={"launcher": "process"})})
    exp = with_kernels(exp, model_dir(tmp_path, None), gpu="G", engine_version="0.32.0", cache_dir=tmp_path / "kc",
                       script=str(script))
    engine = get_engine("vllm")
    monkeypatch.setattr(kernel_stage, "_python", lambda engine: sys.executable)
    monkeypatch.setattr(kernel_stage, "POLL_S", 0.05)
    launcher = ProcessLauncher(tmp_path / "pids")
    lines: list[str] = []
    first = kernel_stage.run(exp, engine, launcher, lines.append)
    assert len(first.tuned) == 5 and [str(j.key) for j, _ in first.failed] == ["vllm-0.32.0/G/tp2-ep1-auto"]
    assert "the tuner wrote no config (no GPU here)" in first.failed[0][1]
    done = json.loads((tmp_path / "kc/vllm-0.32.0/G/tp8-ep8-auto/done.json").read_text())
    assert done["files"] == ["E=32,N=1536,device_name=G.json"]
    assert "--enable-expert-parallel" in done["command"]
    again = kernel_stage.run(exp, engine, launcher, lines.append)
    assert len(again.cached) == 5 and not again.tuned and len(again.failed) == 1  # only the failed one reruns
