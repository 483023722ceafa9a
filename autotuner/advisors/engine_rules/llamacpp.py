"""llama.cpp's llama-server: what an engineer who knows it tries first, and the next step a trial's evidence points at
(the `engine` advisor's rules for this engine)."""

from __future__ import annotations

from autotuner.advisors import Proposal, StudySoFar
from autotuner.advisors.engine_rules.sizes import at_least
from autotuner.engines._base import Engine


def advise(engine: Engine, study: StudySoFar) -> list[Proposal]:
    """A slot per concurrent request, a thread per core, continuous batching, one large KV buffer;
    then what the best trial's evidence says: requests queued -> twice the slots; after an allocation
    failure, the same config with half the context or half the batch."""
    load = at_least(study.max_load) if study.load_key == "max_concurrency" else 16
    start = {"parallel": load, "threads": study.cpus, "cont_batching": True, "kv_unified": True,
             "ctx_size": 1 << 20}  # without the workload's lengths, the space's largest context
    why = (f"a slot for each of the {load} concurrent requests at the highest load, a thread per core "
           f"({study.cpus}), continuous batching, one KV buffer")
    longest, mean = study.workload.get("longest_request"), study.workload.get("mean_request")
    if longest and mean and (ctx := study.space.at_least("ctx_size", max(longest, 1.25 * load * mean))):
        start["ctx_size"] = ctx
        why += (f" of {ctx} tokens (every slot busy with the workload's mean request of {mean:.0f} tokens, "
                f"and a quarter more; its longest is {longest})")
    if study.workload.get("prefix_reuse", 0) >= 0.2 and "cache_reuse" in study.space.names:
        start["cache_reuse"] = 256
        why += (f"; {study.workload['prefix_reuse']:.0%} of prompt tokens are a prefix sent before: reuse "
                "cached chunks (--cache-reuse 256)")
    proposals = [Proposal(start, why)]
    best = study.best()
    if best is not None:
        params = {**engine.defaults(), **best.params}
        limit = study.limit(best)
        slots = int(params.get("parallel", -1))
        slots = 4 if slots <= 0 else slots  # -np -1 (auto): 4 slots
        if limit.kind == "queueing":
            proposals.append(Proposal({**params, "parallel": slots * 2},
                                      f"#{best.number} queued requests ({limit.why}): twice the slots"))
    if (oom := study.latest_failure("oom")) is not None:
        params = {**engine.defaults(), **oom.params}
        head = f"#{oom.number} could not allocate its buffers"
        if int(params.get("ctx_size") or 0) > 0:
            proposals.append(Proposal({**params, "ctx_size": int(params["ctx_size"]) // 2},
                                      f"{head}: half the context (the KV buffer)"))
        proposals.append(Proposal({**params, "batch_size": max(int(params.get("batch_size") or 2048) // 2, 1)},
                                  f"{head}: half the logical batch"))
    return proposals
