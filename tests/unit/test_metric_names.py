"""Objectives and SLOs copied from AIPerf, GuideLLM or vLLM land on the metric they meant there."""

from __future__ import annotations

import pytest

from autotuner.bench.metric_names import canonical
from autotuner.config import ObjectiveConfig


@pytest.mark.parametrize("theirs, ours", [
    ("output_token_throughput", "output_tok_per_s"),        # AIPerf
    ("output_tokens_per_second", "output_tok_per_s"),       # GuideLLM
    ("time_to_first_token_p99", "ttft_ms_p99"),             # AIPerf, in ms
    ("time_to_first_token_ms_median", "ttft_ms_p50"),       # GuideLLM
    ("inter_token_latency_ms_avg", "tpot_ms_mean"),         # GuideLLM: excludes the first token, like our TPOT
    ("inter_chunk_latency_p90", "itl_ms_p90"),              # AIPerf's ICL is vLLM's ITL
    ("e2el_p99", "e2e_ms_p99"), ("tpot_p50", "tpot_ms_p50"),  # vLLM
    ("ttft_ms_p99", "ttft_ms_p99"), ("itl_ms_max", "itl_ms_max"),  # our own, unchanged
])
def test_other_tools_names_map_to_ours(theirs, ours):
    assert canonical(theirs) == ours


@pytest.mark.parametrize("name, says", [
    ("inter_token_latency_p99", "this tool's tpot_ms; vLLM's ITL is the gap between streamed chunks"),
    ("itl_p99", "vLLM's ITL is the gap between streamed chunks"),
    ("time_per_output_token_mean", "GuideLLM's time_per_output_token counts it"),
    ("request_latency_p99", "GuideLLM's is in seconds"),
])
def test_a_name_that_means_different_things_is_refused_with_the_mapping(name, says):
    with pytest.raises(ValueError, match="means different things in different tools") as err:
        canonical(name)
    assert says in str(err.value)


def test_objective_and_slo_take_the_names_users_bring():
    o = ObjectiveConfig(metric="request_throughput", slo={"time_to_first_token_p99": 2000, "inter_chunk_latency_max": 90})
    assert o.metric == "request_per_s" and o.slo == {"ttft_ms_p99": 2000, "itl_ms_max": 90}
