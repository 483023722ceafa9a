"""The model's shape, read from its Hugging Face config.json when the model is a folder at hand.

The engines' feasibility rules (through config/feasibility.py) need a few facts (attention and KV heads
for tensor parallel, layers for pipeline parallel, experts for expert parallel, the longest context,
MLA and MTP layers for decode context parallel and speculative decoding). Only what config.json states is
returned: a missing file or key means "unknown", and a rule that needs it does not apply.
Reads one small file; never downloads anything.
"""

from __future__ import annotations

import json
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


def host_footprint(model_path: Path) -> tuple[int, int] | None:
    """(weight bytes, KV bytes per token at 16 bits) of a GGUF file or a Hugging Face folder, read from
    their headers; None when neither can be read (what a CPU launch holds in memory is then unknown)."""
    from autotuner.models.gguf import GgufError, read_gguf
    from autotuner.models.hf import HfError, read_hf

    try:
        if model_path.is_file():
            gguf = read_gguf(model_path)
            return gguf.weight_bytes, gguf.kv_bytes_per_token
        hf = read_hf(model_path)
        return hf.weight_bytes, hf.kv_bytes_per_token()
    except (GgufError, HfError, OSError, ValueError):
        return None
