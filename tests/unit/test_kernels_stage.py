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
    vLLM benchmarks/kernels/benchmark_moe.py in the vllm 0.32.0 release's source distribution; SGLang benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py at
    sgl-project/sglang commit 00e96592."""
    p = argparse.ArgumentParser(exit_on_error=False)
    p.add_argument("--model", type=str)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tune", action="store_true")
    if engine == "vllm":
        p.add_argument("--tp-size", "-tp", "--tensor-parallel-size", type=int, default=2)
        p.add_argument("--enable-expert-parallel", "-enable-ep", action="store_true")
        p.add_argument("--dtype", type=str, choices=["auto", "fp8_w8a8", "int8_w8a16", "int4_w4a16"], default="auto")
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


def site_with(tmp_path: Path, **modules: str) -> Path:
    """A folder for PYTHONPATH with stand-in modules (name -> source): what the tuners' wrappers import
    before and after the tuner (Ray, Triton's version), so a test never installs anything."""
    site = tmp_path / "site"
    for name, source in modules.items():
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text(source)
    return site


def process_experiment(path: Path, site: Path):
    exp = load_experiment(path)
    return exp.model_copy(update={"config": exp.config.model_copy(
        update={"launcher": "process", "env": {"PYTHONPATH": str(site)}})})


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
    from autotuner.models.facts import read_quantization

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


def test_a_trial_of_a_tuned_shard_is_pointed_at_its_folder_in_the_mounted_cache_once_tuned(tmp_path):
    exp = with_kernels(load_experiment(GLM5), model_dir(tmp_path, None), gpu="G", cache_dir=tmp_path / "kc")
    exp = kernels.with_cache_mount(exp)
    params = {"parallel_layout": "TP4xPP2", "enable_expert_parallel": True}
    assert "VLLM_TUNED_CONFIG_FOLDER" not in planned(exp, get_engine("vllm"), params, port=8000, binary=None).command
    done = tmp_path / "kc/vllm-0.32.0/G/tp4-ep4-auto" / kernels.DONE_FILE
    done.parent.mkdir(parents=True)
    done.write_text("{}")
    line = shlex.split(planned(exp, get_engine("vllm"), params, port=8000, binary=None).command)
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
    exp = process_experiment(GLM5, site_with(tmp_path, ray=""))
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


STAND_IN_SGLANG_TUNER = """\
import argparse, json
p = argparse.ArgumentParser()
p.add_argument("--model"); p.add_argument("--tp-size", type=int); p.add_argument("--ep-size", type=int)
p.add_argument("--dtype"); p.add_argument("--tune", action="store_true")
a = p.parse_args()
E = 256 // a.ep_size
with open(f"E={E},N={3072 // (a.tp_size // a.ep_size)},device_name=G.json", "w") as f:  # its working folder
    json.dump({"1": {"BLOCK_SIZE_M": 16}}, f)
"""


def test_sglang_jobs_file_their_configs_under_the_images_triton_version_and_trials_read_them(tmp_path, monkeypatch):
    """SGLang 0.5.23 reads $SGLANG_MOE_CONFIG_DIR/configs/triton_<triton.__version__, '.' -> '_'>/<file>; the
    job finds the version with the same interpreter that ran the tuner (here a `triton` of 3.5.1)."""
    script = tmp_path / "tuner.py"
    script.write_text(STAND_IN_SGLANG_TUNER)
    exp = process_experiment(GLM5.with_name("glm5-nvfp4-8x-rtx-pro-6000-sglang.yaml"),
                             site_with(tmp_path, ray="", triton='__version__ = "3.5.1"\n'))
    exp = with_kernels(exp, model_dir(tmp_path, None), gpu="G",
                       engine_version="0.5.23", cache_dir=tmp_path / "kc", script=str(script))
    engine = get_engine("sglang")
    params = {"tp_size": 8, "ep_size": 8}
    assert kernels.trial_env(exp, engine, params) == {}  # not tuned yet: SGLang would crash on a missing configs/
    monkeypatch.setattr(kernel_stage, "_python", lambda engine: sys.executable)
    monkeypatch.setattr(kernel_stage, "POLL_S", 0.05)
    result = kernel_stage.run(exp, engine, ProcessLauncher(tmp_path / "pids"), lambda line: None)
    assert result.tuned and not result.failed
    folder = tmp_path / "kc/sglang-0.5.23/G/tp8-ep8-auto"
    assert kernels.tuned_files(folder) == ["configs/triton_3_5_1/E=32,N=3072,device_name=G.json"]
    assert json.loads((folder / kernels.DONE_FILE).read_text())["files"] == kernels.tuned_files(folder)
    assert kernels.trial_env(exp, engine, params) == {"SGLANG_MOE_CONFIG_DIR": str(folder)}


def test_an_unfinished_runs_files_do_not_pass_for_a_failed_jobs_results(tmp_path, monkeypatch):
    script = tmp_path / "tuner.py"
    script.write_text("raise SystemExit('CUDA error: no device')\n")
    exp = with_kernels(process_experiment(GLM5, site_with(tmp_path, ray="")), model_dir(tmp_path, None), gpu="G",
                       engine_version="0.32.0", cache_dir=tmp_path / "kc", script=str(script))
    stale = tmp_path / "kc/vllm-0.32.0/G/tp8-ep1-auto/E=256,N=1536,device_name=G.json"
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")  # written, but the run stopped before done.json
    monkeypatch.setattr(kernel_stage, "_python", lambda engine: sys.executable)
    monkeypatch.setattr(kernel_stage, "POLL_S", 0.05)
    result = kernel_stage.run(exp, get_engine("vllm"), ProcessLauncher(tmp_path / "pids"), lambda line: None)
    assert not result.tuned and "tp8-ep1-auto" in " ".join(str(j.key) for j, _ in result.failed)
    assert not stale.exists()


def test_the_vllm_job_installs_ray_only_where_missing_and_passes_trust_remote_code_on(tmp_path):
    """vLLM 0.32.0's benchmark_moe.py imports Ray, which its CUDA image lacks; a model the server runs with
    --trust-remote-code has its config read by the tuner the same way."""
    exp = load_experiment(GLM5)
    exp = exp.model_copy(update={"config": exp.config.model_copy(
        update={"engine_args": [*exp.config.engine_args, "--trust-remote-code"]})})
    exp = with_kernels(exp, model_dir(tmp_path, None), gpu="G", cache_dir=tmp_path / "kc")
    vllm = get_engine("vllm")
    job = kernels.plan(exp, vllm).jobs[0]
    ctx = kernel_stage.launch_context(exp, port=0, binary=None)
    argv = kernels.job_spec(exp, vllm, job, ctx, python="python3").argv
    assert argv[:2] == ["sh", "-c"]
    install, tuner = argv[2].split(" && ")
    assert install.startswith('{ python3 -c "import ray" 2>/dev/null || python3 -m pip install --quiet ray')
    args = tuner_parser("vllm").parse_args(shlex.split(tuner)[2:])
    assert args.trust_remote_code and args.tune and args.save_dir == f"/autotuner-kernels/{job.key}"  # the mount


def test_a_leftover_file_that_cannot_be_removed_fails_that_job_with_what_to_remove(tmp_path, monkeypatch):
    exp = with_kernels(process_experiment(GLM5, site_with(tmp_path, ray="")), model_dir(tmp_path, None), gpu="G",
                       engine_version="0.32.0", cache_dir=tmp_path / "kc", script=str(tmp_path / "never-run.py"))
    folder = tmp_path / "kc/vllm-0.32.0/G/tp8-ep1-auto"
    folder.mkdir(parents=True)
    (folder / "E=256,N=1536,device_name=G.json").write_text("{}")
    real_unlink = Path.unlink

    def unlink(self, *a, **k):  # as for a file a container's root wrote, seen by a user
        if self.parent == folder:
            raise PermissionError(13, "Permission denied", str(self))
        return real_unlink(self, *a, **k)

    monkeypatch.setattr(Path, "unlink", unlink)
    monkeypatch.setattr(kernel_stage, "POLL_S", 0.05)
    monkeypatch.setattr(kernel_stage, "_python", lambda engine: sys.executable)
    lines: list[str] = []
    result = kernel_stage.run(exp, get_engine("vllm"), ProcessLauncher(tmp_path / "pids"), lines.append)
    failed = dict((str(j.key), why) for j, why in result.failed)
    assert "cannot remove" in failed["vllm-0.32.0/G/tp8-ep1-auto"] and f"remove {folder}" in failed[
        "vllm-0.32.0/G/tp8-ep1-auto"]
    assert not (folder / kernels.DONE_FILE).exists()


def test_a_job_another_node_is_tuning_is_left_for_last_then_reused(tmp_path, monkeypatch):
    # Another node of a Ray cluster holds the first job's lock in a shared cache: this stage tunes the other
    # jobs meanwhile, then waits for that one and finds it done.
    import threading

    from autotuner.util.locks import file_lock

    script = tmp_path / "tuner.py"
    script.write_text(STAND_IN_TUNER)
    exp = with_kernels(process_experiment(GLM5, site_with(tmp_path, ray="")), model_dir(tmp_path, None), gpu="G",
                       engine_version="0.32.0", cache_dir=tmp_path / "kc", script=str(script))
    engine = get_engine("vllm")
    monkeypatch.setattr(kernel_stage, "_python", lambda engine: sys.executable)
    monkeypatch.setattr(kernel_stage, "POLL_S", 0.05)
    first = kernels.plan(exp, engine).jobs[0]
    folder = tmp_path / "kc" / str(first.key)
    locked, release = threading.Event(), threading.Event()

    def other_node() -> None:
        with file_lock(folder / kernel_stage.LOCK_FILE):
            locked.set()
            release.wait(60)
            (folder / kernels.DONE_FILE).write_text("{}")

    holder = threading.Thread(target=other_node)
    holder.start()
    locked.wait(10)
    lines: list[str] = []
    echo = lines.append

    def said(line: str) -> None:  # the other node finishes once this one has started on everything else
        echo(line)
        if sum(": wrote " in seen or ": failed: " in seen for seen in lines) == 5:
            release.set()

    result = kernel_stage.run(exp, engine, ProcessLauncher(tmp_path / "pids"), said)
    release.set()
    holder.join()
    assert [j.key for j in result.cached] == [first.key]  # reused after the others, not tuned again
    assert len(result.tuned) + len(result.failed) == 5
    assert lines.index(f"kernels: {first.key}: tuned before, reused") > max(
        i for i, line in enumerate(lines) if ": wrote " in line or ": failed: " in line)


def test_the_winners_command_reads_the_kernels_its_ray_node_tuned_under(tmp_path):
    # On a Ray cluster each node resolves the cache key (its GPU's name) and tags its trials with it; the
    # driver's machine knows no GPU. The exported command follows the winner's tags, not the driver's guess.
    from autotuner.report.summary import TrialRow
    from autotuner.tracking.artifacts import winner_text

    exp = with_kernels(load_experiment(GLM5), model_dir(tmp_path, None), cache_dir=tmp_path / "kc")
    params = {"parallel_layout": "TP4xPP2", "enable_expert_parallel": True}
    done = tmp_path / "kc/vllm-0.32.0/G/tp4-ep4-auto" / kernels.DONE_FILE
    done.parent.mkdir(parents=True)
    done.write_text("{}")
    tags = kernel_stage.key_tags(kernel_stage.resolve(exp, engine_version="0.32.0", name="G"))
    assert tags == {"autotuner.kernel_gpu": "G", "autotuner.kernel_engine_version": "0.32.0"}

    def command(launch_tags: dict[str, str]) -> str:
        row = TrialRow(number=3, value=1.0, params=params, baseline=False, metrics={}, launch_tags=launch_tags)
        return winner_text("args", get_engine("vllm"), exp, row, None, "0.32.0")

    line = shlex.split(command(tags))
    assert "VLLM_TUNED_CONFIG_FOLDER=/autotuner-kernels/vllm-0.32.0/G/tp4-ep4-auto" in line
    assert f"{tmp_path / 'kc'}:/autotuner-kernels:ro" in line  # the folder it names is mounted
    assert "VLLM_TUNED_CONFIG_FOLDER" not in command({})  # no node's key: the driver's own (no GPU here)
    pinned = with_kernels(exp, gpu="Mine", cache_dir=tmp_path / "kc")  # a key the experiment pins wins
    assert kernel_stage.as_launched(pinned, tags).config.kernels.gpu == "Mine"
