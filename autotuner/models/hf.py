"""A Hugging Face model folder's facts for sizing a deployment: the shape from config.json, the parameters
computed from that shape, the weight bytes read from the safetensors headers (the index's total, or each
file's header) and the KV cache a token takes.

Nothing is downloaded and no weight is read. A folder with config.json but no safetensors (facts recorded
from another machine) gets its weight bytes estimated from the parameters and the quantization, and says so.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GIB = 2**30
# Bytes per weight of a quantized linear layer (scales included): FP8 with per-block scales; NVFP4 packs two
# 4-bit values a byte plus one FP8 scale per 16; MXFP4 one E8M0 scale per 32. FP8 and INT8 checkpoints
# quantize attention too; 4-bit ones keep it at 16 bits (ModelOpt's NVFP4 excludes it), the MLPs only.
QUANT_BYTES = {"FP8": 1.0, "INT8": 1.0, "NVFP4": 0.5625, "MXFP4": 0.53125, "INT4": 0.5625}
MLP_ONLY = ("NVFP4", "MXFP4", "INT4")
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


class HfError(ValueError):
    """Not a model folder this can read: the file and what is wrong, in one line."""


@dataclass(frozen=True)
class HfFacts:
    architecture: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    context_length: int  # max_position_embeddings
    experts: int  # routed experts; 0: dense
    experts_per_token: int
    kv_lora_rank: int  # > 0: multi-head latent attention (one compressed KV vector a token a layer)
    rope_dim: int  # MLA's decoupled rotary part, cached beside the latent
    mtp_layers: int  # multi-token-prediction layers (speculative decoding drafts with them)
    dtype: str  # the unquantized tensors' type
    quantization: str  # "" unquantized, else FP8, NVFP4, MXFP4, ...
    parameters: int  # computed from config.json (MTP layers included)
    expert_parameters: int  # of which in routed experts
    expert_weight_bytes: int  # the routed experts' bytes: what expert parallel spreads over the ranks
    weight_bytes: int
    weights_read: bool  # True: summed from the safetensors headers; False: estimated from the parameters

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    def kv_bytes_per_token(self, element_bytes: int = 2) -> int:
        """The KV cache of one token over every layer, unsharded (MLA: the latent and the rotary key)."""
        per_layer = self.kv_lora_rank + self.rope_dim if self.mla else 2 * self.kv_heads * self.head_dim
        return self.layers * per_layer * element_bytes

    def describe(self) -> str:
        moe = f", MoE {self.experts} experts ({self.experts_per_token} a token)" if self.experts else ", dense"
        attention = "MLA" if self.mla else f"{self.heads} heads ({self.kv_heads} KV)"
        mtp = f", {self.mtp_layers} MTP layer(s)" if self.mtp_layers else ""
        how = "read from its safetensors" if self.weights_read else "estimated: no safetensors in the folder"
        return (f"{self.architecture}, {self.parameters / 1e9:.1f}B params{moe}, {self.layers} layers, "
                f"{attention}{mtp}, {self.quantization or self.dtype}; {self.weight_bytes / GIB:.1f} GiB of "
                f"weights ({how}); trained context {self.context_length}")


def read_hf(folder: Path) -> HfFacts:
    """The facts of the model folder at `folder`; HfError when its config.json is missing or unreadable."""
    config_file = folder / "config.json"
    try:
        config: Any = json.loads(config_file.read_text())
    except OSError:
        raise HfError(f"{folder}: no config.json (a Hugging Face model folder has one)") from None
    except ValueError as e:
        raise HfError(f"{config_file}: not JSON ({e})") from None
    if not isinstance(config, dict):
        raise HfError(f"{config_file}: not a JSON object")
    c = {**config, **config["text_config"]} if isinstance(config.get("text_config"), dict) else config

    def need(*keys: str) -> int:
        value = next((c[k] for k in keys if isinstance(c.get(k), int)), None)
        if value is None:
            raise HfError(f"{config_file}: no {keys[0]} (an integer)")
        return value

    def get(key: str, default: int = 0) -> int:
        value = c.get(key)
        return value if isinstance(value, int) else default

    hidden, layers = need("hidden_size", "n_embd", "d_model"), need("num_hidden_layers", "n_layer", "num_layers")
    heads = need("num_attention_heads", "n_head", "num_heads")
    need("vocab_size", "padded_vocab_size")
    kv_heads = get("num_key_value_heads", heads) or heads
    head_dim = get("head_dim") or hidden // heads
    experts = get("n_routed_experts") or get("num_experts") or get("num_local_experts")
    quantization = _quantization(folder, c)
    dtype = str(c.get("torch_dtype") or c.get("dtype") or "bfloat16")
    shape = _Shape(c, hidden, layers, heads, kv_heads, head_dim, experts)
    # Bytes as the quantization lays them out: the whole, and the routed experts' part (MTP layers' at 16 bits).
    full, quant = DTYPE_BYTES.get(dtype, 2), QUANT_BYTES.get(quantization)
    quantized = 0 if quant is None else shape.mlp if quantization in MLP_ONLY else shape.total - shape.embeddings
    estimate = quantized * (quant or full) + (shape.total - quantized) * full
    expert_bytes = shape.routed_main * (quant or full) + (shape.experts - shape.routed_main) * full
    read_bytes = _safetensors_bytes(folder)
    read = read_bytes is not None
    weight_bytes = read_bytes if read_bytes is not None else int(estimate)
    return HfFacts(
        architecture=str((c.get("architectures") or [c.get("model_type", "unknown")])[0]),
        layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        context_length=get("max_position_embeddings") or get("seq_length"),
        experts=experts, experts_per_token=get("num_experts_per_tok") or get("moe_topk"),
        kv_lora_rank=get("kv_lora_rank"), rope_dim=get("qk_rope_head_dim"),
        mtp_layers=get("num_nextn_predict_layers"), dtype=dtype, quantization=quantization,
        parameters=shape.total, expert_parameters=shape.experts,
        expert_weight_bytes=int(weight_bytes * expert_bytes / max(estimate, 1)), weight_bytes=weight_bytes,
        weights_read=read)


class _Shape:
    """The parameters config.json implies: embeddings, attention (GQA or MLA), dense and MoE MLPs, MTP."""

    def __init__(self, c: dict[str, Any], h: int, layers: int, heads: int, kv_heads: int, head_dim: int,
                 experts: int) -> None:
        def get(key: str, default: int = 0) -> int:
            value = c.get(key)
            return value if isinstance(value, int) else default

        vocab = get("vocab_size") or get("padded_vocab_size")  # read_hf requires one
        self.embeddings = vocab * h * (1 if c.get("tie_word_embeddings") else 2)
        if get("kv_lora_rank"):
            q_lora, kv_lora = get("q_lora_rank"), get("kv_lora_rank")
            nope, rope, v = get("qk_nope_head_dim"), get("qk_rope_head_dim"), get("v_head_dim")
            q = h * q_lora + q_lora * heads * (nope + rope) if q_lora else h * heads * (nope + rope)
            attention = q + h * (kv_lora + rope) + kv_lora * heads * (nope + v) + heads * v * h
        else:
            attention = 2 * h * heads * head_dim + 2 * h * kv_heads * head_dim
        dense_mlp = 3 * h * get("intermediate_size", 4 * h)
        if experts:
            inner = get("moe_intermediate_size") or get("intermediate_size", 4 * h)
            shared = get("n_shared_experts") * 3 * h * inner + 3 * h * get("shared_expert_intermediate_size")
            routed = experts * 3 * h * inner
            moe_mlp = routed + shared + h * experts  # the router too
            dense_layers = get("first_k_dense_replace")
        else:
            routed, moe_mlp, dense_layers = 0, dense_mlp, layers
        mtp = get("num_nextn_predict_layers")
        self.routed_main = (layers - dense_layers) * routed
        self.experts = self.routed_main + mtp * routed
        self.mlp = dense_layers * dense_mlp + (layers - dense_layers) * moe_mlp  # MTP layers stay 16-bit
        self.total = self.embeddings + layers * attention + self.mlp + mtp * (attention + moe_mlp + 2 * h * h)


def _quantization(folder: Path, c: dict[str, Any]) -> str:
    """FP8, NVFP4, MXFP4, ... as config.json's quantization_config (or ModelOpt's hf_quant_config.json) says."""
    from autotuner.models.facts import read_quantization

    quant = read_quantization(folder)
    algo, method = quant.get("algo", ""), quant.get("method", "")
    for name in ("NVFP4", "MXFP4", "FP8"):
        if name in algo or name.lower() in method:
            return name
    if method in ("awq", "gptq"):
        return "INT4"
    return algo or method.upper()


def _safetensors_bytes(folder: Path) -> int | None:
    """The tensor bytes of the checkpoint: the index's total_size, else each file's header summed."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            total = json.loads(index.read_text()).get("metadata", {}).get("total_size")
        except (OSError, ValueError, AttributeError):
            total = None
        if isinstance(total, int | float) and total > 0:
            return int(total)
    files = sorted(folder.glob("*.safetensors"))
    return sum(_header_bytes(f) for f in files) if files else None


def _header_bytes(path: Path) -> int:
    """One safetensors file's tensor bytes, from its header (8-byte length, then JSON of data offsets)."""
    try:
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            if length > 100 * 2**20:
                raise ValueError("header over 100 MiB")
            header = json.loads(f.read(length))
        return sum(t["data_offsets"][1] - t["data_offsets"][0] for k, t in header.items() if k != "__metadata__")
    except (OSError, ValueError, KeyError, TypeError, struct.error) as e:
        raise HfError(f"{path}: not a safetensors file ({e})") from None
