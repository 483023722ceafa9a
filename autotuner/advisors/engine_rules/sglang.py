"""SGLang: what an engineer who knows it tries first, and the next step a trial's evidence points at
(the `engine` advisor's rules for this engine)."""

from __future__ import annotations

from autotuner.advisors import Proposal, StudySoFar
from autotuner.advisors.engine_rules.sizes import at_least
from autotuner.engines._base import Engine
from autotuner.engines.sglang import MAX_GRAPH_BATCH


def advise(engine: Engine, study: StudySoFar) -> list[Proposal]:
    """SGLang's own tuning guide (docs: Hyperparameter Tuning, and Troubleshooting on out-of-memory) as
    first steps: a running slot per concurrent request and, on GPUs, decode CUDA graphs up to that batch
    (SGLang captures them only up to about 160-256 by default); then the best trial's evidence: queued
    -> twice the running requests; KV cache full or retracting -> a larger static memory share, an fp8
    KV cache, or half the running requests; and after an out-of-memory failure: smaller prefill chunks,
    half the running requests, a smaller static memory share."""
    seqs = at_least(study.max_load) if study.load_key == "max_concurrency" else 256

    def running(n: int) -> dict[str, int]:
        return {"max_running_requests": n, **({"cuda_graph_max_bs": min(n, MAX_GRAPH_BATCH)} if study.gpus else {})}

    why = f"a running slot for each of the {seqs} concurrent requests at the highest load"
    proposals = [Proposal(running(seqs), why + (", decode CUDA graphs up to that batch" if study.gpus else ""))]
    best = study.best()
    if best is not None:
        params = {**engine.defaults(), **best.params}
        limit = study.limit(best)
        current = int(params.get("max_running_requests") or seqs)
        if limit.kind == "queueing":
            proposals.append(Proposal({**params, **running(current * 2)},
                                      f"#{best.number} queued requests ({limit.why}): twice the running requests"))
        elif limit.kind == "kv-cache":
            head = f"#{best.number}: {limit.why}"
            if study.gpus:
                share = params.get("mem_fraction_static")
                more = round(min(float(share) + 0.03, 0.95), 2) if share else 0.9
                proposals.append(Proposal({**params, "mem_fraction_static": more},
                                          f"{head}: a larger KV pool (static memory share {more})"))
                proposals.append(Proposal({**params, "kv_cache_dtype": "fp8_e4m3"}, f"{head}: an fp8 KV cache"))
            proposals.append(Proposal({**params, **running(max(current // 2, 1))},
                                      f"{head}: half the running requests"))
    if (oom := study.latest_failure("oom")) is not None:
        params = {**engine.defaults(), **oom.params}
        head = f"#{oom.number} ran out of memory"
        chunk = int(params.get("chunked_prefill_size") or 8192)
        if chunk == -1 or chunk > 2048:
            smaller = 4096 if chunk == -1 or chunk > 4096 else 2048
            proposals.append(Proposal({**params, "chunked_prefill_size": smaller},
                                      f"{head}: prefill chunks of {smaller} tokens (less memory per prefill)"))
        current = int(params.get("max_running_requests") or seqs)
        proposals.append(Proposal({**params, **running(max(current // 2, 1))},
                                  f"{head}: half the running requests (less memory while decoding)"))
        if study.gpus:
            share = params.get("mem_fraction_static")
            less = round(float(share) - 0.05, 2) if share else 0.8
            proposals.append(Proposal({**params, "mem_fraction_static": less},
                                      f"{head}: a smaller static memory share ({less})"))
    return proposals
