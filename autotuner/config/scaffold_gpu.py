"""`autotuner init`'s rules for vLLM and SGLang on GPUs: which parallel layouts hold the model, how many
requests their KV cache holds, and the search space and experiment that follow. Pure: the facts are handed
in (the model folder's, the GPUs', the traffic's), YAML text and a line per decision come out.

The rules, in order:
- Memory a GPU gives the engine: `UTILIZATION` of it, less `ACTIVATIONS_GIB` (activations, CUDA graphs,
  communication buffers).
- A layout TPxPPxDP uses every GPU. Its weights a GPU: all of them over TP x PP; with expert parallel
  (vLLM: EP over TP x DP) the routed experts over TP x PP x DP and the rest over TP x PP. Its KV cache a
  token a GPU: GQA's KV heads split over TP (at least one a rank), MLA's latent whole on every TP rank,
  the layers over PP. A layout fits when the memory left holds `MIN_REQUESTS` of the traffic's requests.
- PP only when the weights need more than one GPU (else it only adds latency), and at most `MAX_PP`
  stages; DP layouts for MoE models may need expert parallel (a constraint says so).
- Batch limits: powers of two up to what the best layout's KV cache holds at FP8 (twice the 16-bit
  count), at most `MAX_SEQS`; load: a quarter of the largest, then the largest.
- The engine's defaults (TP1 on one GPU) are the baseline only where one GPU holds the model; else the
  study starts from the layout that leaves most room for the KV cache.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from autotuner.config.scaffold import GIB, InitError, Machine, Scaffold, Traffic, floor_pow2, pow2, render
from autotuner.models.hf import HfFacts

UTILIZATION = 0.90
ACTIVATIONS_GIB = 4.0
MIN_REQUESTS = 4
MAX_PP = 4
MAX_SEQS = 1024
MIN_SEQS = 16
SECONDS_PER_GIB = 6  # loading and sharding the weights, beyond `STARTUP_S` (compile, CUDA graphs)
STARTUP_S = 600
# SM12x (RTX PRO 6000, RTX 5090): vLLM's b12x NVFP4 MoE kernels; Hopper: FlashAttention 3 in SGLang.
BLACKWELL_SM12X = ("rtx-pro-6000", "rtx-5090")
HOPPER = ("h100", "h200")

GPU_SYNTHETIC = Traffic(1024, 256, {"endpoint": "completions", "input_len": 1024, "output_len": 256},
                        "synthetic: prompts of 1,024 tokens, outputs of 256 (replace with your traffic: "
                        "--workload FILE)")


@dataclass(frozen=True)
class Layout:
    tp: int
    pp: int = 1
    dp: int = 1

    @property
    def name(self) -> str:
        return f"TP{self.tp}" + (f"xPP{self.pp}" if self.pp > 1 else "") + (f"xDP{self.dp}" if self.dp > 1 else "")


@dataclass(frozen=True)
class Fit:
    """What a layout leaves a GPU: its weights, and the requests of the traffic its KV cache holds."""

    layout: Layout
    ep: bool
    weights_gib: float  # a GPU's
    requests: int  # a replica holds at 16-bit KV

    @property
    def fits(self) -> bool:
        return self.requests >= MIN_REQUESTS


def fit(facts: HfFacts, gpu_gib: float, layout: Layout, need: int, ep: bool = False) -> Fit:
    """`layout`'s weights a GPU and how many requests of `need` tokens a replica's KV cache holds."""
    experts = facts.expert_weight_bytes if ep else 0
    weights = (facts.weight_bytes - experts) / (layout.tp * layout.pp) + experts / (layout.tp * layout.pp * layout.dp)
    share = 1.0 if facts.mla else max(1, facts.kv_heads // layout.tp) / facts.kv_heads
    kv_per_token = facts.kv_bytes_per_token() * share / layout.pp
    free = gpu_gib * GIB * UTILIZATION - ACTIVATIONS_GIB * GIB - weights
    return Fit(layout, ep, weights / GIB, max(0, int(free / kv_per_token // need)))


def layouts(gpus: int, facts: HfFacts) -> list[Layout]:
    """TP x PP or TP x DP over all `gpus`: TP a power of two that divides the attention heads."""
    out = []
    tp = gpus
    while tp >= 1:
        if gpus % tp == 0 and facts.heads % tp == 0:
            rest = gpus // tp
            out.append(Layout(tp) if rest == 1 else Layout(tp, pp=rest))
            if rest > 1:
                out.append(Layout(tp, dp=rest))
        tp //= 2
    return [lay for lay in out if lay.pp <= min(MAX_PP, facts.layers)]


@dataclass(frozen=True)
class Plan:
    """The layouts that hold the model, those that need EP, and what was decided, a line each."""

    fits: list[Fit]
    needs_ep: list[str]
    baseline: bool  # one GPU (the engines' default) holds the model
    requests: int  # the most a replica holds (16-bit KV), over the layouts that fit
    decisions: list[str]


def plan(facts: HfFacts, machine: Machine, traffic: Traffic, ep_spreads: bool = True) -> Plan:
    """The layouts of `machine`'s GPUs that hold the model with room for the traffic's requests.
    `ep_spreads`: expert parallel spreads the experts over DP replicas too (vLLM); SGLang's replicas
    (dp_size) each hold the whole model."""
    gpu_gib = machine.gpu_memory_gib or 0.0
    need = traffic.need
    if facts.context_length and need > facts.context_length:
        raise InitError(f"a request of the traffic needs {need} tokens of context; the model was trained "
                        f"for {facts.context_length}")
    one = fit(facts, gpu_gib, Layout(1), need)
    decisions = [f"model: {facts.describe()}", f"machine: {machine.describe()}",
                 f"traffic: {traffic.what}; a request needs up to {need} tokens of context"]
    fits, needs_ep = [], []
    for layout in layouts(machine.gpus, facts):
        if layout.pp > 1 and one.fits:
            continue
        plain = fit(facts, gpu_gib, layout, need)
        ep = fit(facts, gpu_gib, layout, need, ep=True) if facts.experts and ep_spreads else plain
        if plain.fits:
            fits.append(plain)
        elif ep.fits:
            fits.append(ep)
            needs_ep.append(layout.name)
        else:
            usable = gpu_gib * UTILIZATION - ACTIVATIONS_GIB
            why = (f"more than the {usable:.0f} GiB a {gpu_gib:g} GiB GPU gives" if ep.weights_gib > usable
                   else f"leave no room for {MIN_REQUESTS} requests' KV cache")
            decisions.append(f"{layout.name} excluded: {ep.weights_gib:.0f} GiB of weights a GPU"
                             f"{' even with expert parallel' if facts.experts and ep_spreads else ''}, {why}")
    if not fits:
        least = math.ceil(facts.weight_bytes / (gpu_gib * GIB * UTILIZATION - ACTIVATIONS_GIB * GIB))
        raise InitError(f"{facts.weight_bytes / GIB:.0f} GiB of weights "
                        f"({facts.quantization or facts.dtype}) need at least {least} GPUs of {gpu_gib:g} GiB; "
                        f"planned for {machine.gpus}")
    if not one.fits:
        decisions.append(f"TP1 (the engine's default) excluded: {one.weights_gib:.0f} GiB of weights on one "
                         f"{gpu_gib:g} GiB GPU: the study has no baseline and starts from {_first(fits).layout.name}")
    elif machine.gpus > 1 and not any(f.layout.pp > 1 for f in fits):
        decisions.append("PP layouts left out: one GPU holds the weights, so pipeline stages would only add latency")
    if needs_ep:
        decisions.append(f"{', '.join(needs_ep)} only with expert parallel: the experts must spread over the "
                         "replicas to fit")
    decisions.append(f"layouts: {', '.join(f.layout.name for f in fits)}")
    return Plan(fits, needs_ep, one.fits, max(f.requests for f in fits), decisions)


def vllm(name: str, model: str, space_file: str, facts: HfFacts, machine: Machine,
         traffic: Traffic = GPU_SYNTHETIC, image: str = "") -> Scaffold:
    """The experiment and search space for vLLM serving the folder's model on `machine`'s GPUs."""
    p = plan(facts, machine, traffic)
    decisions, constraints = list(p.decisions), []
    params: dict[str, dict[str, Any]] = {}
    if machine.gpus > 1:
        params["parallel_layout"] = {"type": "categorical", "choices": [f.layout.name for f in p.fits]}
    if facts.experts:
        params["enable_expert_parallel"] = {"type": "bool"}
        if p.needs_ep:
            names = ", ".join(f'"{n}"' for n in p.needs_ep)
            constraints.append(f"parallel_layout not in [{names}] or enable_expert_parallel")
        backends = ["allgather_reducescatter"] + (["deepep_low_latency", "deepep_high_throughput"]
                                                  if machine.interconnect == "nvlink" else [])
        if len(backends) > 1:
            params["all2all_backend"] = {"type": "categorical", "choices": backends,
                                         "condition": "enable_expert_parallel"}
        else:
            decisions.append("all-to-all: allgather_reducescatter only (DeepEP is built for NVLink; this box "
                             "shows none)")
        params["enable_eplb"] = {"type": "bool", "condition": "enable_expert_parallel"}
        params["moe_backend"] = {"type": "categorical", "choices": _vllm_moe_backends(facts, machine)}
    if facts.mla and machine.gpus > 1:
        params["decode_context_parallel_size"] = {"type": "categorical",
                                                  "choices": [d for d in (1, 2, 4) if d <= machine.gpus]}
        decisions.append("decode context parallel 1, 2, 4: MLA's KV cache is otherwise whole on every TP rank")
    if facts.mtp_layers:
        params["mtp_draft_tokens"] = {"type": "categorical",
                                      "choices": [0, *(facts.mtp_layers * k for k in (1, 2, 3))]}
        decisions.append(f"MTP speculative decoding 0 to {3 * facts.mtp_layers} draft tokens: the model has "
                         f"{facts.mtp_layers} MTP layer(s)")
    seqs = _batch_choices(p.requests)
    params.update({
        "max_num_seqs": {"type": "categorical", "choices": seqs},
        "max_num_batched_tokens": {"type": "categorical", "choices": [2048, 4096, 8192, 16384, 32768]},
        "enable_chunked_prefill": {"type": "bool"},
        "gpu_memory_utilization": {"type": "float", "low": 0.80, "high": 0.95, "step": 0.05},
        "kv_cache_dtype": {"type": "categorical", "choices": ["auto", "fp8"]},
        "enable_prefix_caching": {"type": "bool"},
        "async_scheduling": {"type": "bool"},
        "cudagraph_mode": {"type": "categorical", "choices": ["auto", "FULL_DECODE_ONLY", "PIECEWISE"]},
    })
    if machine.gpus > 1:
        params.update(_collectives(machine, "disable_custom_all_reduce"))
    decisions.append(f"max_num_seqs {', '.join(map(str, seqs))}: the best layout's KV cache holds {p.requests} "
                     "requests at 16-bit, twice that at FP8")
    return _files("vllm", name, model, space_file, facts, machine, traffic, p, params, constraints, seqs,
                  decisions, image, first=_vllm_first(p, facts))


def sglang(name: str, model: str, space_file: str, facts: HfFacts, machine: Machine,
           traffic: Traffic = GPU_SYNTHETIC, image: str = "") -> Scaffold:
    """The experiment and search space for SGLang serving the folder's model on `machine`'s GPUs."""
    p = plan(facts, machine, traffic, ep_spreads=False)
    decisions, constraints = list(p.decisions), []
    params: dict[str, dict[str, Any]] = {}
    if machine.gpus > 1:
        # SGLang shards every weight over tp x pp (EP and DP attention split the work inside the TP group);
        # dp_size replicates: a layout's memory is the vLLM rule's without EP.
        tps = sorted({f.layout.tp for f in p.fits}, reverse=True)
        pps = sorted({f.layout.pp for f in p.fits})
        dps = sorted({f.layout.dp for f in p.fits})
        params["tp_size"] = {"type": "categorical", "choices": tps}
        if pps != [1]:
            params["pp_size"] = {"type": "categorical", "choices": pps}
        if dps != [1]:
            params["dp_size"] = {"type": "categorical", "choices": dps}
        sizes = " * ".join(k for k in ("tp_size", "pp_size", "dp_size") if k in params)
        if sizes != "tp_size":
            constraints.append(f"{sizes} == {machine.gpus}")
        if "pp_size" in params and "dp_size" in params:
            constraints.append("pp_size == 1 or dp_size == 1")
    if facts.experts and machine.gpus > 1:
        params["ep_size"] = {"type": "categorical", "choices": [e for e in (1, 2, 4, 8) if e <= machine.gpus]}
        if machine.interconnect == "nvlink":
            params["moe_a2a_backend"] = {"type": "categorical", "choices": ["none", "deepep"],
                                         "condition": "ep_size > 1"}
        params["attn_dp_size"] = {"type": "categorical", "choices": [d for d in (1, 2, 4, 8) if d <= machine.gpus]}
    if facts.experts:
        params["moe_runner_backend"] = {"type": "categorical",
                                        "choices": (["auto", "flashinfer_cutlass", "cutlass"]
                                                    if facts.quantization == "NVFP4" else ["auto", "triton"])}
    if facts.mtp_layers:
        params["speculative_algorithm"] = {"type": "categorical", "choices": ["none", "EAGLE"]}
        params["speculative_num_steps"] = {"type": "categorical", "choices": [1, 2, 3],
                                           "condition": "speculative_algorithm == 'EAGLE'"}
        params["speculative_eagle_topk"] = {"type": "categorical", "choices": [1],
                                            "condition": "speculative_algorithm == 'EAGLE'"}
        decisions.append(f"EAGLE speculative decoding, 1 to 3 steps: the model has {facts.mtp_layers} MTP layer(s)")
    seqs = _batch_choices(p.requests)
    backends = ["auto", "flashinfer", "triton"] + (["fa3"] if machine.gpu_name in HOPPER else [])
    params.update({
        "max_running_requests": {"type": "categorical", "choices": seqs},
        "chunked_prefill_size": {"type": "categorical", "choices": [4096, 8192, 16384]},
        "mem_fraction_static": {"type": "float", "low": 0.80, "high": 0.92, "step": 0.02},
        "cuda_graph_max_bs": {"type": "categorical", "choices": [b for b in seqs if b <= 512] or [seqs[0]]},
        "kv_cache_dtype": {"type": "categorical", "choices": ["auto", "fp8_e4m3"]},
        "attention_backend": {"type": "categorical", "choices": backends},
    })
    if machine.gpus > 1:
        params.update(_collectives(machine, None))
    decisions.append(f"max_running_requests {', '.join(map(str, seqs))}: the best layout's KV cache holds "
                     f"{p.requests} requests at 16-bit, twice that at FP8")
    first = None if p.baseline else {k: v for k, v in (("tp_size", _first(p.fits).layout.tp),
                                                        ("pp_size", _first(p.fits).layout.pp),
                                                        ("dp_size", _first(p.fits).layout.dp)) if k in params}
    return _files("sglang", name, model, space_file, facts, machine, traffic, p, params, constraints, seqs,
                  decisions, image, first=first)


def _files(engine: str, name: str, model: str, space_file: str, facts: HfFacts, machine: Machine,
           traffic: Traffic, p: Plan, params: dict, constraints: list[str], seqs: list[int], decisions: list[str],
           image: str, first: dict | None) -> Scaffold:
    levels = sorted({max(1, seqs[-1] // 4), seqs[-1]})
    load = traffic.load or {"max_concurrency": levels}
    decisions.append(f"load: concurrency {', '.join(map(str, levels))} (a quarter of the largest batch, then it)"
                     if traffic.load is None else "load: the traffic's own pace")
    context = min(pow2(traffic.need), facts.context_length or 2**30)
    decisions.append(f"context {context} (--max-model-len / --context-length): the traffic's longest request, "
                     "rounded up; the model's own would reserve KV for requests that never come")
    workload = {**traffic.workload, "num_prompts": max(256, 2 * levels[-1]), "duration_s": 300,
                "warmup_requests": min(64, levels[0])}
    space: dict = {"engine": engine, "params": params}
    if constraints:
        space["constraints"] = constraints
    docker: dict = {"image": image} if image else {}
    if machine.gpus > 1:
        docker.update({"gpus": "all", "ipc_host": True, "stop_timeout_s": 60})
    else:
        docker["gpus"] = 1
    study: dict = {"storage": "sqlite:///autotuner.db", "sampler": "tpe", "pruner": "median", "seed": 0}
    if not p.baseline:
        study["baseline"] = False
    context_flag = "--max-model-len" if engine == "vllm" else "--context-length"
    experiment = {
        "name": name, "engine": engine, "launcher": "docker", "docker": docker,
        "model": {"path": model, "name": name},
        "hardware": {"gpus": machine.gpus},
        "search_space": space_file,
        "workload": workload,
        "load": load,
        "objective": {"metric": "output_tok_per_s", "direction": "maximize", "slo": {"ttft_ms_p99": 10000}},
        "study": study,
        "stop": {"patience": 8},
        "confirm": {"top_k": 2, "repeats": 3},
        "startup_timeout_s": int(STARTUP_S + SECONDS_PER_GIB * facts.weight_bytes / GIB),
        "engine_args": [context_flag, str(context)],
        **({"enqueue": [first]} if first else {}),
    }
    if engine == "vllm":
        experiment["advisors"] = ["earlier-studies", "engine", "performance-model"]
        decisions.append("advisors: earlier studies, the engine's knowledge, then AIConfigurator's predicted best "
                         "where it covers the model and GPU (autotuner[aiconfigurator]; it steps aside otherwise)")
    comments = {
        "docker:": "# the engine's image at the version this adapter's flags were read from",
        "workload:": "# what each load level sends, 300 s at most (docs/traffic.md: datasets, traces, sessions)",
        "objective:": "# the SLO is a guess: set the TTFT your users accept",
        "startup_timeout_s:": f"# loading {facts.weight_bytes / GIB:.0f} GiB of weights: {STARTUP_S} s and "
                              f"{SECONDS_PER_GIB} s a GiB",
        "enqueue:": "# the first config: no baseline, since the defaults (one GPU) cannot hold the model",
        "advisors:": "# who proposes configs before the sampler, in this order",
    }
    return render(experiment, space, decisions, comments, engine)


def _vllm_first(p: Plan, facts: HfFacts) -> dict | None:
    if p.baseline:
        return None
    best = _first(p.fits)
    first: dict = {"parallel_layout": best.layout.name}
    if facts.experts:
        first["enable_expert_parallel"] = True  # the engines' recipes for large MoE models
    return first


def _first(fits: list[Fit]) -> Fit:
    """Where a study without a baseline starts: the widest TP that fits (how the engines' own recipes serve
    a model too large for one GPU), else the layout with least pipeline and most TP."""
    return max(fits, key=lambda f: (f.layout.dp == 1 and f.layout.pp == 1, -f.layout.pp, f.layout.tp))


def _vllm_moe_backends(facts: HfFacts, machine: Machine) -> list[str]:
    if facts.quantization == "NVFP4":
        return ["auto", "flashinfer_cutlass", "cutlass", "marlin"] + (
            ["flashinfer_b12x", "b12x"] if machine.gpu_name in BLACKWELL_SM12X else [])
    if facts.quantization == "FP8":
        return ["auto", "triton", "deep_gemm"] if machine.gpu_name not in BLACKWELL_SM12X else ["auto", "triton"]
    return ["auto", "triton"]


def _collectives(machine: Machine, custom_all_reduce: str | None) -> dict:
    """NCCL's reach and protocol on a PCIe box; the engine's own all-reduce where NVLink carries it."""
    if machine.interconnect == "nvlink":
        return {custom_all_reduce: {"type": "bool"}} if custom_all_reduce else {}
    return {"nccl_p2p_level": {"type": "categorical", "env": "NCCL_P2P_LEVEL", "choices": ["PIX", "PHB", "SYS"]},
            "nccl_proto": {"type": "categorical", "env": "NCCL_PROTO", "choices": ["^LL128", "Simple", "LL"]}}


def _batch_choices(requests: int) -> list[int]:
    top = max(MIN_SEQS, min(MAX_SEQS, floor_pow2(2 * requests)))
    return [b for b in (2**k for k in range(4, 11)) if top // 8 <= b <= top]
