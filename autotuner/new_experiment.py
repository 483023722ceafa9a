"""`autotuner init`: the facts gathered (the model file's header, this machine or the one planned for,
the traffic file's lengths), config/scaffold.py's rules applied, and the two files written.

Nothing is written when a fact rules the model out or a file already exists (unless `force`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal

from autotuner.config._base import ConfigError
from autotuner.config.scaffold import SYNTHETIC, InitError, Machine, Scaffold, Traffic, llamacpp
from autotuner.models.gguf import GgufError, read_gguf
from autotuner.workloads.dataset import read_dataset
from autotuner.workloads.errors import WorkloadFileError
from autotuner.workloads.trace import BLOCK_SIZE, Trace, read_trace

# GPUs one may plan for without having them (--gpus N --gpu-type NAME): memory per GPU in GiB
KNOWN_GPUS = {"a100-40gb": 40.0, "a100-80gb": 80.0, "h100": 79.6, "h200": 139.8, "b200": 179.1, "l4": 22.5,
              "l40s": 44.7, "rtx-4090": 23.6, "rtx-5090": 31.4, "rtx-pro-6000": 95.6}
CHARS_PER_TOKEN = 4  # a text's length in tokens before any tokenizer is at hand: an estimate, said so
ENGINES = ("llamacpp",)


def write(engine: str, model: Path, *, name: str | None = None, experiment: Path | None = None,
          gpus: int | None = None, gpu_type: str | None = None, workload: Path | None = None,
          force: bool = False) -> tuple[Path, Path, Scaffold]:
    """Write the experiment and its search space; (experiment file, space file, what was decided).
    ConfigError (one line) for an input that is wrong or rules every config out."""
    if engine not in ENGINES:
        raise ConfigError(f"--engine {engine}: init sizes llama.cpp (a GGUF file) for now; for vllm and sglang "
                          "start from experiments/vllm-cpu.yaml or experiments/glm5-nvfp4-8x-rtx-pro-6000.yaml")
    if not model.is_file():
        raise ConfigError(f"--model {model}: no such file (llama.cpp serves one GGUF file)")
    try:
        facts = read_gguf(model)
    except GgufError as e:
        raise ConfigError(f"--model {e}") from None
    name = name or _name(model)
    exp_path = experiment or Path("experiments") / f"{name}.yaml"
    space_path = exp_path.parent.parent / "search_spaces" / f"{name}.yaml" if experiment is None \
        else exp_path.with_name(f"{exp_path.stem}-space.yaml")
    existing = [p for p in (exp_path, space_path) if p.exists()]
    if existing and not force:
        raise ConfigError(f"{existing[0]} exists: pass --force to replace it, or --name for another")
    here = exp_path.parent.resolve()
    traffic = SYNTHETIC if workload is None else _traffic(workload, here)
    try:
        scaffold = llamacpp(name, _relative(model, here), _relative(space_path, here), facts,
                            _machine(gpus, gpu_type), traffic)
    except InitError as e:
        raise ConfigError(str(e)) from None
    exp_path.parent.mkdir(parents=True, exist_ok=True)
    space_path.parent.mkdir(parents=True, exist_ok=True)
    exp_path.write_text(scaffold.experiment)
    space_path.write_text(scaffold.space)
    return exp_path, space_path, scaffold


def _machine(gpus: int | None, gpu_type: str | None) -> Machine:
    from autotuner.node import host

    fp = host.fingerprint()
    cpus = int(fp.get("cpus_usable") or os.cpu_count() or 1)
    memory = float(fp.get("memory_gib") or 0.0)
    seen = fp.get("gpus") or []
    if gpu_type is not None:
        if gpu_type.lower() not in KNOWN_GPUS:
            raise ConfigError(f"--gpu-type {gpu_type}: known are {', '.join(sorted(KNOWN_GPUS))}")
        return Machine(cpus, memory, gpus or 1, KNOWN_GPUS[gpu_type.lower()], gpu_type.lower())
    if gpus is None:
        gpus = len(seen)
    if gpus == 0:
        return Machine(cpus, memory)
    if len(seen) < gpus:
        raise ConfigError(f"--gpus {gpus}: this machine shows {len(seen)}; to plan for another, add --gpu-type "
                          f"(one of {', '.join(sorted(KNOWN_GPUS))})")
    return Machine(cpus, memory, gpus, min(float(g.get("memory_gib") or 0.0) for g in seen[:gpus]),
                   str(seen[0].get("name") or "GPU"))


def _traffic(path: Path, here: Path) -> Traffic:
    """The lengths a request of the file needs (p99), and the workload section that sends the file."""
    if not path.is_file():
        raise ConfigError(f"--workload {path}: no such file")
    rel = _relative(path, here)
    try:
        if _is_trace(path):
            trace = _read_trace(path)
            blocks = {} if trace.block_size == BLOCK_SIZE else {"block_size": trace.block_size}
            return Traffic(_p99([r.input_length for r in trace.requests]),
                           _p99([r.output_length for r in trace.requests]),
                           {"trace": {"path": rel, **blocks}, "warmup_requests": 4},
                           f"the trace {path.name}: {len(trace.requests)} requests over {trace.span_s:.0f} s, "
                           f"lengths as recorded, {trace.block_size}-token blocks", shares_prefixes=True,
                           load={"speedup": [1, 2]})
        fmt: Literal["sharegpt", "jsonl"] = ("sharegpt" if path.suffix == ".json"
                                             or _first_line_has(path, "conversations") else "jsonl")
        data = read_dataset(path, fmt)
    except WorkloadFileError as e:
        raise ConfigError(str(e)) from None
    inputs = [len(e.prompt) // CHARS_PER_TOKEN + 1 for e in data.entries]
    outputs = [e.output_tokens or (len(e.answer) // CHARS_PER_TOKEN + 1 if e.answer else 128)
               for e in data.entries]
    return Traffic(_p99(inputs), _p99(outputs),
                   {"endpoint": "chat" if fmt == "sharegpt" else "completions",
                    "dataset": {"path": rel, "format": fmt}, "num_prompts": 64, "warmup_requests": 4},
                   f"the {fmt} dataset {path.name}: {len(data.entries)} prompts, lengths estimated at "
                   f"{CHARS_PER_TOKEN} characters a token")


def _read_trace(path: Path) -> Trace:
    """The trace at the largest block size its requests fill (Mooncake's is 512 tokens; others use less)."""
    for size in (BLOCK_SIZE, 256, 128, 64, 32, 16):
        try:
            return read_trace(path, block_size=size)
        except WorkloadFileError as e:
            if "blocks of" not in str(e) or size == 16:
                raise
    raise AssertionError("unreachable")


def _is_trace(path: Path) -> bool:
    return path.suffix == ".jsonl" and _first_line_has(path, "hash_ids")


def _first_line_has(path: Path, key: str) -> bool:
    with open(path, encoding="utf-8", errors="replace") as f:
        line = f.readline()
    try:
        return isinstance(obj := json.loads(line), dict) and key in obj
    except ValueError:
        return False


def _p99(values: list[int]) -> int:
    ordered = sorted(values) or [1]
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def _name(model: Path) -> str:
    stem = "".join(c if c.isalnum() or c in "._-" else "-" for c in model.stem).strip("-._")
    return stem or "model"


def _relative(path: Path, here: Path) -> str:
    return os.path.relpath(path.resolve(), here)
