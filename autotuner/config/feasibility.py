"""What a trial's feasibility rules read about an experiment before anything launches: the requests'
lengths (the workload's shape), the declared GPUs, fixed engine arguments and the model's shape."""

from __future__ import annotations

import statistics
from typing import Any

from autotuner.models.facts import read_model_facts
from autotuner.workloads.source import level_stream

# Tokens a server adds that a request's own lengths leave out: a BOS on a completion; a chat template's
# role markers around each message (llama-3's: 4 to 5; ChatML's: 5; a system prompt's more).
COMPLETION_MARGIN = 1
CHAT_MARGIN_PER_MESSAGE = 16


def feasibility_context(exp: Any, source: Any = None) -> dict[str, Any]:
    """What the engines' `infeasible` rules read about an experiment (autotuner.config.Experiment):
    workload lengths, declared GPUs, fixed engine_args, and the model's shape when config.json is at hand.

    The lengths are those of the requests every trial sends (`source`: the workload's, read from the
    experiment when not given; a trial's traffic hands its own once a dataset is counted in the model's
    tokens): `longest_request` (prompt + output tokens of the longest, with the tokens a server adds;
    absent where a dataset's prompts are not counted yet), `mean_request`, `input_len` and `output_len`
    (means), `prefix_reuse`, and `max_concurrency` where the load names one."""
    cfg = exp.config
    w = cfg.workload
    if source is None:
        source = w.source(exp.source.parent, cfg.load.max_steps)
    shape = workload_shape(exp, source)
    facts: dict[str, Any] = {"input_len": round(w.input_lengths.mean), "output_len": round(w.output_lengths.mean),
                             "gpus": cfg.hardware.gpus, "engine_args": tuple(cfg.engine_args),
                             "prefix_reuse": shape.prefix_reuse, **read_model_facts(exp.model_path)}
    if shape.input_tokens:
        facts["input_len"] = round(statistics.fmean(shape.input_tokens))
    if shape.output_tokens:
        facts["output_len"] = round(statistics.fmean(shape.output_tokens))
    if shape.longest_request is not None:
        margin = COMPLETION_MARGIN if w.endpoint == "completions" else CHAT_MARGIN_PER_MESSAGE * shape.messages
        facts.update(longest_request=shape.longest_request + margin, mean_request=shape.mean_request)
    levels = cfg.load.levels()
    if levels and "max_concurrency" in levels[0]:
        facts["max_concurrency"] = int(cfg.load.max_load)
    return facts


def workload_shape(exp: Any, source: Any) -> Any:
    """The shape (workloads.source.Shape) of every request a trial of `exp` may send: each level's,
    measured once and again."""
    steps = exp.config.load.max_steps
    streams = [level_stream(k, again) for k in range(steps) for again in (False, True)]
    return source.shape(streams, exp.config.workload.count(exp.source.parent))
