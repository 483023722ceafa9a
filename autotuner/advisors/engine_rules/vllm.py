"""vLLM: what an engineer who knows it tries first, and the next step a trial's evidence points at
(the `engine` advisor's rules for this engine)."""

from __future__ import annotations

from typing import Any

from autotuner.advisors import Proposal, StudySoFar
from autotuner.advisors.engine_rules.sizes import at_least
from autotuner.engines._base import Engine


def advise(engine: Engine, study: StudySoFar) -> list[Proposal]:
    """A sequence slot per concurrent request, chunked prefill, on GPUs the KV cache as large as the
    space allows; then what the best trial's evidence says: queued -> twice the sequences; KV cache
    full or preempting -> more KV memory, an fp8 KV cache, or half the sequences; and after an
    out-of-memory failure, the same config with a smaller memory fraction or half the sequences."""
    seqs = at_least(study.max_load) if study.load_key == "max_concurrency" else 256
    start: dict[str, Any] = {"max_num_seqs": seqs, "enable_chunked_prefill": True}
    why = f"a sequence slot for each of the {seqs} concurrent requests at the highest load, chunked prefill"
    if study.gpus:
        start["gpu_memory_utilization"] = 0.95
        why += ", the KV cache as large as the space allows"
    if (longest := study.workload.get("longest_request")) and "max_model_len" in study.space.names:
        start["max_model_len"] = study.space.at_least("max_model_len", longest)
        why += f", a context that holds the workload's longest request ({longest} tokens)"
    if study.workload.get("prefix_reuse", 0) >= 0.2 and "enable_prefix_caching" in study.space.names:
        start["enable_prefix_caching"] = True
        why += f", prefix caching ({study.workload['prefix_reuse']:.0%} of prompt tokens are a prefix sent before)"
    proposals = [Proposal(start, why)]
    best = study.best()
    if best is not None:
        params = {**engine.defaults(), **best.params}
        limit = study.limit(best)
        current = int(params.get("max_num_seqs") or 256)  # vLLM's default on small devices
        if limit.kind == "queueing":
            proposals.append(Proposal({**params, "max_num_seqs": current * 2},
                                      f"#{best.number} queued requests ({limit.why}): twice the sequences"))
        elif limit.kind == "kv-cache":
            head = f"#{best.number}: {limit.why}"
            if study.gpus:
                proposals.append(Proposal({**params, "gpu_memory_utilization": 0.95}, f"{head}: more KV memory"))
                proposals.append(Proposal({**params, "kv_cache_dtype": "fp8"}, f"{head}: an fp8 KV cache"))
            proposals.append(Proposal({**params, "max_num_seqs": max(current // 2, 1)},
                                      f"{head}: half the sequences"))
    if (oom := study.latest_failure("oom")) is not None:
        params = {**engine.defaults(), **oom.params}
        head = f"#{oom.number} ran out of memory"
        if study.gpus:
            fraction = float(params.get("gpu_memory_utilization") or 0.9)
            proposals.append(Proposal({**params, "gpu_memory_utilization": round(fraction - 0.05, 2)},
                                      f"{head}: a smaller memory fraction"))
        proposals.append(Proposal({**params, "max_num_seqs": max(int(params.get("max_num_seqs") or 256) // 2, 1)},
                                  f"{head}: half the sequences (smaller batches, fewer CUDA graphs)"))
    return proposals
