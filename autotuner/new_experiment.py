"""`autotuner init`: the facts gathered (the model file's header, this machine or the one planned for,
the traffic file's lengths), config/scaffold.py's rules applied, and the two files written.

Nothing is written when a fact rules the model out or a file already exists (unless `force`).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import replace
from pathlib import Path
from typing import Literal

from autotuner.bench.metrics import percentile
from autotuner.config import scaffold_gpu
from autotuner.config._base import ConfigError
from autotuner.config.scaffold import SYNTHETIC, InitError, Machine, Scaffold, Traffic, llamacpp
from autotuner.config.scaffold_gpu import GPU_SYNTHETIC
from autotuner.models.gguf import GgufError, GgufFacts, read_gguf
from autotuner.models.hf import HfError, HfFacts, read_hf
from autotuner.workloads.dataset import read_dataset
from autotuner.workloads.errors import WorkloadFileError
from autotuner.workloads.trace import BLOCK_SIZE, Trace, read_trace

# GPUs one may plan for without having them (--gpus N --gpu-type NAME): memory per GPU in GiB as NVML
# reports it, and how a server's GPUs of that kind talk (SXM boards: NVLink; PCIe cards: PCIe).
KNOWN_GPUS = {"a100-40gb": (39.4, "nvlink"), "a100-80gb": (79.3, "nvlink"), "h100": (79.6, "nvlink"),
              "h200": (139.8, "nvlink"), "b200": (179.1, "nvlink"), "l4": (22.5, "pcie"), "l40s": (44.7, "pcie"),
              "rtx-4090": (23.6, "pcie"), "rtx-5090": (31.4, "pcie"), "rtx-pro-6000": (95.6, "pcie")}
CHARS_PER_TOKEN = 4  # a text's length in tokens before any tokenizer is at hand: an estimate, said so
ENGINES = ("llamacpp", "vllm", "sglang")


def write(engine: str, model: Path, *, name: str | None = None, experiment: Path | None = None,
          gpus: int | None = None, gpu_type: str | None = None, workload: Path | None = None,
          ttft_ms_p99: int | None = None, force: bool = False) -> tuple[Path, Path, Scaffold]:
    """Write the experiment and its search space; (experiment file, space file, what was decided).
    ConfigError (one line) for an input that is wrong or rules every config out."""
    if engine not in ENGINES:
        raise ConfigError(f"--engine {engine}: init knows {', '.join(ENGINES)}")
    if ttft_ms_p99 is not None and ttft_ms_p99 <= 0:
        raise ConfigError(f"--ttft-p99-ms {ttft_ms_p99}: the time to first token your users accept, in ms (> 0)")
    on_gpus = engine != "llamacpp"
    try:
        if on_gpus:
            if not model.is_dir():
                raise ConfigError(f"--model {model}: not a folder ({engine} serves a Hugging Face model folder "
                                  "with its config.json)")
            facts: HfFacts | GgufFacts = read_hf(model)
        else:
            if not model.is_file():
                raise ConfigError(f"--model {model}: no such file (llama.cpp serves one GGUF file)")
            facts = read_gguf(model)
    except (GgufError, HfError) as e:
        raise ConfigError(f"--model {e}") from None
    name = name or name_for(model)
    exp_path = experiment or Path("experiments") / f"{name}.yaml"
    space_path = exp_path.parent.parent / "search_spaces" / f"{name}.yaml" if experiment is None \
        else exp_path.with_name(f"{exp_path.stem}-space.yaml")
    existing = [p for p in (exp_path, space_path) if p.exists()]
    if existing and not force:
        raise ConfigError(f"{existing[0]} exists: pass --force to replace it, or --name for another")
    here = exp_path.parent.resolve()
    machine = _machine(gpus, gpu_type)
    if on_gpus and not machine.gpus:
        raise ConfigError(f"--engine {engine}: this machine shows no GPU; to plan for GPUs it lacks, pass "
                          f"--gpus N --gpu-type NAME (one of {', '.join(sorted(KNOWN_GPUS))})")
    traffic = (GPU_SYNTHETIC if on_gpus else SYNTHETIC) if workload is None else _traffic(workload, here)
    traffic = replace(traffic, ttft_ms_p99=ttft_ms_p99)
    model_rel, space_rel = _relative(model, here), _relative(space_path, here)
    try:
        if isinstance(facts, HfFacts):
            make = scaffold_gpu.vllm if engine == "vllm" else scaffold_gpu.sglang
            scaffold = make(name, model_rel, space_rel, facts, machine, traffic, image=_image(engine))
        else:
            scaffold = llamacpp(name, model_rel, space_rel, facts, machine, traffic)
    except InitError as e:
        raise ConfigError(f"--model {model}: {e}") from None
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
        gib, link = KNOWN_GPUS[gpu_type.lower()]
        return Machine(cpus, memory, gpus or 1, gib, gpu_type.lower(), link)
    if gpus is None:
        gpus = len(seen)
    if gpus == 0:
        return Machine(cpus, memory)
    if len(seen) < gpus:
        raise ConfigError(f"--gpus {gpus}: this machine shows {len(seen)}; to plan for another, add --gpu-type "
                          f"(one of {', '.join(sorted(KNOWN_GPUS))})")
    return Machine(cpus, memory, gpus, min(float(g.get("memory_gib") or 0.0) for g in seen[:gpus]),
                   _known_name(str(seen[0].get("name") or "GPU")), interconnect(fp.get("gpu_topology")))


def interconnect(topology: str | None) -> str | None:
    """"nvlink" when `nvidia-smi topo -m` links every pair of GPUs by NVLink, "pcie" when it shows the
    matrix otherwise, None when it shows none."""
    from autotuner.node.gpu_topology import parse_topo_matrix

    topo = parse_topo_matrix(topology or "")
    if topo is None:
        return None
    return "nvlink" if topo.links and all(link.startswith("NV") for link in topo.links.values()) else "pcie"


def _known_name(name: str) -> str:
    """NVML's name ("NVIDIA H100 80GB HBM3") as the table's ("h100"), where one matches word for word
    ("NVIDIA L40" is not an "l4"); else as it is."""
    words = set(name.lower().replace("-", " ").split())
    return next((k for k in sorted(KNOWN_GPUS, key=len, reverse=True) if set(k.split("-")) <= words), name)


def _image(engine: str) -> str:
    from autotuner.engines import sglang, vllm

    return vllm.DEFAULT_IMAGE if engine == "vllm" else sglang.DEFAULT_IMAGE


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
    return math.ceil(percentile(sorted(values), 99)) if values else 1


def name_for(model: Path) -> str:
    """The study's name for a model file or folder: its name, in characters a path and a URL keep."""
    base = model.name if model.is_dir() else model.stem  # a folder's dots are its name's (llama-3.1-8b)
    stem = "".join(c if c.isalnum() or c in "._-" else "-" for c in base).strip("-._")
    return stem or "model"


def _relative(path: Path, here: Path) -> str:
    return os.path.relpath(path.resolve(), here)
