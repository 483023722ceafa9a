"""The kernel stage on paper: which fused-MoE tuning jobs a study needs, where their results live, the
tuner command of each, and the environment that points a trial at its results.

A tuned fused-MoE file depends on the MoE layer's shard, not on the whole config: vLLM flattens TP x DP
into the MoE layer's ranks (fused_moe/config.py, FusedMoEParallelConfig.make), splitting the experts over
them with expert parallel and each expert's intermediate size without; pipeline parallel and the
scheduler change nothing. So one job serves every config of one (MoE ranks, expert parallel, tuner
dtype), and its folder is keyed by those plus the engine version and the GPU:
`<engine>-<version>/<gpu>/tp<ranks>-ep<size>-<dtype>/`.

Whether the tuner's results are used at all depends on the model's quantization: the tuners tune the
Triton fused-MoE kernel only (`triton_dtype`), and NVFP4 or MXFP4 experts run on other kernels.

Pure: reads the experiment and the model's config.json, never starts or writes anything
(`kernel_stage.py` runs the jobs).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import product
from pathlib import Path, PurePosixPath
from typing import Any

from autotuner.config import BoolParam, CategoricalParam, Experiment, IntParam, VolumeConfig
from autotuner.config.feasibility import feasibility_context
from autotuner.config.space import SearchSpace
from autotuner.engines._base import Engine, LaunchContext, LaunchSpec
from autotuner.models.facts import read_quantization

KERNELS_MOUNT = "/autotuner-kernels"  # where a container sees the kernel cache
DONE_FILE = "done.json"  # written into a job's folder once its tuner produced configs
MAX_INT_CHOICES = 16  # an int param with more values is not a shape the stage enumerates


@dataclass(frozen=True)
class MoeTuner:
    """One engine's fused-MoE tuner: its script, the variable its server reads tuned configs from, and
    the tuner dtype of each quantization it covers."""

    engine: str
    script: str  # where the engine's image keeps it
    config_env: str  # the variable that points the server at one folder of tuned files
    source: str  # where the facts below come from
    dtypes: Mapping[str, str]  # quant method (or method:algo) -> the tuner's --dtype
    used_when: str  # which trials' servers run the tuned kernel at all
    requires: str | None = None  # a module the tuner imports that the image may lack: installed first
    # The server reads <folder>/configs/triton_<its Triton version>/: the job files the tuner's output there.
    triton_versioned: bool = False


# vLLM 0.32.0 (read in the release's source): fused_moe.get_moe_configs reads
# $VLLM_TUNED_CONFIG_FOLDER/<E,N,device,dtype>.json before its packaged configs;
# benchmarks/kernels/benchmark_moe.py --tune writes that file into --save-dir, for --dtype auto (the
# model's bf16/fp16), fp8_w8a8, int8_w8a16 or int4_w4a16 (4-bit experts run Marlin/WNA16 in the server,
# so the stage does not tune for it). The script imports Ray, which vLLM's CUDA image does not install,
# and is copied to /vllm-workspace/benchmarks in that image. FlashInfer tunes itself at start and keeps the result per
# whole vLLM config hash (model_executor/warmup/flashinfer_autotune_cache.py), so it is not a job: it stays
# in the study's writable engine cache (VLLM_CACHE_ROOT), not in the read-only kernel folder.
VLLM_TUNER = MoeTuner(
    engine="vllm", script="/vllm-workspace/benchmarks/kernels/benchmark_moe.py",
    config_env="VLLM_TUNED_CONFIG_FOLDER", requires="ray",
    # fused_moe/oracle/unquantized.py: on CUDA, auto tries FlashInfer (TRT-LLM, then CUTLASS) before Triton,
    # and only Hopper puts Triton first; FlashInfer CUTLASS covers SM100/SM120 (B200, RTX PRO 6000).
    used_when="its fused-MoE backend is Triton: --moe-backend triton, or auto before Blackwell (on Blackwell "
              "GPUs auto runs unquantized experts on FlashInfer, which tunes itself)",
    source="vLLM benchmarks/kernels/benchmark_moe.py",
    dtypes={"": "auto", "fp8": "fp8_w8a8", "fbgemm_fp8": "fp8_w8a8", "fp8_per_block": "fp8_w8a8",
            "fp8_per_channel": "fp8_w8a8", "fp8_per_tensor": "fp8_w8a8", "modelopt:FP8": "fp8_w8a8",
            "compressed-tensors:FLOAT-QUANTIZED": "fp8_w8a8", "experts_int8": "int8_w8a16"})
# SGLang 0.5.23 (moe_runner/triton_utils/fused_moe_triton_config.py, get_moe_configs) reads
# $SGLANG_MOE_CONFIG_DIR/configs/triton_<triton.__version__ with '_' for '.'>/<E,N,device,dtype>.json,
# instead of its packaged configs; without that exact file it lists configs/ unguarded (a missing folder
# crashes the server) for another Triton version's. The tuner
# (benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py) writes the file into its working folder,
# so the job moves it into the folder of the image's own Triton version, in the same container. It imports
# Ray, which SGLang 0.5.23 lists only in its `ray` extra.
SGLANG_TUNER = MoeTuner(
    engine="sglang", script="/sgl-workspace/sglang/benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py",
    config_env="SGLANG_MOE_CONFIG_DIR", requires="ray", triton_versioned=True,
    used_when="its MoE runner runs the Triton kernel (--moe-runner-backend triton, or auto where SGLang picks it)",
    source="SGLang benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py",
    dtypes={"": "auto", "fp8": "fp8_w8a8", "w8a8_int8": "int8_w8a8", "w8a8_fp8": "fp8_w8a8",
            "modelopt:FP8": "fp8_w8a8", "compressed-tensors:FLOAT-QUANTIZED": "fp8_w8a8"})
TUNERS = {t.engine: t for t in (VLLM_TUNER, SGLANG_TUNER)}

# Quantizations whose experts never run the Triton fused-MoE kernel, and what runs them instead
# (vLLM 0.32.0 fused_moe/oracle/nvfp4.py and mxfp4.py: NvFp4MoeBackend, Mxfp4MoeBackend).
_OTHER_KERNELS = {
    "NVFP4": "NVFP4 experts run on FlashInfer (TRT-LLM, CUTLASS, CuTe DSL), CUTLASS or Marlin kernels",
    "MXFP4": "MXFP4 experts run on FlashInfer, CUTLASS, Marlin or triton_kernels' matmul_ogs",
    "INT4": "4-bit integer experts run on Marlin or the WNA16 kernel",
}


@dataclass(frozen=True)
class Shape:
    """What a tuned fused-MoE file depends on, for one launchable config."""

    moe_ranks: int  # GPUs one MoE layer is split over (TP x DP in vLLM, TP in SGLang)
    ep_size: int  # 1: experts tensor-parallel; else experts split over this many ranks
    quantization: str  # the config's quantization param ("auto": as the checkpoint says)


@dataclass(frozen=True)
class TuningJob:
    engine: str
    version: str
    gpu: str
    moe_ranks: int
    ep_size: int
    dtype: str  # the tuner's --dtype

    @property
    def key(self) -> PurePosixPath:
        """The job's folder under the kernel cache."""
        return PurePosixPath(f"{self.engine}-{slug(self.version)}", slug(self.gpu),
                             f"tp{self.moe_ranks}-ep{self.ep_size}-{self.dtype}")

    def describe(self) -> str:
        ep = f"experts split over {self.ep_size}" if self.ep_size > 1 else "experts tensor-parallel"
        return f"MoE over {self.moe_ranks} GPU(s), {ep}, {self.dtype}"


