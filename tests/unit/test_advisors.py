"""Advisors: proposals completed to configs of the space, the engines' own rules, and the driver taking
them before the sampler (tagged, checked, never launched twice), against the fake engine for real."""

from __future__ import annotations

from autotuner.advisors import StudySoFar, complete
from autotuner.advisors.engine_rules import advise
from autotuner.config import SearchSpaceConfig
from autotuner.config.space import SearchSpace
from autotuner.core.record import TrialView
from autotuner.engines._base import get_engine
from tests.support import (
    LLAMA_SPACE,
    so_far,
)


def test_a_proposal_is_completed_with_the_engines_defaults_fitted_to_the_space():
    params = complete({"parallel": 24, "flash_attn": "off"}, LLAMA_SPACE, get_engine("llamacpp").defaults())
    assert params["parallel"] == 16 and params["batch_size"] == 2048 and params["cont_batching"] is True
    assert "cache_type_v" not in params  # its condition is false with flash attention off
    assert "ctx_size" not in params and "threads" not in params  # no default the space allows: the sampler's


def test_llamacpp_knowledge_starts_with_a_slot_per_request_and_a_thread_per_core():
    (first,) = advise(get_engine("llamacpp"), so_far(max_load=12))
    assert first.params | {} == first.params and first.params["parallel"] == 16 and first.params["threads"] == 2
    assert first.params["cont_batching"] is True and "16 concurrent requests" in first.reason
    assert complete(first.params, LLAMA_SPACE, {})["ctx_size"] == 16384  # the largest KV buffer the space has


def test_llamacpp_knowledge_sizes_the_kv_buffer_from_the_workloads_lengths():
    from dataclasses import replace

    # 16 busy slots of a 300-token mean request (x1.25: 6000) need the 8192 buffer, not the largest
    study = replace(so_far(), workload={"longest_request": 870, "mean_request": 300.0, "prefix_reuse": 0.4})
    (first,) = advise(get_engine("llamacpp"), study)
    assert first.params["ctx_size"] == 8192 and "mean request of 300 tokens" in first.reason
    assert get_engine("llamacpp").infeasible(first.params, study.workload) == []
    # long requests: only the largest holds them; a short workload takes the smallest
    assert advise(get_engine("llamacpp"), replace(study, workload={"longest_request": 900, "mean_request": 900.0})
                                         )[0].params["ctx_size"] == 16384
    assert advise(get_engine("llamacpp"), replace(study, workload={"longest_request": 100, "mean_request": 90.0})
                                         )[0].params["ctx_size"] == 4096


def test_queued_requests_point_at_more_slots():
    queued = {"max_concurrency": 16, "output_tok_per_s": 200.0, "server_samples": 10, "server_requests_waiting_mean": 6,
              "server_requests_running_mean": 4, "server_requests_running_max": 4}
    best = TrialView(number=3, state="COMPLETE", params={"parallel": 4, "threads": 2}, values=[200.0],
                     levels=[queued], scored_level=0)
    proposals = advise(get_engine("llamacpp"), so_far([best]))
    assert [p.params.get("parallel") for p in proposals] == [16, 8]
    assert proposals[1].reason.startswith("#3 queued requests")


















def test_the_terminal_question_reads_yes_no_and_typed_edits(monkeypatch):
    from autotuner import cli

    def scripted(*typed: str):
        replies = iter(typed)
        monkeypatch.setattr("typer.prompt", lambda *a, **k: next(replies))

    scripted("maybe", "n")
    assert cli._ask("engine proposes -np 8", {"parallel": 8}) is False  # an unclear answer is asked again
    scripted("e", "parallel 16", "e", "parallel=16 cont_batching=false flash_attn=on")
    assert cli._ask("q", {"parallel": 8, "threads": 2}) == {"parallel": 16, "threads": 2, "cont_batching": False,
                                                             "flash_attn": "on"}
    scripted("")  # Enter: the default, yes
    monkeypatch.setattr("typer.prompt", lambda *a, **k: k["default"])
    assert cli._ask("q", {}) is True


def test_an_out_of_memory_failure_points_at_a_smaller_footprint():
    oom = TrialView(number=5, state="FAIL", params={"parallel": 16, "ctx_size": 16384, "batch_size": 2048},
                    values=None, failure_class="oom", failure_reason="failed to allocate KV buffer")
    steps = advise(get_engine("llamacpp"), so_far([oom]))[1:]
    assert [(p.params["ctx_size"], p.params["batch_size"]) for p in steps] == [(8192, 2048), (16384, 1024)]
    assert steps[0].reason == "#5 could not allocate its buffers: half the context (the KV buffer)"
    vllm_oom = TrialView(number=2, state="FAIL", params={"max_num_seqs": 256, "gpu_memory_utilization": 0.95},
                         values=None, failure_class="oom", failure_reason="CUDA out of memory")
    gpu = StudySoFar(trials=[vllm_oom], space=LLAMA_SPACE, load_key="max_concurrency", max_load=16, cpus=8, gpus=1,
                     metric="output_tok_per_s", direction="maximize")
    fraction, half = advise(get_engine("vllm"), gpu)[1:]
    assert fraction.params["gpu_memory_utilization"] == 0.9 and half.params["max_num_seqs"] == 128


