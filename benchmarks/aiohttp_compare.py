"""Our HTTP/1.1 load-generation transport against aiohttp (what vLLM's benchmark client uses), equal load.

The fake OpenAI server (tests/fake_openai_server.py) runs in its own process pinned to the last core
and streams every response instantly; each client, in turn, runs pinned to another core, sending the same
requests as a closed loop at the same concurrency. The aiohttp client reads the stream the way
`vllm bench serve` does (one ClientSession, a line at a time, every event parsed as JSON). Printed: output
tokens/s and the client's CPU per output token, the fairer number when the server is the limit.

    python benchmarks/aiohttp_compare.py --concurrency 64 --requests 1000 --rounds 3

This script measures; it never asserts. It needs aiohttp (not a dependency of the project).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from autotuner.bench.runner import run_level  # noqa: E402
from autotuner.workloads.synthetic import Workload, build_payloads  # noqa: E402
from benchmarks.loadgen_capacity import start_server  # noqa: E402


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def aiohttp_level(base_url: str, payloads: list[dict], concurrency: int) -> int:
    """Output tokens received, streaming as vLLM's benchmark client does."""
    import aiohttp

    url = base_url + "/v1/completions"
    todo = iter(payloads)
    tokens = 0

    async def loop(session: aiohttp.ClientSession) -> None:
        nonlocal tokens
        for payload in todo:
            async with session.post(url, json=payload) as response:
                response.raise_for_status()
                async for line in response.content:
                    line = line.strip()
                    if not line:
                        continue
                    chunk = line.decode().removeprefix("data: ")
                    if chunk == "[DONE]":
                        continue
                    data = json.loads(chunk)
                    if data["choices"] and data["choices"][0].get("text"):
                        time.perf_counter_ns()  # vLLM stamps every token
                        tokens += 1

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:
        await asyncio.gather(*(loop(session) for _ in range(concurrency)))
    return tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    cpus = sorted(os.sched_getaffinity(0))
    server, base_url = start_server(cpus[-1] if len(cpus) > 1 else None, 0.0)
    os.sched_setaffinity(0, {cpus[0]})
    workload = Workload(num_prompts=args.requests, input_len=64, output_len=args.output_len)
    payloads = build_payloads(workload, "fake")
    rows: dict[str, list[tuple[float, float]]] = {"autotuner transport": [], "aiohttp": []}
    try:
        for _ in range(args.rounds):
            for name in rows:
                cpu0, t0 = cpu_s(), time.perf_counter()
                if name == "aiohttp":
                    tokens = asyncio.run(aiohttp_level(base_url, payloads, args.concurrency))
                else:
                    result, _ = asyncio.run(run_level(base_url, "fake", workload, max_concurrency=args.concurrency))
                    tokens = result.output_tokens
                wall_s, used_s = time.perf_counter() - t0, cpu_s() - cpu0
                rows[name].append((tokens / wall_s, used_s / tokens * 1e6))
                print(f"{name:>20}: {tokens / wall_s:>9,.0f} tok/s, {used_s / tokens * 1e6:.1f} µs CPU per token",
                      flush=True)
    finally:
        server.terminate()
        server.wait(10)
    print()
    for name, runs in rows.items():
        print(f"{name:>20}: median {statistics.median(r[0] for r in runs):,.0f} tok/s, "
              f"{statistics.median(r[1] for r in runs):.1f} µs CPU per token")


if __name__ == "__main__":
    main()
