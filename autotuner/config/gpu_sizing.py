"""Which parallel layouts of a machine's GPUs hold a model, and how many requests their KV cache holds.
Pure arithmetic on the facts (`models.hf.HfFacts`, `scaffold.Machine`, `scaffold.Traffic`), for `init`.

- Memory a GPU gives the engine: `UTILIZATION` of it (the lowest share the written spaces sample), less
  `ACTIVATIONS_GIB` (activations, CUDA graphs, communication buffers).
- A layout TPxPPxDP uses every GPU; TP divides the GPUs and the attention heads, and GQA's KV heads
  divide TP or TP them (vLLM's rule). Its weights a GPU: the routed experts over TP x PP x DP when the
  engine spreads them over the replicas (vLLM does, with or without expert parallel: its MoE layers
  flatten TP across DP), the rest over TP x PP; SGLang's dp_size replicas each hold the whole model.
  Its KV cache a token a GPU: GQA's KV heads split over TP (at least one a rank), MLA's latent whole on
  every TP rank, the layers over PP. A layout fits when the memory left holds `MIN_REQUESTS` requests.
- PP only when the weights need more than one GPU (else it only adds latency), at most `MAX_PP` stages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autotuner.config.scaffold import InitError, Machine, Traffic
from autotuner.models.hf import GIB, HfFacts

UTILIZATION = 0.85
ACTIVATIONS_GIB = 4.0
MIN_REQUESTS = 4
MAX_PP = 4


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
    weights_gib: float  # a GPU's
    requests: int  # a replica holds at 16-bit KV

    @property
    def fits(self) -> bool:
        return self.requests >= MIN_REQUESTS


def usable_gib(gpu_gib: float) -> float:
    return gpu_gib * UTILIZATION - ACTIVATIONS_GIB


def fit(facts: HfFacts, gpu_gib: float, layout: Layout, need: int, experts_over_dp: bool = True) -> Fit:
    """`layout`'s weights a GPU and how many requests of `need` tokens a replica's KV cache holds."""
    experts = facts.expert_weight_bytes if experts_over_dp else 0
    shards = layout.tp * layout.pp
    weights = (facts.weight_bytes - experts) / shards + experts / (shards * layout.dp)
    share = 1.0 if facts.mla else max(1, facts.kv_heads // layout.tp) / facts.kv_heads
    kv_per_token = facts.kv_bytes_per_token() * share / layout.pp
    free = usable_gib(gpu_gib) * GIB - weights
    return Fit(layout, weights / GIB, max(0, int(free / kv_per_token // need)))


def layouts(gpus: int, facts: HfFacts) -> list[Layout]:
    """TP x PP or TP x DP over all `gpus`, widest TP first."""
    out = []
    for tp in sorted((d for d in range(1, gpus + 1) if gpus % d == 0), reverse=True):
        kv_ok = facts.mla or facts.kv_heads % tp == 0 or tp % facts.kv_heads == 0
        if facts.heads % tp or not kv_ok:
            continue
        rest = gpus // tp
        if rest == 1:
            out.append(Layout(tp))
            continue
        if rest <= min(MAX_PP, facts.layers):
            out.append(Layout(tp, pp=rest))
        out.append(Layout(tp, dp=rest))
    return out


@dataclass(frozen=True)
class Plan:
    """The layouts that hold the model and what was decided, a line each."""

    fits: list[Fit]
    baseline: bool  # one GPU (the engines' default) holds the model
    requests: int  # the most a replica holds (16-bit KV), over the layouts that fit
    decisions: list[str]

    @property
    def first(self) -> Layout:
        """Where a study without a baseline starts: the widest TP that fits alone (how the engines' own
        recipes serve a model too large for one GPU), else the least pipeline and the most TP."""
        return max(self.fits, key=lambda f: (f.layout.dp == 1 and f.layout.pp == 1, -f.layout.pp,
                                             f.layout.tp)).layout


def plan(facts: HfFacts, machine: Machine, traffic: Traffic, experts_over_dp: bool = True) -> Plan:
    """The layouts of `machine`'s GPUs that hold the model with room for the traffic's requests;
    `experts_over_dp`: the engine spreads the routed experts over its DP replicas (vLLM), or not (SGLang)."""
    gpu_gib = machine.gpu_memory_gib or 0.0
    if usable_gib(gpu_gib) <= 0:
        raise InitError(f"GPUs of {gpu_gib:g} GiB leave nothing after the runtime's share (is their memory known? "
                        "--gpu-type NAME sets it)")
    need = traffic.need
    if facts.context_length and need > facts.context_length:
        raise InitError(f"a request of the traffic needs {need} tokens of context; the model was trained "
                        f"for {facts.context_length}")
    one = fit(facts, gpu_gib, Layout(1), need)
    decisions = [f"model: {facts.describe()}", f"machine: {machine.describe()}",
                 f"traffic: {traffic.what}; a request needs up to {need} tokens of context"]
    fits = []
    for layout in layouts(machine.gpus, facts):
        if layout.pp > 1 and one.fits:
            continue
        f = fit(facts, gpu_gib, layout, need, experts_over_dp)
        if f.fits:
            fits.append(f)
            continue
        why = (f"more than the {usable_gib(gpu_gib):.0f} GiB a {gpu_gib:g} GiB GPU gives"
               if f.weights_gib > usable_gib(gpu_gib) else f"no room left for {MIN_REQUESTS} requests' KV cache")
        replicas = "" if layout.dp == 1 or not facts.experts else (
            " (the experts spread over the replicas)" if experts_over_dp else " (each replica holds every expert)")
        decisions.append(f"{layout.name} excluded: {f.weights_gib:.0f} GiB of weights a GPU{replicas}, {why}")
    if not fits:
        least = math.ceil(facts.weight_bytes / (usable_gib(gpu_gib) * GIB))
        raise InitError(f"{facts.weight_bytes / GIB:.0f} GiB of weights ({facts.quantization or facts.dtype}) need "
                        f"at least {least} GPUs of {gpu_gib:g} GiB; planned for {machine.gpus}")
    p = Plan(fits, one.fits, max(f.requests for f in fits), decisions)
    if not one.fits:
        decisions.append(f"TP1 (the engine's default) excluded: {one.weights_gib:.0f} GiB of weights on one "
                         f"{gpu_gib:g} GiB GPU: the study has no baseline and starts from {p.first.name}")
    elif machine.gpus > 1:
        decisions.append("PP layouts left out: one GPU holds the weights, so pipeline stages would only add latency")
    decisions.append(f"layouts: {', '.join(f.layout.name for f in fits)}")
    return p