def test_neighbours_turn_one_knob_of_the_best_by_one_notch_and_leave_every_other_slot_to_the_sampler():
    from autotuner.advisors.neighbours import Neighbours, notches

    best = TrialView(number=4, state="COMPLETE", params={"parallel": 4, "batch_size": 512, "cont_batching": True},
                     values=[200.0], proposed_by="engine")
    worse = TrialView(number=5, state="COMPLETE", params={"parallel": 1}, values=[100.0])
    moves = [p.params for p in Neighbours().propose(so_far([best, worse]))]
    assert moves[:4] == [{"parallel": 8, "batch_size": 512, "cont_batching": True},  # log scale: x2, /2
                         {"parallel": 2, "batch_size": 512, "cont_batching": True},
                         {"parallel": 4, "batch_size": 2048, "cont_batching": True},  # the next choice each way
                         {"parallel": 4, "batch_size": 128, "cont_batching": True}]
    assert moves[4] == {"parallel": 4, "batch_size": 512, "cont_batching": False}
    mine = TrialView(number=6, state="COMPLETE", params={"parallel": 8}, values=[150.0], proposed_by="neighbours")
    assert Neighbours().propose(so_far([best, worse, mine])) == []  # the sampler's turn
    assert notches(LLAMA_SPACE.config.params["threads"], 2) == [1]  # never past an end


SGLANG_SPACE = SearchSpace(SearchSpaceConfig.model_validate({"engine": "sglang", "params": {
    "max_running_requests": {"type": "categorical", "choices": [64, 128, 256, 512, 1024]},
    "chunked_prefill_size": {"type": "categorical", "choices": [-1, 2048, 4096, 8192, 16384]},
    "mem_fraction_static": {"type": "float", "low": 0.75, "high": 0.92, "step": 0.01},
    "cuda_graph_max_bs": {"type": "categorical", "choices": [64, 128, 256, 512]},
    "kv_cache_dtype": {"type": "categorical", "choices": ["auto", "fp8_e4m3"]},
}}))


def sglang_so_far(trials: list[TrialView] = (), max_load: float = 256) -> StudySoFar:
    return StudySoFar(trials=list(trials), space=SGLANG_SPACE, load_key="max_concurrency", max_load=max_load, cpus=16,
                      gpus=8, metric="output_tok_per_s", direction="maximize", defaults=get_engine("sglang").defaults())


def test_sglang_knowledge_follows_its_tuning_guide():
    sglang = get_engine("sglang")
    (first,) = advise(sglang, sglang_so_far(max_load=200))
    assert first.params == {"max_running_requests": 256, "cuda_graph_max_bs": 256}
    full_kv = {"max_concurrency": 256, "output_tok_per_s": 900.0, "server_samples": 10, "server_requests_waiting_mean": 0,
               "server_requests_running_mean": 200, "server_requests_running_max": 256, "server_kv_cache_usage_max": 0.99}
    best = TrialView(number=4, state="COMPLETE", params={"max_running_requests": 512, "mem_fraction_static": 0.85},
                     values=[900.0], levels=[full_kv], scored_level=0)
    steps = advise(sglang, sglang_so_far([best]))[1:]
    assert [(p.params.get("mem_fraction_static"), p.params.get("kv_cache_dtype"), p.params["max_running_requests"])
            for p in steps] == [(0.88, "auto", 512), (0.85, "fp8_e4m3", 512), (0.85, "auto", 256)]
    assert steps[0].reason.startswith("#4: ") and "KV pool" in steps[0].reason
    oom = TrialView(number=5, state="FAIL", params={"max_running_requests": 1024, "chunked_prefill_size": -1},
                    values=None, failure_class="oom", failure_reason="CUDA out of memory")
    after_oom = advise(sglang, sglang_so_far([oom]))[1:]
    assert [p.params["chunked_prefill_size"] for p in after_oom] == [4096, -1, -1]
    assert after_oom[1].params["max_running_requests"] == 512 and after_oom[1].params["cuda_graph_max_bs"] == 512
    assert after_oom[2].params["mem_fraction_static"] == 0.8  # SGLang's own share unknown: the guide's 0.8
    assert complete(after_oom[0].params, SGLANG_SPACE, {})["chunked_prefill_size"] == 4096
