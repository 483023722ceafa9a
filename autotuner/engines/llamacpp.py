"""llama.cpp's `llama-server`: params -> argv.

Flag names, value syntax and defaults are those of the llama.cpp vendored in llama-cpp-python 0.3.36
(common/arg.cpp). Pure: builds argv, never runs the binary.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from autotuner.engines._base import Engine, Flag, LaunchContext, LaunchSpec, TokenizeEndpoint, register

KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")

# Ordered by what a user reads first in the winning command line.
FLAGS: dict[str, Flag] = {
    "parallel": Flag("-np", default=-1, help="server slots (requests decoded together); -1 = auto"),
    "threads": Flag("-t", help="threads for generation (default: all cores)"),
    "threads_batch": Flag("-tb", help="threads for prompt processing (default: same as threads)"),
    "batch_size": Flag("-b", default=2048, help="logical batch size"),
    "ubatch_size": Flag("-ub", default=512, help="physical batch size"),
    "cont_batching": Flag(on="-cb", off="-nocb", default=True, help="continuous batching"),
    "flash_attn": Flag("-fa", default="auto", choices=("on", "off", "auto"), help="flash attention"),
    "cache_type_k": Flag("-ctk", default="f16", choices=KV_CACHE_TYPES, help="KV cache type for K"),
    "cache_type_v": Flag("-ctv", default="f16", choices=KV_CACHE_TYPES, help="KV cache type for V"),
    "ctx_size": Flag("-c", default=0, help="total context, split across slots unless unified; 0 = model's"),
    "kv_unified": Flag(on="-kvu", off="-no-kvu", help="one KV buffer shared by all slots (default: on if -np auto)"),
    "cache_reuse": Flag("--cache-reuse", default=0, help="min chunk size to reuse from cache via KV shifting"),
    "load_mode": Flag("-lm", default="auto", choices=("auto", "none", "mmap", "mlock", "mmap+mlock", "dio"),
                      help="how the model is loaded (replaces --mlock / --no-mmap)"),
    # Changes what the model computes, not how fast: for context extension. Here so the quality gate
    # can be shown a config that answers fast and wrong (an absurd base).
    "rope_freq_base": Flag("--rope-freq-base", default=0, help="RoPE base frequency; 0 = the model's"),
}

def _context_rules(params: Mapping[str, Any], context: Mapping[str, Any]) -> list[str]:
    """Does the KV context hold the workload? Split across slots, each slot's share must hold the longest
    request (llama-server refuses one past it: "context size has been exceeded"); one unified buffer
    must hold the longest and the typical request of every slot that the load keeps busy at once."""
    ctx, slots = int(params.get("ctx_size") or 0), int(params.get("parallel") or -1)
    longest, mean = context.get("longest_request"), context.get("mean_request")
    if not ctx or slots < 1 or not longest:
        return []  # the model's own context, or slots llama-server chooses: nothing to check here
    if not params.get("kv_unified", False):
        per_slot = ctx // slots
        if per_slot < longest:
            return [f"ctx_size {ctx} split over {slots} slots is {per_slot} tokens a slot, below the workload's "
                    f"longest request ({longest} tokens, prompt and output)"]
        return []
    if ctx < longest:
        return [f"the unified KV buffer (ctx_size {ctx}) is below the workload's longest request ({longest} tokens)"]
    # How many slots are busy at once is known only where the load names a concurrency (a rate or a
    # trace's schedule keeps as many busy as the server is slow): only there is the mean a bound.
    busy = min(slots, int(context.get("max_concurrency") or 0))
    if busy and mean and ctx < busy * mean:
        return [f"the unified KV buffer (ctx_size {ctx}) is below {busy} busy slots x the workload's mean request "
                f"({mean:.0f} tokens): requests would fail for want of context"]
    return []


# Log lines that say why a start failed, most specific first.
_FAILURES = [
    ("bad-flag", re.compile(r"error: (invalid argument|unknown value|unknown argument)|invalid value for", re.I)),
    ("oom", re.compile(r"out of memory|failed to allocate|cannot allocate|bad_alloc|unable to allocate", re.I)),
    ("model-load", re.compile(r"failed to load model|error loading model|unable to load model", re.I)),
    ("assert", re.compile(r"GGML_ASSERT|GGML_ABORT|Assertion .* failed")),
]
_ERROR_LINE = re.compile(r"^[\d.]+ E |^error:|^terminate called", re.I)


@register
class LlamaCppEngine(Engine):
    name = "llamacpp"
    default_image = "autotuner/llama-server:{version}"  # an image whose PATH has the server
    # /metrics: canonical name -> (this engine's series, kind, scale to canonical units)
    server_metrics = {
        "requests_running": ("llamacpp:requests_processing", "gauge", 1.0),
        "requests_waiting": ("llamacpp:requests_deferred", "gauge", 1.0),
        "busy_slots_per_decode": ("llamacpp:n_busy_slots_per_decode", "gauge", 1.0),
        "generation_tokens_total": ("llamacpp:tokens_predicted_total", "counter", 1.0),
        "prompt_tokens_total": ("llamacpp:prompt_tokens_total", "counter", 1.0),
        "decode_calls_total": ("llamacpp:n_decode_total", "counter", 1.0),
    }
    flags = FLAGS
    # llama-server's /tokenize: {"content": text, "add_special": false} -> {"tokens": [...]}
    tokenize = TokenizeEndpoint("/tokenize", "content", "add_special", with_model=False)

    def build(self, params: Mapping[str, Any], ctx: LaunchContext) -> LaunchSpec:
        argv = [
            ctx.binary or "llama-server",
            "--model", str(ctx.model_path),
            "--host", ctx.host,
            "--port", str(ctx.port),
            "--alias", ctx.served_model_name,
            "--metrics",
            *self.tuning_args(params),
            *ctx.extra_args,
        ]
        # No gdb backtrace on an abort: it buries the assertion under dozens of frames in the log.
        return LaunchSpec(argv=argv, port=ctx.port, served_model_name=ctx.served_model_name,
                          health_path="/health", log_env={"GGML_NO_BACKTRACE": "1"})

    def cpus_needed(self, params: Mapping[str, Any]) -> int | None:
        # Generation and prompt threads are never busy at once per slot, but both run: the larger counts.
        threads = [int(params[k]) for k in ("threads", "threads_batch") if params.get(k)]
        return max(threads) if threads else None  # llama.cpp's default: every core

    def host_memory_needed(self, params: Mapping[str, Any], weights: int, kv_per_token: int) -> int:
        # The KV cache holds ctx_size tokens (shared by the slots); unset, the model's own context: unknown here.
        return weights + kv_per_token * int(params.get("ctx_size") or 0)

    def infeasible(self, params: Mapping[str, Any], context: Mapping[str, Any]) -> list[str]:
        broken = []
        # Quantized V cache needs flash attention in llama.cpp; 'auto' may settle on either.
        v = params.get("cache_type_v", "f16")
        if v not in ("f16", "f32", "bf16") and params.get("flash_attn") == "off":
            broken.append(f"cache_type_v={v} needs flash_attn on (llama.cpp rejects a quantized V cache without it)")
        broken += _context_rules(params, context)
        return broken

    def classify_failure(self, log_tail: str, exit_code: int | None = None) -> tuple[str | None, str | None]:
        lines = log_tail.splitlines()
        for failure_class, pattern in _FAILURES:
            for line in lines:
                if pattern.search(line):
                    return failure_class, line.strip()
        # llama.cpp marks error lines with a level letter: "0.00.009.428 E llama_init_from_model: ..."
        first_error = next((line.strip() for line in lines if _ERROR_LINE.match(line)), None)
        return None, first_error

    def find_binary(self) -> tuple[str | None, str]:
        from autotuner.util import paths

        binary = paths.llama_server_binary()
        return (str(binary) if binary else None,
                "llama-server not found: run scripts/build-llama-server.sh or set AUTOTUNER_LLAMA_SERVER")

    def parse_version(self, output: str) -> str:
        # "version: 0.5.0-dev (build 1, commit 0c1e570)" on stderr
        m = re.search(r"version: (\S+) \((?:build (\d+), commit )?(\w+)\)", output)
        return f"{m.group(1)}+{m.group(3)}" if m else super().parse_version(output)
