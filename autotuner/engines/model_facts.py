"""The model's shape, read from its Hugging Face config.json when the model is a folder at hand.

The engines' feasibility rules need a few facts (attention and KV heads for tensor parallel, layers for
pipeline parallel, experts for expert parallel, the longest context, MLA and MTP layers for decode
context parallel and speculative decoding). Only what config.json states is
returned: a missing file or key means "unknown", and a rule that needs it does not apply.
Reads one small file; never downloads anything.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

# Our name -> the keys model families use for it in config.json, first found wins.
_KEYS: dict[str, tuple[str, ...]] = {
    "num_attention_heads": ("num_attention_heads", "n_head", "num_heads"),
    "num_key_value_heads": ("num_key_value_heads", "num_kv_heads", "multi_query_group_num"),
    "num_hidden_layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "num_experts": ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts"),
    "max_position_embeddings": ("max_position_embeddings", "max_sequence_length", "seq_length"),
    "kv_lora_rank": ("kv_lora_rank",),  # set: multi-head latent attention (MLA: DeepSeek, GLM-5, Kimi)
    "num_nextn_predict_layers": ("num_nextn_predict_layers",),  # multi-token-prediction layers (MTP)
}


def read_model_facts(model_path: Path) -> dict[str, int]:
    """Facts from `model_path`/config.json (multimodal configs: their `text_config`); {} when unknown.

    `num_experts` is 0 for a model whose config names no experts (a dense model)."""
    config_file = model_path / "config.json"
    try:
        config: Any = json.loads(config_file.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(config, dict):
        return {}
    text: dict[str, Any] = config["text_config"] if isinstance(config.get("text_config"), dict) else {}
    facts: dict[str, int] = {}
    for name, keys in _KEYS.items():
        for source in (text, config):
            value = next((source[k] for k in keys if isinstance(source.get(k), int)), None)
            if value is not None:
                facts[name] = value
                break
    if "num_experts" not in facts:
        facts["num_experts"] = 0
    if "num_key_value_heads" not in facts and "num_attention_heads" in facts:
        facts["num_key_value_heads"] = facts["num_attention_heads"]
    return facts


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
    from autotuner.workloads.source import level_stream

    steps = exp.config.load.max_steps
    streams = [level_stream(k, again) for k in range(steps) for again in (False, True)]
    return source.shape(streams, exp.config.workload.count(exp.source.parent))


def read_quantization(model_path: Path) -> dict[str, str]:
    """How the checkpoint is quantized, as config.json's `quantization_config` (or ModelOpt's older
    hf_quant_config.json) states it: `method` (quant_method, e.g. fp8, modelopt, compressed-tensors,
    mxfp4) and `algo` (ModelOpt's quant_algo, e.g. NVFP4, or compressed-tensors' format, e.g.
    nvfp4-pack-quantized), upper-cased. {} for an unquantized or unknown checkpoint."""
    for name, section in (("config.json", "quantization_config"), ("hf_quant_config.json", "quantization")):
        try:
            config: Any = json.loads((model_path / name).read_text())
        except (OSError, ValueError):
            continue
        quant = config.get(section) if isinstance(config, dict) else None
        if not isinstance(quant, dict):
            continue
        method = str(quant.get("quant_method") or ("modelopt" if name == "hf_quant_config.json" else ""))
        algo = quant.get("quant_algo") or quant.get("format") or _group_format(quant)
        return {"method": method.lower(), **({"algo": str(algo).upper()} if algo else {})}
    return {}


def _group_format(quant: dict[str, Any]) -> str | None:
    # compressed-tensors may name the format per group only (config_groups.group_0.format).
    groups = quant.get("config_groups")
    if isinstance(groups, dict):
        formats = {g.get("format") for g in groups.values() if isinstance(g, dict) and g.get("format")}
        if len(formats) == 1:
            return str(formats.pop())
    return None
