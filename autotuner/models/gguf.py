"""A GGUF file's facts, read from its header: architecture, layers, context, heads, experts, the
quantization, the parameter count and the weight bytes (summed over its tensors, not guessed).

Reads the header only (metadata and tensor table; the weights are never read), with no dependency: the
format is small and stable (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md, versions 2 and 3).
"""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

# value types -> struct format (8: string, 9: array are read apart)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
# llama.cpp's `general.file_type` (llama_ftype): the weights' main quantization
FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
              11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M",
              18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S",
              25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M",
              32: "BF16", 36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4"}


class GgufError(ValueError):
    """Not a GGUF file, or one cut short."""


@dataclass(frozen=True)
class GgufFacts:
    architecture: str
    layers: int
    context_length: int  # the context the model was trained for
    embedding: int
    heads: int
    kv_heads: int
    experts: int  # 0: dense
    quantization: str
    parameters: int  # summed over the tensor table
    weight_bytes: int  # the tensor data: what the weights take in memory, before any KV cache

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of one token over every layer at f16 (llama.cpp's default cache type)."""
        head_dim = self.embedding // max(self.heads, 1)
        return 2 * self.layers * self.kv_heads * head_dim * 2

    def describe(self) -> str:
        moe = f", {self.experts} experts" if self.experts else ""
        params = f"{self.parameters / 1e9:.2f}B" if self.parameters >= 1e9 else f"{self.parameters / 1e6:.1f}M"
        size = (f"{self.weight_bytes / 2**30:.2f} GiB" if self.weight_bytes >= 2**30
                else f"{self.weight_bytes / 2**20:.0f} MiB")
        return (f"{self.architecture}, {params} params at {self.quantization} ({size} of weights), {self.layers} "
                f"layers{moe}, trained context {self.context_length}")


def read_gguf(path: Path) -> GgufFacts:
    """The facts of the GGUF file at `path` (of the whole model, where it is a split's first file);
    GgufError when it is not one, or a split's file is missing."""
    meta, sizes, weight_bytes = _header(path)
    for other in _other_splits(path, meta):  # llama.cpp loads them with the first: their tensors count
        _, more, more_bytes = _header(other)
        sizes += more
        weight_bytes += more_bytes
    arch = str(meta.get("general.architecture", "unknown"))

    def fact(name: str, default: int = 0) -> int:
        value = meta.get(f"{arch}.{name}", default)
        return int(value[0] if isinstance(value, list) and value else value or default)

    heads = fact("attention.head_count", 1)
    file_type = meta.get("general.file_type")
    return GgufFacts(
        architecture=arch, layers=fact("block_count"), context_length=fact("context_length"),
        embedding=fact("embedding_length"), heads=heads, kv_heads=fact("attention.head_count_kv", heads),
        experts=fact("expert_count"),
        quantization=FILE_TYPES.get(int(file_type), f"type {file_type}") if file_type is not None else "unknown",
        parameters=sum(sizes), weight_bytes=weight_bytes)


def _header(path: Path) -> tuple[dict[str, Any], list[int], int]:
    """A file's metadata, the element count of each of its tensors, and its tensor data's bytes."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise GgufError(f"{path}: no such file") from None
    with f:
        if f.read(4) != b"GGUF":
            raise GgufError(f"{path}: not a GGUF file (no GGUF magic at its start)")
        version = _read(f, "<I")
        if version not in (2, 3):
            raise GgufError(f"{path}: GGUF version {version}; versions 2 and 3 are read")
        tensors, kvs = _read(f, "<Q"), _read(f, "<Q")
        meta = {_string(f): _value(f, _read(f, "<I")) for _ in range(kvs)}
        sizes = []
        for _ in range(tensors):
            _string(f)
            dims = [_read(f, "<Q") for _ in range(_read(f, "<I"))]
            _read(f, "<I"), _read(f, "<Q")  # type, offset
            sizes.append(math.prod(dims))
        align = int(meta.get("general.alignment", 32))
        data_start = -(-f.tell() // align) * align
    return meta, sizes, max(path.stat().st_size - data_start, 0)


def _other_splits(path: Path, meta: dict[str, Any]) -> list[Path]:
    """The files after the first of a model split by llama.cpp's gguf-split (`NAME-00001-of-00003.gguf`,
    `split.count` in its metadata); none for a whole model or a split's later file."""
    count, number = int(meta.get("split.count", 0) or 0), int(meta.get("split.no", 0) or 0)
    match = re.fullmatch(r"(.+)-(\d{5})-of-(\d{5})\.gguf", path.name)
    if count <= 1 or number != 0 or match is None:
        return []
    return [path.with_name(f"{match[1]}-{i:05d}-of-{count:05d}.gguf") for i in range(2, count + 1)]


def _read(f: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize(fmt)
    raw = f.read(size)
    if len(raw) != size:
        raise GgufError(f"{getattr(f, 'name', 'the file')}: cut short inside its header")
    return struct.unpack(fmt, raw)[0]


def _string(f: BinaryIO) -> str:
    n = _read(f, "<Q")
    raw = f.read(n)
    if len(raw) != n:
        raise GgufError(f"{getattr(f, 'name', 'the file')}: cut short inside its header")
    return raw.decode("utf-8", errors="replace")


def _value(f: BinaryIO, kind: int) -> Any:
    if kind == _STRING:
        return _string(f)
    if kind == _ARRAY:
        item, count = _read(f, "<I"), _read(f, "<Q")
        if count > 64:  # a long array (the vocabulary, its scores and merges): passed over, not kept
            if item in _SCALARS:
                f.seek(struct.calcsize(_SCALARS[item]) * count, 1)
            else:
                for _ in range(count):
                    _value(f, item)
            return []
        return [_value(f, item) for _ in range(count)]
    if kind not in _SCALARS:
        raise GgufError(f"{getattr(f, 'name', 'the file')}: unknown metadata value type {kind}")
    return _read(f, _SCALARS[kind])