@dataclass(frozen=True)
class Plan:
    jobs: list[TuningJob]
    uncovered: list[str]  # one line per quantization the tuner does not tune for: why, once


def slug(text: str) -> str:
    """A folder name from a version or GPU name: 'NVIDIA RTX PRO 6000' -> 'NVIDIA_RTX_PRO_6000'."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._-") or "unknown"


def version_from_image(image: str) -> str | None:
    """The engine version an image's tag names ('vllm/vllm-openai:v0.32.0' -> '0.32.0'); None for
    'latest', a digest or no tag."""
    name = image.split("@", 1)[0]
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else ""
    return tag.removeprefix("v") if re.match(r"v?\d", tag) else None


def shape(engine: Engine, params: Mapping[str, Any], engine_args: tuple[str, ...] = ()) -> Shape:
    """The MoE shard a config launches (vLLM: FusedMoEParallelConfig.make; SGLang: --tp-size, --ep-size)."""
    if engine.name == "vllm":
        p = engine.effective(params, engine_args)
        ranks = int(p.get("tensor_parallel_size", 1)) * int(p.get("data_parallel_size", 1))
        ep = ranks if p.get("enable_expert_parallel") and ranks > 1 else 1
        return Shape(ranks, ep, str(p.get("quantization", "auto")))
    p = {**engine.defaults(), **engine.effective(params, engine_args)}
    return Shape(int(p.get("tp_size", 1)), int(p.get("ep_size", 1)), str(p.get("quantization", "auto")))


def triton_dtype(tuner: MoeTuner, quantization: str, checkpoint: Mapping[str, str]) -> tuple[str | None, str]:
    """The tuner's --dtype for a config's quantization ("auto": the checkpoint's), or None where the
    tuner does not tune the kernel those experts run; and the quantization in words, with why when None."""
    method, algo = ("", "") if quantization == "auto" else (quantization, "")
    if not method:
        method, algo = checkpoint.get("method", ""), checkpoint.get("algo", "")
    words = " ".join(w for w in (method, algo) if w) or "unquantized"
    family = _other_kernels(method, algo)
    if family is not None:
        return None, f"{words}: {_OTHER_KERNELS[family]}"
    dtype = tuner.dtypes.get(f"{method}:{algo}") or tuner.dtypes.get(method)
    return dtype, words if dtype else f"{words}: not a quantization the tuner takes (--dtype)"


def _other_kernels(method: str, algo: str) -> str | None:
    if "NVFP4" in algo or method in ("modelopt_fp4", "nvfp4_per_token"):
        return "NVFP4"
    if "MXFP4" in algo or "mxfp4" in method:
        return "MXFP4"
    if method in ("gptq", "awq", "gptq_marlin", "awq_marlin", "auto_gptq", "auto_awq", "moe_wna16"):
        return "INT4"
    return None


def job_for(exp: Experiment, engine: Engine, params: Mapping[str, Any]) -> TuningJob | None:
    """The job whose results a launch of `params` reads (None: the stage has none for it)."""
    tuner = TUNERS.get(engine.name)
    if tuner is None or exp.config.kernels is None:
        return None
    s = shape(engine, params, tuple(exp.config.engine_args))
    dtype, _ = triton_dtype(tuner, s.quantization, read_quantization(exp.model_path))
    version, gpu = cache_key(exp)
    return TuningJob(engine.name, version, gpu, s.moe_ranks, s.ep_size, dtype) if dtype else None


def cache_key(exp: Experiment) -> tuple[str, str]:
    """(engine version, GPU) of the cache key: the kernels section's, else the docker image's tag; 'unknown'
    and 'unknown-gpu' where neither says (kernel_stage.resolve fills them in before a real run)."""
    k = exp.config.kernels
    image = exp.config.docker.image if exp.config.launcher == "docker" and exp.config.docker else ""
    version = (k.engine_version if k else None) or version_from_image(image) or "unknown"
    return version, (k.gpu if k else None) or "unknown-gpu"


def cache_root(exp: Experiment) -> Path:
    """The kernel cache on the host: kernels.cache_dir (relative to the experiment file), else the user's."""
    k = exp.config.kernels
    if k is not None and k.cache_dir is not None:
        return (exp.source.parent / k.cache_dir).resolve()
    from autotuner.util import paths

    return paths.cache_dir() / "kernels"


def trial_env(exp: Experiment, engine: Engine, params: Mapping[str, Any]) -> dict[str, str]:
    """What points one launch at its job's results once the job is done: the kernel cache as the server
    sees it (the mount in a container, the host folder for a process). {} without a kernels section, a
    job, or its results (a server pointed at a folder without them would fall back, or in SGLang crash).
    Reads whether the job's folder holds DONE_FILE, nothing else."""
    job = job_for(exp, engine, params)
    if job is None or not (cache_root(exp) / str(job.key) / DONE_FILE).is_file():
        return {}
    return {TUNERS[engine.name].config_env: str(job_folder(exp, job))}


def job_folder(exp: Experiment, job: TuningJob) -> PurePosixPath:
    """A job's folder as its tuner and the trials see it: under the mount in a container, else on the host."""
    return PurePosixPath(KERNELS_MOUNT if exp.config.launcher == "docker" else str(cache_root(exp))) / job.key


def with_cache_mount(exp: Experiment, *, writable: bool = False) -> Experiment:
    """A docker experiment with the kernel cache mounted at KERNELS_MOUNT (read-only for trials; the
    stage's tuners write); any other experiment as it is."""
    docker = exp.config.docker
    if exp.config.kernels is None or exp.config.launcher != "docker" or docker is None:
        return exp
    volume = VolumeConfig(host=cache_root(exp), container=KERNELS_MOUNT, read_only=not writable)
    volumes = [v for v in docker.volumes if v.container != KERNELS_MOUNT] + [volume]
    config = exp.config.model_copy(update={"docker": docker.model_copy(update={"volumes": volumes})})
    return exp.model_copy(update={"config": config})


def plan(exp: Experiment, engine: Engine) -> Plan:
    """The tuning jobs of every MoE shard the study's space can launch (the baseline included), one per
    shard and tuner dtype, keyed by `cache_key`; and, once each, the quantizations the tuner does not
    cover. No jobs for a dense model."""
    tuner = TUNERS.get(engine.name)
    if tuner is None:
        return Plan([], [f"{engine.name} has no fused-MoE tuner the kernel stage knows (engines: "
                         f"{', '.join(TUNERS)})"])
    facts = feasibility_context(exp)
    if facts.get("num_experts") == 0:
        return Plan([], ["the model's config.json names no experts: nothing to tune"])
    checkpoint = read_quantization(exp.model_path)
    version, gpu = cache_key(exp)
    jobs: dict[PurePosixPath, TuningJob] = {}
    uncovered: dict[str, None] = {}
    for s in launchable_shapes(exp, engine, facts):
        dtype, words = triton_dtype(tuner, s.quantization, checkpoint)
        if dtype is None:
            uncovered[f"{words}; {tuner.source} tunes the Triton fused-MoE kernel only: no tuning job, and a "
                      "tuned-config folder changes nothing for these experts"] = None
            continue
        job = TuningJob(engine.name, version, gpu, s.moe_ranks, s.ep_size, dtype)
        jobs.setdefault(job.key, job)
    return Plan(sorted(jobs.values(), key=lambda j: str(j.key)), list(uncovered))


# The params that decide a config's MoE shard, per engine.
SHAPE_PARAMS = {
    "vllm": ("parallel_layout", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
             "enable_expert_parallel", "quantization"),
    "sglang": ("tp_size", "ep_size", "quantization"),
}


def launchable_shapes(exp: Experiment, engine: Engine, facts: Mapping[str, Any]) -> list[Shape]:
    """The shapes of every combination of the space's shape params (categorical and bool choices, small
    int ranges) that breaks no constraint and no engine rule, plus the baseline's."""
    space = SearchSpace(exp.space)
    names = [n for n in SHAPE_PARAMS.get(engine.name, ()) if _values(exp.space.params.get(n))]
    options = [_values(exp.space.params[n]) for n in names]
    combos = [dict(zip(names, values, strict=True)) for values in product(*options)]
    if exp.config.study.baseline:
        combos.append({})
    found: dict[Shape, None] = {}
    for params in combos:
        if space.broken_constraints(params) or engine.infeasible(params, facts):
            continue
        found[shape(engine, params, tuple(exp.config.engine_args))] = None
    return list(found)


def _values(spec: Any) -> list[Any]:
    """The values a shape param can take; [] for none, a wide int range or a float."""
    if isinstance(spec, CategoricalParam):
        return list(spec.choices)
    if isinstance(spec, BoolParam):
        return [False, True]
    if isinstance(spec, IntParam) and (spec.high - spec.low) // spec.step < MAX_INT_CHOICES:
        return list(range(spec.low, spec.high + 1, spec.step))
    return []


def job_spec(exp: Experiment, engine: Engine, job: TuningJob, ctx: LaunchContext, *, python: str,
             gpus: Sequence[int] = ()) -> LaunchSpec:
    """One job's tuner as a launch on `gpus` (the study's: the tuners spread their batch sizes over every
    GPU they see, with Ray), seen through `ctx` (a launcher's context: the model's path and the port inside
    a container): it writes into the job's folder of the kernel cache."""
    tuner = TUNERS[engine.name]
    k = exp.config.kernels
    folder = str(job_folder(exp, job))
    argv = tuner_argv(tuner, job, python=python, script=(k.script if k else None) or tuner.script,
                      model=str(ctx.model_path), save_dir=folder, batch_sizes=k.batch_sizes if k else None,
                      trust_remote_code="--trust-remote-code" in exp.config.engine_args)
    py = shlex.quote(python)
    steps = [INSTALL_IF_MISSING.format(python=py, module=tuner.requires)] if tuner.requires else []
    steps.append(shlex.join(argv))
    steps += [INTO_TRITON_FOLDER.format(python=py)] if tuner.triton_versioned else []
    return LaunchSpec(argv=["sh", "-c", " && ".join(steps)] if len(steps) > 1 else argv,
                      port=ctx.port, served_model_name="kernel-tuning", env=dict(exp.config.env), workdir=folder,
                      gpu_ids=tuple(gpus))


# Before a tuner that imports a module the engine's image may lack: install it into the throw-away
# container (pip, else uv, which vLLM's image builds with) unless it is there.
INSTALL_IF_MISSING = ('{{ {python} -c "import {module}" 2>/dev/null || {python} -m pip install --quiet {module} '
                      "|| uv pip install --system --quiet {module}; }}")
# After the tuner wrote its files into the working folder: move them where the server of the same image
# looks, configs/triton_<Triton version, '.' -> '_'>/ (SGLang's get_moe_configs).
INTO_TRITON_FOLDER = ("d=configs/triton_$({python} -c \"import triton; print(triton.__version__.replace('.', '_'))\") "
                      '&& mkdir -p "$d" && mv E=*.json "$d"/')


def tuned_files(folder: Path) -> list[str]:
    """The tuned config files a job wrote, relative to its folder."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*.json") if p.name != DONE_FILE)


def tuner_argv(tuner: MoeTuner, job: TuningJob, *, python: str, script: str, model: str, save_dir: str,
               batch_sizes: list[int] | None = None, trust_remote_code: bool = False) -> list[str]:
    """The tuner's command for one job. vLLM's writes into --save-dir; SGLang's into its working folder.
    `trust_remote_code`: the server runs the model's own code (vLLM's tuner reads its config with it)."""
    argv = [python, script, "--model", model, "--tp-size", str(job.moe_ranks)]
    if tuner.engine == "vllm":
        argv += ["--enable-expert-parallel"] if job.ep_size > 1 else []
        argv += ["--dtype", job.dtype, "--save-dir", save_dir]
        argv += ["--batch-size", *map(str, batch_sizes)] if batch_sizes else []
        argv += ["--trust-remote-code"] if trust_remote_code else []
    else:
        argv += ["--ep-size", str(job.ep_size), "--dtype", job.dtype]
        argv += ["--batch-sizes", *map(str, batch_sizes)] if batch_sizes else []
    return [*argv, "--tune"]
