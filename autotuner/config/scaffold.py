"""`autotuner init`'s rules: an experiment and a search space sized from facts (the model's, the machine's,
the traffic's), each decision said in a line. Pure: the facts are handed in, YAML text comes out.

llama.cpp (a GGUF file) only, for now. The rules, in order:
- Where the weights live: the GPUs' memory when there are GPUs (all layers offloaded, `-ngl 999`), else
  RAM; `RUNTIME_SHARE` of it and `RUNTIME_GIB` are left to the runtime (compute buffers, the OS). Weights
  that do not fit are an InitError: no config of this engine could serve the model there.
- What a request needs: its prompt and output at the traffic's p99, plus `SLACK_TOKENS`; a slot holds one.
- Slots: decoded together; a CPU gains little past a few per core (`SLOTS_PER_CORE`), a GPU up to
  `MAX_SLOTS`; never more than the KV budget holds at f16 (q8_0 holds twice as many).
- Context (`-c`, split across slots unless unified): powers of two from a quarter of the slots' need to
  all of it, within the KV budget, at most `CONTEXT_CHOICES` of them.
- Load: two levels, a quarter of the slots and all of them (the sweep ends early once throughput
  stops rising); threads from 1 to the usable cores on a CPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from autotuner.config._base import flow_yaml
from autotuner.models.gguf import GgufFacts
from autotuner.models.hf import GIB

RUNTIME_SHARE = 0.10  # of the memory, left to the runtime
RUNTIME_GIB = 1.0
SLACK_TOKENS = 16  # a chat template's or BOS's few tokens beyond the traffic's own
SLOTS_PER_CORE = 4
MIN_SLOTS, MAX_SLOTS = 4, 64
CONTEXT_CHOICES = 4
GUESSED_TTFT_MS = 5000  # the SLO when the user gives none: a chat user's patience, not this machine's speed


class InitError(ValueError):
    """The facts rule out every config: one line, what does not fit and where."""


@dataclass(frozen=True)
class Machine:
    cpus: int
    memory_gib: float
    gpus: int = 0
    gpu_memory_gib: float | None = None  # each GPU's
    gpu_name: str | None = None
    interconnect: str | None = None  # between the GPUs: "nvlink" or "pcie" (None: unknown, read as PCIe)

    def describe(self) -> str:
        if self.gpus:
            link = f", {'NVLink' if self.interconnect == 'nvlink' else 'PCIe'}" if self.gpus > 1 else ""
            return f"{self.gpus} x {self.gpu_name or 'GPU'} ({self.gpu_memory_gib:g} GiB each{link})"
        return f"{self.cpus} CPU cores, {self.memory_gib:.1f} GiB of memory, no GPU"


@dataclass(frozen=True)
class Traffic:
    """The lengths a request of the workload needs, and the experiment's `workload:` section for it."""

    input_p99: int
    output_p99: int
    workload: dict = field(default_factory=dict)
    what: str = ""
    shares_prefixes: bool = False  # requests repeat earlier prompts' starts (a trace's blocks, sessions)
    load: dict | None = None  # the load section when the traffic brings its own kind (a trace: speedup)
    ttft_ms_p99: int | None = None  # what its users accept (--ttft-p99-ms); None: the engine's guess

    @property
    def need(self) -> int:
        """The context a request takes at most: prompt and output at p99, and a template's few tokens."""
        return self.input_p99 + self.output_p99 + SLACK_TOKENS


SYNTHETIC = Traffic(256, 128, {"endpoint": "completions", "num_prompts": 64, "input_len": 256, "output_len": 128,
                               "warmup_requests": 4},
                    "synthetic: prompts of 256 tokens, outputs of 128 (replace with your traffic: --workload FILE)")


@dataclass(frozen=True)
class Scaffold:
    experiment: str  # the experiment file's text
    space: str  # the search space file's text
    decisions: list[str]  # what was decided and why, a line each


