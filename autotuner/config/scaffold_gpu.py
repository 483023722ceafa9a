"""`autotuner init`'s search spaces and experiments for vLLM and SGLang on GPUs, from the layouts that hold
the model (config/gpu_sizing.py). Pure: facts in, YAML text and a line per decision out.

- Layouts: vLLM's `parallel_layout` (TP x PP or TP x DP); SGLang's tp_size, pp_size, dp_size whose
  product is the GPUs, with ep_size and DP attention inside the TP group (constraints keep the samples
  to what each engine's rules accept).
- MoE, on several GPUs: expert parallel, EPLB, the all-to-all (DeepEP only over NVLink), MoE kernels for
  the checkpoint's quantization; MLA: decode context parallel dividing TP; MTP layers: speculative drafts.
- Batch limits: powers of two up to what the best layout's KV cache holds at FP8 (twice the 16-bit
  count), at most `MAX_SEQS`; load: a quarter of the largest, then the largest; the context: the
  traffic's longest request rounded up to a power of two.
- The engine's defaults (TP1 on one GPU) are the baseline only where one GPU holds the model; else the
  study starts from the widest TP that fits.
"""

from __future__ import annotations

from typing import Any

from autotuner.config.gpu_sizing import UTILIZATION, Plan, plan
from autotuner.config.scaffold import Machine, Scaffold, Traffic, floor_pow2, pow2, render, slo
from autotuner.models.hf import GIB, HfFacts

MAX_SEQS = 1024
MIN_SEQS = 16
SECONDS_PER_GIB = 6  # loading and sharding the weights, beyond `STARTUP_S` (compile, CUDA graphs)
STARTUP_S = 600
# SM12x (RTX PRO 6000, RTX 5090): vLLM's b12x NVFP4 MoE kernels; Hopper: FlashAttention 3 in SGLang.
BLACKWELL_SM12X = ("rtx-pro-6000", "rtx-5090")
HOPPER = ("h100", "h200")
BATCHED_TOKENS = (2048, 4096, 8192, 16384, 32768)
GUESSED_TTFT_MS = 10000  # the SLO when the user gives none: prompts of 1,024 tokens at a batch's load

GPU_SYNTHETIC = Traffic(1024, 256, {"endpoint": "completions", "input_len": 1024, "output_len": 256},
                        "synthetic: prompts of 1,024 tokens, outputs of 256 (replace with your traffic: "
                        "--workload FILE)")

def vllm(name: str, model: str, space_file: str, facts: HfFacts, machine: Machine,
         traffic: Traffic = GPU_SYNTHETIC, image: str = "") -> Scaffold:
    """The experiment and search space for vLLM serving the folder's model on `machine`'s GPUs."""
    p = plan(facts, machine, traffic)
    decisions, constraints = list(p.decisions), []
    params: dict[str, dict[str, Any]] = {}
    names = [f.layout.name for f in p.fits]
    if machine.gpus > 1:
        params["parallel_layout"] = {"type": "categorical", "choices": names}
    if facts.experts and machine.gpus > 1:  # EP needs TP x DP > 1
        params["enable_expert_parallel"] = {"type": "bool"}
        backends = ["allgather_reducescatter"] + (["deepep_low_latency", "deepep_high_throughput"]
                                                  if machine.interconnect == "nvlink" else [])
        if len(backends) > 1:
            params["all2all_backend"] = {"type": "categorical", "choices": backends,
                                         "condition": "enable_expert_parallel"}
        else:
            decisions.append("all-to-all: allgather_reducescatter only (DeepEP is built for NVLink; this box "
                             "shows none)")
        params["enable_eplb"] = {"type": "bool", "condition": "enable_expert_parallel"}
    if facts.experts:
        params["moe_backend"] = {"type": "categorical", "choices": _vllm_moe_backends(facts, machine)}
    dcp = [d for d in (2, 4) if any(f.layout.tp % d == 0 for f in p.fits)]
    if facts.mla and dcp:
        params["decode_context_parallel_size"] = {"type": "categorical", "choices": [1, *dcp]}
        for d in dcp:  # DCP reuses the TP ranks: it must divide TP
            wide = [f'"{f.layout.name}"' for f in p.fits if f.layout.tp % d == 0]
            if len(wide) < len(p.fits):
                constraints.append(f"decode_context_parallel_size != {d} or parallel_layout in [{', '.join(wide)}]")
        decisions.append(f"decode context parallel 1, {', '.join(map(str, dcp))} (dividing TP): MLA's KV cache "
                         "is otherwise whole on every TP rank")
    if facts.mtp_layers:
        params["mtp_draft_tokens"] = {"type": "categorical",
                                      "choices": [0, *(facts.mtp_layers * k for k in (1, 2, 3))]}
        decisions.append(f"MTP speculative decoding 0 to {3 * facts.mtp_layers} draft tokens: the model has "
                         f"{facts.mtp_layers} MTP layer(s)")
    seqs = _batch_choices(p.requests)
    context = _context(facts, traffic)
    params.update({
        "max_num_seqs": {"type": "categorical", "choices": seqs},
        "max_num_batched_tokens": {"type": "categorical", "choices": list(BATCHED_TOKENS)},
        "enable_chunked_prefill": {"type": "bool"},
        "gpu_memory_utilization": {"type": "float", "low": UTILIZATION, "high": 0.95, "step": 0.05},
        "kv_cache_dtype": {"type": "categorical", "choices": ["auto", "fp8"]},
        "enable_prefix_caching": {"type": "bool"},
        "async_scheduling": {"type": "bool"},
        "cudagraph_mode": {"type": "categorical", "choices": ["auto", "FULL_DECODE_ONLY", "PIECEWISE"]},
    })
    if context > BATCHED_TOKENS[0]:  # without chunks a step must hold a whole prompt (vLLM refuses it else)
        constraints.append(f"enable_chunked_prefill or max_num_batched_tokens >= {context}")
    if machine.gpus > 1:
        params.update(_collectives(machine, "disable_custom_all_reduce"))
    decisions.append(f"max_num_seqs {', '.join(map(str, seqs))}: the best layout's KV cache holds {p.requests} "
                     "requests at 16-bit, twice that at FP8")
    first = None if p.baseline else {"parallel_layout": p.first.name,
                                      **({"enable_expert_parallel": True} if facts.experts else {})}
    space = {"engine": "vllm", "params": params, **({"constraints": constraints} if constraints else {})}
    return _files("vllm", name, model, space_file, facts, machine, traffic, p, space, seqs, decisions, image,
                  first)


