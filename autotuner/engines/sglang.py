"""SGLang's server (`python -m sglang.launch_server`): params -> argv and environment.

Flag names and value spellings are those of SGLang 0.5.23 (python/sglang/srt/server_args.py and its
arg_groups/fields/). They are checked two ways: against `sglang_flags.json` beside this file, the option
strings and choices recorded from SGLang 0.5.23's own `ServerArgs.add_cli_args` parser by
scripts/record-sglang-flags.py (a unit test, always), and against that parser itself where SGLang's
source is at hand (tests/integration/test_engine_parsers.py). Note the 0.5.23 spellings: the CUDA-graph
batch limit is `--cuda-graph-max-bs-decode` (the older `--cuda-graph-max-bs` is gone) and
`--disable-cuda-graph` is deprecated in favour of `--cuda-graph-backend-decode disabled`.

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
    Flag,
    LaunchContext,
    LaunchSpec,
    register,
)
from autotuner.engines.nccl import NCCL_ENV_PARAMS

SGLANG_VERSION = "0.5.23"
LAUNCH_MODULE = "sglang.launch_server"
DEFAULT_IMAGE = "lmsysorg/sglang:v0.5.23"

DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
KV_CACHE_DTYPES = ("auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16")
SCHEDULE_POLICIES = ("lpm", "random", "fcfs", "dfs-weight", "lof", "priority", "routing-key", "hrrn",
                     "shortest-prefill-first")
ATTENTION_BACKENDS = ("auto", "triton", "torch_native", "flex_attention", "fa3", "fa4", "flashinfer", "flashmla",
                      "trtllm_mla", "trtllm_mha", "cutedsl_mla", "aiter", "intel_amx")
CUDA_GRAPH_BACKENDS = ("full", "breakable", "disabled")
# --moe-runner-backend and --moe-a2a-backend choices of 0.5.23 (sglang_flags.json), less the ones for other
# hardware (Ascend, AMD, Intel) and LoRA.
MOE_RUNNER_BACKENDS = ("auto", "triton", "triton_kernel", "deep_gemm", "cutlass", "marlin", "flashinfer_trtllm",
                       "flashinfer_trtllm_routed", "flashinfer_cutlass", "flashinfer_mxfp4", "flashinfer_cutedsl",
                       "flashinfer_megamoe", "megamoe", "humming", "experimental_sgl_marlin", "experimental_sgl_trtllm")
MOE_A2A_BACKENDS = ("none", "deepep", "deepep_v2", "mooncake", "mori", "nixl", "flashinfer", "flashinfer_megamoe",
                    "megamoe", "pplx")
# --speculative-algorithm (free text, read by SpeculativeAlgorithm.from_string): EAGLE drafts with an EAGLE
# head, and for models with next-token-prediction layers (DeepSeek, GLM) with those; NEXTN is its alias.
SPECULATIVE_ALGORITHMS = ("none", "EAGLE", "NEXTN")
# Decode CUDA graphs beyond this batch cost start-up time and memory for little (SGLang's tuning guide
# names 512-768 as the useful top at large TP).
MAX_GRAPH_BATCH = 512

FLAGS: dict[str, Flag] = {
    # parallelism
    "tp_size": Flag("--tp-size", default=1, help="tensor parallel GPUs"),
    "pp_size": Flag("--pp-size", default=1, help="pipeline parallel stages"),
    "dp_size": Flag("--dp-size", default=1, help="data parallel replicas"),
    "ep_size": Flag("--ep-size", default=1, help="expert parallel size for MoE layers (within TP)"),
    # DP attention: 0.5.23 deprecates `--dp-size N --enable-dp-attention` for `--attn-dp-size N`.
    "attn_dp_size": Flag("--attn-dp-size", default=1, help="data parallel attention inside the TP group (MoE)"),
    "moe_a2a_backend": Flag("--moe-a2a-backend", default="none", choices=MOE_A2A_BACKENDS,
                            help="all-to-all for expert parallel (deepep, ...)"),
    "moe_runner_backend": Flag("--moe-runner-backend", default="auto", choices=MOE_RUNNER_BACKENDS,
                               help="fused-MoE kernels"),
    # scheduler
    "max_running_requests": Flag("--max-running-requests", help="requests decoded together at most"),
    "chunked_prefill_size": Flag("--chunked-prefill-size", help="tokens per prefill chunk; -1 disables chunking"),
    "max_prefill_tokens": Flag("--max-prefill-tokens", default=16384, help="tokens in one prefill batch"),
    "schedule_policy": Flag("--schedule-policy", default="fcfs", choices=SCHEDULE_POLICIES,
                            help="which waiting request goes first (lpm: longest prefix match)"),
    "schedule_conservativeness": Flag("--schedule-conservativeness", default=1.0,
                                      help="lower: admit more requests and risk retractions"),
    "context_length": Flag("--context-length", help="context length (default: the model's)"),
    # memory and KV cache
    "mem_fraction_static": Flag("--mem-fraction-static", help="share of GPU memory for weights + KV cache"),
    "kv_cache_dtype": Flag("--kv-cache-dtype", default="auto", choices=KV_CACHE_DTYPES, help="KV cache type"),
    "page_size": Flag("--page-size", help="tokens per KV page"),
    "disable_radix_cache": Flag(on="--disable-radix-cache", default=False, help="no prefix (radix) cache"),
    # execution
    "attention_backend": Flag("--attention-backend", default="auto", unset="auto", choices=ATTENTION_BACKENDS,
                              help="attention kernels (auto: SGLang picks)"),
    "cuda_graph_max_bs": Flag("--cuda-graph-max-bs-decode", help="largest decode batch captured as a CUDA graph"),
    "cuda_graph_backend": Flag("--cuda-graph-backend-decode", default="full", choices=CUDA_GRAPH_BACKENDS,
                               help="decode CUDA graphs: full, breakable or disabled"),
    "enable_torch_compile": Flag(on="--enable-torch-compile", default=False, help="torch.compile the model"),
    "torch_compile_max_bs": Flag("--torch-compile-max-bs", default=32, help="largest batch torch.compile covers"),
    "dtype": Flag("--dtype", default="auto", choices=DTYPES, help="weights and activations type"),
    # speculative decoding
    "speculative_algorithm": Flag("--speculative-algorithm", default="none", unset="none",
                                  choices=SPECULATIVE_ALGORITHMS, help="speculative decoding (none: off)"),
    "speculative_num_steps": Flag("--speculative-num-steps", help="draft steps per decoding step"),
    "speculative_eagle_topk": Flag("--speculative-eagle-topk", help="branches kept per draft step"),
    "quantization": Flag("--quantization", default="auto", unset="auto",
                         choices=("auto", "fp8", "modelopt_fp4", "w4afp8", "awq", "gptq", "compressed-tensors",
                                  "mxfp4"), help="quantization method (auto: as the checkpoint says)"),
}

BASE_ENV = {"SGLANG_DISABLE_REQUEST_LOGGING": "1"}
# Always on: the diagnosis reads the server's /metrics, which SGLang serves only with this flag.
BASE_ARGS = ("--enable-metrics",)

_FAILURES = [
    ("bad-flag", re.compile(r"error: (unrecognized arguments|argument \S+: invalid|the following arguments)", re.I)),
    ("oom", re.compile(r"out of memory|OutOfMemoryError|Not enough memory|mem-fraction-static|"
                       r"Cannot allocate memory", re.I)),
    ("backend", re.compile(r"attention backend|not supported by .*backend", re.I)),
    ("bad-config", re.compile(r"(ValueError|AssertionError)[:\s]")),
]


@register
class SglangEngine(Engine):
    name = "sglang"
    default_image = "lmsysorg/sglang:{version}"  # an image whose PATH has the server
    caches = TORCH_STACK_CACHES  # its torch.compile, Triton and FlashInfer JIT caches, and the hub's downloads
    # /metrics: canonical name -> (this engine's series, kind, scale to canonical units)
    server_metrics = {
        "kv_cache_usage": ("sglang:token_usage", "gauge", 1.0),
        "requests_running": ("sglang:num_running_reqs", "gauge", 1.0),
        "requests_waiting": ("sglang:num_queue_reqs", "gauge", 1.0),
        # retractions: SGLang's preemptions (observability/metrics_collector.py)
        "preemptions_total": ("sglang:num_retracted_requests_total", "counter", 1.0),
        "generation_tokens_total": ("sglang:generation_tokens_total", "counter", 1.0),
        "prompt_tokens_total": ("sglang:prompt_tokens_total", "counter", 1.0),
    }
    flags = FLAGS
    env_params = NCCL_ENV_PARAMS

    def build(self, params: Mapping[str, Any], ctx: LaunchContext) -> LaunchSpec:
        argv = [
            ctx.binary or "python3", "-m", LAUNCH_MODULE,
            "--model-path", str(ctx.model_path),
            "--host", ctx.host,
            "--port", str(ctx.port),
            "--served-model-name", ctx.served_model_name,
            *BASE_ARGS,
            *self.tuning_args(params),
            *ctx.extra_args,
        ]
        env = {**BASE_ENV, **dict(ctx.extra_env), **self.tuning_env(params)}
        return LaunchSpec(argv=argv, port=ctx.port, served_model_name=ctx.served_model_name, health_path="/health",
                          env=env, image=DEFAULT_IMAGE)

    def version_argv(self, binary: str) -> list[str]:
        # The server is `python -m sglang...`: the installed distribution's version, not Python's own.
        return [binary, "-c", "import importlib.metadata as m; print('sglang', m.version('sglang'))"]

    def parse_version(self, output: str) -> str:
        m = re.search(r"^sglang (\S+)$", output, re.M)
        return m.group(1) if m else super().parse_version(output)

    def gpus_needed(self, params: Mapping[str, Any], engine_args: Sequence[str] = ()) -> int:
        p = self.effective(params, engine_args)
        return prod(int(p.get(k, 1)) for k in ("tp_size", "pp_size", "dp_size"))

    def infeasible(self, params: Mapping[str, Any], context: Mapping[str, Any]) -> list[str]:
        params = self.effective(params, context.get("engine_args", ()))
        gpus = int(context.get("gpus", 0))
        tp, pp, dp = (int(params.get(k, 1)) for k in ("tp_size", "pp_size", "dp_size"))
        ep, attn_dp = int(params.get("ep_size", 1)), int(params.get("attn_dp_size", 1))
        world = tp * pp * dp
        broken = []
        if gpus and world > gpus:
            broken.append(f"TP x PP x DP = {tp}x{pp}x{dp} = {world} GPUs, more than the {gpus} the experiment "
                          "declares (hardware.gpus)")
        if ep > 1 and tp % ep:
            broken.append(
                f"ep_size = {ep} must divide tp_size = {tp} (SGLang's expert parallel lives inside the TP group)"
            )
        if attn_dp > 1 and tp % attn_dp:
            broken.append(f"attn_dp_size = {attn_dp} must divide tp_size = {tp}")
        # arg_groups/parallel_hook.py and moe_hook.py of 0.5.23
        if attn_dp > 1 and dp > 1:
            broken.append(f"dp_size = {dp} with attn_dp_size = {attn_dp}: SGLang runs replicas or attention DP, "
                          "not both")
        if params.get("moe_a2a_backend") == "pplx" and attn_dp < 2:
            broken.append("moe_a2a_backend pplx needs attention DP with at least 2 groups (attn_dp_size >= 2)")
        heads = context.get("num_attention_heads")
        attn_tp = tp // attn_dp if attn_dp and tp % attn_dp == 0 else tp
        if heads and heads % attn_tp:
            broken.append(f"attention TP = {attn_tp} must divide the model's {heads} attention heads (config.json)")
        if ep > 1 and context.get("num_experts") == 0:
            broken.append("expert parallel needs a MoE model, and config.json names no experts")
        if params.get("attention_backend") == "trtllm_mha" and params.get("page_size") not in (None, 16, 32, 64):
            broken.append(f"page_size = {params['page_size']}: trtllm_mha takes 16, 32 or 64")
        max_len = params.get("context_length") or context.get("max_position_embeddings")
        need = context.get("longest_request") or int(context.get("input_len", 0)) + int(context.get("output_len", 0))
        if max_len and need > int(max_len):
            broken.append(f"context_length = {max_len} is shorter than the workload's longest request "
                          f"({need} tokens, prompt and output)")
        return broken

    def classify_failure(self, log_tail: str, exit_code: int | None = None) -> tuple[str | None, str | None]:
        lines = log_tail.splitlines()
        for failure_class, pattern in _FAILURES:
            for line in reversed(lines):
                if pattern.search(line):
                    return failure_class, line.strip()
        if exit_code in (-9, 137):
            return "oom", f"killed by signal 9 (exit code {exit_code}): the kernel's out-of-memory killer, most likely"
        return None, None

    def find_binary(self) -> tuple[str | None, str]:
        return None, ("SGLang has no local install here: run it with launcher: docker (image "
                      f"{DEFAULT_IMAGE}), or use --dry-run to see the commands")