def llamacpp(name: str, model: str, space_file: str, facts: GgufFacts, machine: Machine,
             traffic: Traffic = SYNTHETIC) -> Scaffold:
    """The experiment and search space for llama-server serving `facts`' model on `machine`."""
    on_gpu = machine.gpus > 0
    where = (f"{machine.gpus} GPU(s) of {machine.gpu_memory_gib:g} GiB" if on_gpu
             else f"{machine.memory_gib:.1f} GiB of memory")
    memory = (machine.gpus * (machine.gpu_memory_gib or 0.0) if on_gpu else machine.memory_gib) * GIB
    usable = memory * (1 - RUNTIME_SHARE) - RUNTIME_GIB * GIB
    weights = facts.weight_bytes
    if weights > usable:
        raise InitError(f"its weights take {weights / GIB:.1f} GiB; {where} hold {usable / GIB:.1f} GiB "
                        f"after the runtime's share: no llama-server config can serve it here")
    need = traffic.need
    if facts.context_length and need > facts.context_length:
        raise InitError(f"a request of the traffic needs {need} tokens of context (p99 prompt "
                        f"{traffic.input_p99} + output {traffic.output_p99}); the model was trained for "
                        f"{facts.context_length}")
    kv_tokens = int((usable - weights) // max(facts.kv_bytes_per_token, 1))
    wanted = MAX_SLOTS if on_gpu else max(MIN_SLOTS, min(MAX_SLOTS, SLOTS_PER_CORE * machine.cpus))
    fits = max(1, kv_tokens // need)
    slots = max(1, min(wanted, 2 * fits))  # q8_0 holds twice the f16 tokens; f16 configs past it are refused
    decisions = [
        f"model: {facts.describe()}",
        f"machine: {machine.describe()}; the weights go to {'the GPUs (-ngl 999)' if on_gpu else 'RAM'}, "
        f"{(usable - weights) / GIB:.1f} GiB left for the KV cache ({kv_tokens:,} tokens at f16)",
        f"traffic: {traffic.what}; a request needs up to {need} tokens of context",
        f"slots (-np) 1 to {slots}: " + (f"a GPU batches up to {MAX_SLOTS} here" if on_gpu and slots == wanted
                                         else f"{SLOTS_PER_CORE} a core on {machine.cpus} cores"
                                         if slots == wanted else f"the KV budget holds {fits} requests at f16, "
                                         f"{2 * fits} at q8_0"),
    ]
    low_ctx = pow2(max(need, need * slots // 4))
    high_ctx = min(pow2(need * slots), floor_pow2(2 * kv_tokens))
    contexts = [c for c in (2**k for k in range(8, 24)) if low_ctx <= c <= high_ctx][-CONTEXT_CHOICES:] or [low_ctx]
    decisions.append(f"context (-c) {', '.join(map(str, contexts))}: from a quarter of the slots' need to all "
                     "of it, within the KV budget")
    levels = sorted({max(1, slots // 4), slots})
    load = traffic.load or {"max_concurrency": levels}
    decisions.append(f"load: concurrency {', '.join(map(str, levels))} (a quarter of the slots, then all)"
                     if traffic.load is None else f"load: {flow_yaml(traffic.load)} (the traffic's own pace)")
    ttft_ms, slo_comment = slo(traffic, GUESSED_TTFT_MS, decisions)
    params: dict[str, dict] = {
        "parallel": {"type": "int", "low": 1, "high": slots, "log": True},
    }
    if not on_gpu and machine.cpus > 1:
        params["threads"] = {"type": "int", "low": 1, "high": machine.cpus}
        decisions.append(f"threads (-t) 1 to {machine.cpus}: the usable cores")
    params.update({
        "batch_size": {"type": "categorical", "choices": [128, 256, 512, 1024, 2048]},
        "ubatch_size": {"type": "categorical", "choices": [32, 64, 128, 256, 512]},
        "cont_batching": {"type": "bool"},
        "flash_attn": {"type": "categorical", "choices": ["on", "off", "auto"]},
        "cache_type_k": {"type": "categorical", "choices": ["f16", "q8_0"]},
        "cache_type_v": {"type": "categorical", "choices": ["f16", "q8_0"], "condition": "flash_attn != 'off'"},
        "ctx_size": {"type": "categorical", "choices": contexts},
        "kv_unified": {"type": "bool"},
    })
    if traffic.shares_prefixes:
        params["cache_reuse"] = {"type": "categorical", "choices": [0, 256]}
        decisions.append("cache reuse (--cache-reuse) 0 or 256: the traffic repeats earlier prompts' starts")
    space = {"engine": "llamacpp", "params": params}
    experiment = {
        "name": name, "engine": "llamacpp", "launcher": "process",
        "model": {"path": model, "name": name},
        "hardware": {"gpus": machine.gpus},
        "search_space": space_file,
        "workload": traffic.workload,
        "load": load,
        "objective": {"metric": "output_tok_per_s", "direction": "maximize", "slo": {"ttft_ms_p99": ttft_ms}},
        "study": {"storage": "sqlite:///autotuner.db", "sampler": "tpe", "pruner": "ceiling", "seed": 0},
        "stop": {"patience": 8},
        "confirm": {"top_k": 2, "repeats": 3},
        "startup_timeout_s": int(60 + 30 * weights / GIB),
        **({"engine_args": ["-ngl", "999"]} if on_gpu else {}),
    }
    comments = {
        "workload:": "# what each load level sends (docs/traffic.md: datasets, traces, sessions)",
        "objective:": slo_comment,
        "startup_timeout_s:": "# loading the weights: 60 s and 30 s a GiB",
    }
    return render(experiment, space, decisions, comments, "llamacpp")


def slo(traffic: Traffic, guess: int, decisions: list[str], baseline: bool = True) -> tuple[int, str]:
    """The TTFT p99 limit (the user's, else `guess`), its decision line added, and the objective's comment."""
    if traffic.ttft_ms_p99 is not None:
        decisions.append(f"SLO: TTFT p99 {traffic.ttft_ms_p99} ms, what your users accept (--ttft-p99-ms)")
        return traffic.ttft_ms_p99, "# the SLO: the TTFT your users accept (--ttft-p99-ms)"
    decisions.append(f"SLO: TTFT p99 {guess} ms, a guess (--ttft-p99-ms sets what your users accept"
                     + ("; the baseline says at which loads the defaults miss it)" if baseline else ")"))
    return guess, "# the SLO is a guess: set the TTFT your users accept"


def render(experiment: dict, space: dict, decisions: list[str], comments: dict[str, str], engine: str) -> Scaffold:
    """The two files' text: the experiment headed by the decisions, its sections commented."""
    head = ("# Written by `autotuner init` from the facts below; edit freely (docs/configuration.md has every\n"
            "# field). Paths are relative to this file.\n" + "".join(f"#   {line}\n" for line in decisions))
    return Scaffold(head + _yaml(experiment, comments),
                    f"# Written by `autotuner init`: the {engine} adapter's params, ranges from the facts in the\n"
                    "# experiment's header.\n" + _yaml(space, {}), decisions)


def _yaml(data: dict, comments: dict[str, str]) -> str:
    """Block style at the top, each value on one line where it fits (a section's fields under it else)."""
    lines = []
    for key, value in data.items():
        lines += [comment for prefix, comment in comments.items() if f"{key}:" == prefix]
        line = f"{key}: {flow_yaml(value)}"
        if len(line) <= 110 or not isinstance(value, dict):
            lines.append(line)
        else:
            lines += [f"{key}:", *(f"  {k}: {flow_yaml(v)}" for k, v in value.items())]
    return "\n".join(lines) + "\n"


def pow2(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))


def floor_pow2(n: int) -> int:
    return 1 << max(0, int(math.log2(max(n, 1))))
