"""The names other tools give this tool's metrics, so an objective or SLO copied from them means what it
meant there. This tool's names are `vllm bench serve`'s (metrics.py): ttft_ms, tpot_ms (excluding the
first token), itl_ms (the gaps between streamed chunks), e2e_ms, with _mean/_p50/_p90/_p99/_max.

| this tool | AIPerf (ai-dynamo/aiperf) | GuideLLM | vLLM |
|---|---|---|---|
| output_tok_per_s | output_token_throughput | output_tokens_per_second | output_throughput |
| request_per_s | request_throughput | requests_per_second | request_throughput |
| ttft_ms | time_to_first_token (ms) | time_to_first_token_ms | ttft |
| tpot_ms | inter_token_latency (ms) | inter_token_latency_ms | tpot |
| itl_ms | inter_chunk_latency (ms) | - | itl |
| e2e_ms | request_latency (ms) | request_latency (s!) | e2el |

Names that mean different things in different tools are refused with what each means:
`inter_token_latency`/`itl` without a unit (AIPerf's and GuideLLM's ITL is this tool's TPOT, vLLM's
is the gap between chunks), `time_per_output_token` (GuideLLM's counts the first token, vLLM's does
not) and `request_latency` (AIPerf: ms, GuideLLM: seconds). Statistics: avg -> mean, median -> p50.
"""

from __future__ import annotations

import re

ALIASES: dict[str, str] = {
    "output_token_throughput": "output_tok_per_s", "output_tokens_per_second": "output_tok_per_s",
    "output_throughput": "output_tok_per_s",
    "total_token_throughput": "total_tok_per_s", "tokens_per_second": "total_tok_per_s",
    "request_throughput": "request_per_s", "requests_per_second": "request_per_s",
    "time_to_first_token": "ttft_ms", "time_to_first_token_ms": "ttft_ms", "ttft": "ttft_ms",
    "inter_token_latency_ms": "tpot_ms", "tpot": "tpot_ms",
    "inter_chunk_latency": "itl_ms", "inter_chunk_latency_ms": "itl_ms",
    "request_latency_ms": "e2e_ms", "e2el": "e2e_ms", "e2el_ms": "e2e_ms",
}
AMBIGUOUS: dict[str, str] = {
    "inter_token_latency": "AIPerf's and GuideLLM's inter_token_latency is (latency - TTFT) / (output tokens - 1), "
                           "this tool's tpot_ms; vLLM's ITL is the gap between streamed chunks, this tool's itl_ms",
    "itl": "vLLM's ITL is the gap between streamed chunks (this tool's itl_ms); AIPerf's and GuideLLM's "
           "inter-token latency is this tool's tpot_ms",
    "time_per_output_token": "vLLM's TPOT leaves the first token out (this tool's tpot_ms); GuideLLM's "
                             "time_per_output_token counts it (latency / output tokens: no metric here)",
    "request_latency": "AIPerf's request_latency is in milliseconds (this tool's e2e_ms); GuideLLM's is in seconds",
}
STATS = {"mean": "mean", "avg": "mean", "p50": "p50", "median": "p50", "p90": "p90", "p99": "p99", "max": "max"}
_SPLIT = re.compile(r"^(.*?)_(mean|avg|p50|median|p90|p99|max)$")


def canonical(name: str) -> str:
    """This tool's name for `name` (its own, or another tool's, with an optional statistic suffix).
    Raises ValueError for a name whose meaning depends on the tool it came from."""
    base, stat = name, None
    if match := _SPLIT.match(name):
        base, stat = match.group(1), match.group(2)
    if base in AMBIGUOUS or name in AMBIGUOUS:
        meanings = AMBIGUOUS.get(base) or AMBIGUOUS[name]
        raise ValueError(f"'{name}' means different things in different tools: {meanings}. "
                         "Write this tool's name")
    mapped = ALIASES.get(base, base)
    return f"{mapped}_{STATS[stat]}" if stat else mapped
