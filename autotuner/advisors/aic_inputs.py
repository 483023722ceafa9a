"""What AIConfigurator is asked, from what a study knows: pure rules, no import of aiconfigurator.

AIConfigurator (NVIDIA's offline performance model) names a GPU system (`h100_sxm`), a model (a Hugging
Face id or a folder with config.json), a backend and the version of its measured database, and estimates
one serving config at a time: batch size, the per-step token budget, TP/PP/attention DP, the KV cache's
dtype and the memory share. This module maps our names to those: the host's GPU name to a system, the
model's names to a model it bundles, the engine's version to the nearest database, and a vLLM config to
one estimate's inputs. It decides nothing about ranking (performance_model.py) and runs nothing
(aic_runner.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

# vLLM params an estimate reads (directly or through the parallel layout); the others are left to the sampler.
VLLM_MODELED = ("parallel_layout", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
                "max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill", "kv_cache_dtype",
                "gpu_memory_utilization")
# vLLM's own values where a config leaves a param unset (an H100-class GPU serving over HTTP).
VLLM_DEFAULTS = {"max_num_seqs": 1024, "max_num_batched_tokens": 8192, "enable_chunked_prefill": True,
                 "kv_cache_dtype": "auto", "gpu_memory_utilization": 0.9}

# (a pattern in the GPU's name as NVML reports it, AIConfigurator's system), first match wins.
_GPU_SYSTEMS: tuple[tuple[str, str], ...] = (
    (r"GB300", "gb300"), (r"GB200", "gb200"), (r"B300", "b300_sxm"), (r"B200", "b200_sxm"),
    (r"H200", "h200_sxm"), (r"H100.*(PCIe|NVL)", "h100_pcie"), (r"H100", "h100_sxm"),
    (r"A100.*PCIe", "a100_pcie"), (r"A100", "a100_sxm"), (r"L40S", "l40s"), (r"\bL4\b", "l4"), (r"\bA30\b", "a30"),
    (r"RTX PRO 6000.*Server", "rtx_pro_6000_server"),
)


def gpu_system(gpu_names: str) -> str | None:
    """AIConfigurator's system for the host's GPU names ("NVIDIA H100 80GB HBM3" -> h100_sxm); None: unknown."""
    for pattern, system in _GPU_SYSTEMS:
        if re.search(pattern, gpu_names, re.IGNORECASE):
            return system
    return None


def _plain(name: str) -> str:
    """A model name without its organisation, 'Meta-' prefix or chat-tuning suffix: the same weights' shape."""
    base = name.rstrip("/").rsplit("/", 1)[-1].lower()
    base = re.sub(r"^meta-", "", base)
    return re.sub(r"-(instruct|chat|it)$", "", base)


def match_model(names: Iterable[str], bundled: Iterable[str]) -> str | None:
    """The bundled model id whose name matches one of ours (Llama-3.1-8B-Instruct -> meta-llama/Meta-Llama-3.1-8B):
    an instruct model has its base model's shape, which is all an estimate reads."""
    by_name = {_plain(b): b for b in bundled}
    return next((by_name[_plain(n)] for n in names if _plain(n) in by_name), None)


def _release(text: str | None) -> tuple[int, ...] | None:
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return tuple(int(g or 0) for g in m.groups()) if m else None


def database_versions(available: Iterable[str], engine_version: str | None) -> list[str]:
    """The databases to estimate with, preferred first: measured with the newest engine release not newer than
    ours, then older ones, then newer ones (ours unknown: newest first). Development builds ('0.1.dev...')
    are never chosen."""
    releases = sorted(((r, v) for v in available if "dev" not in v and (r := _release(v))), reverse=True)
    ours = _release(engine_version)
    if ours is None:
        return [v for _, v in releases]
    return [v for r, v in releases if r <= ours] + [v for r, v in reversed(releases) if r > ours]


@dataclass(frozen=True)
class EstimateInputs:
    """One AIConfigurator estimate (its cli_estimate's keywords), plus the replicas it stands for."""

    isl: int
    osl: int
    batch_size: int
    ctx_tokens: int
    tp_size: int
    pp_size: int
    kvcache_quant_mode: str | None  # None: the model's own dtype
    free_gpu_memory_fraction: float
    max_seq_len: int | None
    replicas: int = 1  # vLLM's data parallel on a dense model: copies of one engine, estimated once

    def keywords(self) -> dict[str, Any]:
        kw = asdict(self)
        kw.pop("replicas")
        return kw


def vllm_inputs(effective: Mapping[str, Any], *, isl: int, osl: int, clients: float | None) -> EstimateInputs:
    """A vLLM config's estimate inputs. `effective`: the config as launched (layout unpacked, engine_args
    applied: VllmEngine.effective); `clients`: the highest concurrency a trial measures (None: a rate), which
    caps the batch a server ever runs, whatever max_num_seqs allows."""
    p = {**VLLM_DEFAULTS, **{k: v for k, v in effective.items() if v is not None}}
    seqs = int(p["max_num_seqs"])
    batch = min(seqs, int(clients)) if clients else seqs
    budget = int(p["max_num_batched_tokens"])
    if not p["enable_chunked_prefill"]:  # a prompt goes into one step whole: only whole prompts count
        budget = max(budget // isl, 1) * isl
    max_len = effective.get("max_model_len")
    return EstimateInputs(
        isl=isl, osl=osl, batch_size=max(batch, 1), ctx_tokens=budget,
        tp_size=int(p.get("tensor_parallel_size", 1)), pp_size=int(p.get("pipeline_parallel_size", 1)),
        kvcache_quant_mode="fp8" if str(p["kv_cache_dtype"]).startswith("fp8") else None,
        free_gpu_memory_fraction=float(p["gpu_memory_utilization"]),
        max_seq_len=int(max_len) if max_len else None, replicas=int(p.get("data_parallel_size", 1)))