def sglang(name: str, model: str, space_file: str, facts: HfFacts, machine: Machine,
           traffic: Traffic = GPU_SYNTHETIC, image: str = "") -> Scaffold:
    """The experiment and search space for SGLang serving the folder's model on `machine`'s GPUs."""
    p = plan(facts, machine, traffic, experts_over_dp=False)
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
    widest = max(f.layout.tp for f in p.fits)
    inside_tp = [k for k in (2, 4, 8) if widest % k == 0]
    if facts.experts and inside_tp:  # SGLang's EP and DP attention live inside the TP group
        params["ep_size"] = {"type": "categorical", "choices": [1, *inside_tp]}
        if machine.interconnect == "nvlink":
            params["moe_a2a_backend"] = {"type": "categorical", "choices": ["none", "deepep"],
                                         "condition": "ep_size > 1"}
        params["attn_dp_size"] = {"type": "categorical", "choices": [1, *inside_tp]}
        constraints += ["tp_size % ep_size == 0", "tp_size % attn_dp_size == 0"]
        if "dp_size" in params:
            constraints.append("dp_size == 1 or attn_dp_size == 1")
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
        "mem_fraction_static": {"type": "float", "low": UTILIZATION, "high": 0.93, "step": 0.02},
        "cuda_graph_max_bs": {"type": "categorical", "choices": [b for b in seqs if b <= 512] or [seqs[0]]},
        "kv_cache_dtype": {"type": "categorical", "choices": ["auto", "fp8_e4m3"]},
        "attention_backend": {"type": "categorical", "choices": backends},
    })
    if machine.gpus > 1:
        params.update(_collectives(machine, None))
    decisions.append(f"max_running_requests {', '.join(map(str, seqs))}: the best layout's KV cache holds "
                     f"{p.requests} requests at 16-bit, twice that at FP8")
    first = None if p.baseline else {k: v for k, v in (("tp_size", p.first.tp), ("pp_size", p.first.pp),
                                                        ("dp_size", p.first.dp)) if k in params}
    space = {"engine": "sglang", "params": params, **({"constraints": constraints} if constraints else {})}
    return _files("sglang", name, model, space_file, facts, machine, traffic, p, space, seqs, decisions, image,
                  first)


def _files(engine: str, name: str, model: str, space_file: str, facts: HfFacts, machine: Machine,
           traffic: Traffic, p: Plan, space: dict, seqs: list[int], decisions: list[str], image: str,
           first: dict | None) -> Scaffold:
    """The experiment around `space`: docker, workload, load levels, context, study, first config."""
    levels = sorted({max(1, seqs[-1] // 4), seqs[-1]})
    load = traffic.load or {"max_concurrency": levels}
    decisions.append(f"load: concurrency {', '.join(map(str, levels))} (a quarter of the largest batch, then it)"
                     if traffic.load is None else "load: the traffic's own pace")
    ttft_ms, slo_comment = slo(traffic, GUESSED_TTFT_MS, decisions, baseline=p.baseline)
    context = _context(facts, traffic)
    decisions.append(f"context {context} (--max-model-len / --context-length): the traffic's longest request, "
                     "rounded up; the model's own would reserve KV for requests that never come")
    workload = {**traffic.workload, "num_prompts": max(256, 2 * levels[-1]), "duration_s": 300,
                "warmup_requests": min(64, levels[0])}
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
        "objective": {"metric": "output_tok_per_s", "direction": "maximize", "slo": {"ttft_ms_p99": ttft_ms}},
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
        "objective:": slo_comment,
        "startup_timeout_s:": f"# loading {facts.weight_bytes / GIB:.0f} GiB of weights: {STARTUP_S} s and "
                              f"{SECONDS_PER_GIB} s a GiB",
        "enqueue:": "# the first config: no baseline, since the defaults (one GPU) cannot hold the model",
        "advisors:": "# who proposes configs before the sampler, in this order",
    }
    return render(experiment, space, decisions, comments, engine)


def _context(facts: HfFacts, traffic: Traffic) -> int:
    return min(pow2(traffic.need), facts.context_length or 2**30)


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
