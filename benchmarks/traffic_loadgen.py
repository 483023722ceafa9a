"""Does the load generator keep up with traffic from files? Two numbers, each beside a reference
measured in the same run, against the in-process fake OpenAI server (tests/fake_openai_server.py, in
its own process pinned to the last core; the client pinned to one other core):

1. Capacity: output tokens/s at concurrency 64 on one core, with 256-token answers from an instant
   server, for a ShareGPT dataset's prompts and a Mooncake trace's (rendered as the tuner renders them,
   workloads/plan.py) against today's synthetic prompts (the reference). Target: >= 100,000 tok/s.
2. Schedule: a trace replayed on its own timestamps at 50 requests/s (speed-up 1, the tuner's path for
   `load: {speedup: [1]}`) against a Poisson level at 50 requests/s (the reference): how late requests
   left the client (p50, p99, max of start - due). Target: p99 lateness < 10 ms.

Each is measured `--repeats` times (interleaved) and printed as the median with its range.

    python benchmarks/traffic_loadgen.py              # about a minute
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from loadgen_capacity import start_server  # noqa: E402

from autotuner.bench.metrics import LevelResult  # noqa: E402
from autotuner.bench.runner import run_level_sync  # noqa: E402
from autotuner.workloads.dataset import read_dataset  # noqa: E402
from autotuner.workloads.plan import BUILTIN, LevelPlan, Sampling, render  # noqa: E402
from autotuner.workloads.samples import write as write_samples  # noqa: E402
from autotuner.workloads.source import DatasetSource, TraceSource  # noqa: E402
from autotuner.workloads.synthetic import Workload  # noqa: E402
from autotuner.workloads.trace import read_trace  # noqa: E402

OUTPUT = 256
CONCURRENCY = 64
CAPACITY_TARGET = 100_000
LATENESS_TARGET_MS = 10.0


def write_trace(path: Path, n: int, rate: float, block: int = 512) -> Path:
    """A Mooncake trace of `n` requests at `rate`/s (Poisson), sessions behind 8 shared system prompts."""
    rng = random.Random(0)
    systems = [[1000 * s + k for k in range(rng.randint(1, 3))] for s in range(8)]
    t, rows, next_id = 0.0, [], 10**6
    for _ in range(n):
        t += rng.expovariate(rate)
        prefix = rng.choice(systems)
        own = rng.randint(50, 700)
        ids = prefix + list(range(next_id, next_id + math.ceil(own / block)))
        next_id += len(ids)
        rows.append(f'{{"timestamp": {t * 1000:.1f}, "input_length": {block * len(prefix) + own}, '
                    f'"output_length": {OUTPUT}, "hash_ids": {ids}}}\n')
    path.write_text("".join(rows))
    return path


def median_range(values: list[float], fmt: str = ",.0f") -> str:
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def measure(url: str, plans: dict[str, Callable[[], LevelPlan | Workload]], repeats: int,
            **level: object) -> dict[str, list[LevelResult]]:
    out: dict[str, list[LevelResult]] = {name: [] for name in plans}
    for _ in range(repeats):
        for name, make in plans.items():  # interleaved: drift of the machine hits all alike
            result, _ = run_level_sync(url, "fake", make(), timeout_s=120, **level)  # type: ignore[arg-type]
            out[name].append(result)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--requests", type=int, default=1000, help="requests per capacity level")
    parser.add_argument("--replay-s", type=float, default=10.0, help="seconds of trace per schedule level")
    args = parser.parse_args()

    cpus = sorted(os.sched_getaffinity(0))
    server_cpu = cpus[-1] if len(cpus) > 1 else None
    os.sched_setaffinity(0, {cpus[0]})
    tmp = Path(tempfile.mkdtemp(prefix="traffic-bench-"))
    write_samples(tmp)
    sharegpt = read_dataset(tmp / "sharegpt.json", "sharegpt")
    trace = read_trace(write_trace(tmp / "trace.jsonl", args.requests, 50.0))
    n = args.requests

    def dataset_plan() -> LevelPlan:
        specs = DatasetSource(sharegpt, default_output=OUTPUT, max_output=OUTPUT).specs("level-0", n)
        return render(specs, endpoint="completions", model="fake", vocab=BUILTIN, sampling=Sampling())

    def trace_plan() -> LevelPlan:
        return render(TraceSource(trace).specs("level-0", n), endpoint="completions", model="fake", vocab=BUILTIN,
                      sampling=Sampling(), salt="level-0")

    print(f"client on core {cpus[0]}, fake server on core {server_cpu}; {OUTPUT}-token answers; "
          f"{args.repeats} repeats, interleaved; median (range)")
    server, url = start_server(server_cpu, 0.0)
    try:
        capacity = measure(url, {
            "synthetic (reference)": lambda: Workload(num_prompts=n, input_len=128, output_len=OUTPUT),
            "sharegpt dataset": dataset_plan,
            "mooncake trace": trace_plan,
        }, args.repeats, max_concurrency=CONCURRENCY, warmup_requests=0)
    finally:
        server.terminate()
        server.wait(10)
    print(f"\n1. capacity at concurrency {CONCURRENCY}, one client core, instant server (output tok/s)")
    reference = statistics.median(r.output_tok_per_s for r in capacity["synthetic (reference)"])
    for name, results in capacity.items():
        rates = [r.output_tok_per_s for r in results]
        print(f"  {name:<24} {median_range(rates):>28}  {statistics.median(rates) / reference:.2f}x reference  "
              f"target {CAPACITY_TARGET:,}: {statistics.median(rates) / CAPACITY_TARGET:.2f}x"
              + (f"  ({sum(r.failed for r in results)} failed)" if any(r.failed for r in results) else ""))

    # A server with real pacing (2 ms a token: ~0.5 s an answer, ~25 requests in flight at 50/s).
    replay_n = int(args.replay_s * 50)
    window = read_trace(tmp / "trace.jsonl", duration_s=args.replay_s)
    server, url = start_server(server_cpu, 2.0)
    try:
        lateness: dict[str, list[LevelResult]] = {"poisson 50 req/s (reference)": [], "trace replay at 1x": []}
        for _ in range(args.repeats):
            r, _ = run_level_sync(url, "fake", Workload(num_prompts=replay_n, input_len=128, output_len=OUTPUT),
                                  request_rate=50.0, timeout_s=120)
            lateness["poisson 50 req/s (reference)"].append(r)
            plan = render(TraceSource(window).specs("level-0", len(window.requests)), endpoint="completions",
                          model="fake", vocab=BUILTIN, sampling=Sampling(), salt="replay")
            r, _ = run_level_sync(url, "fake", plan, speedup=1.0, timeout_s=120)
            lateness["trace replay at 1x"].append(r)
    finally:
        server.terminate()
        server.wait(10)
    print(f"\n2. schedule kept: how late requests left the client (ms), {args.replay_s:g} s at ~50 req/s, "
          "2 ms/token server")
    for name, results in lateness.items():
        p99 = [r.queue_ms.p99 for r in results]
        print(f"  {name:<30} offered {median_range([r.offered_rate or 0 for r in results], '.1f')} req/s  "
              f"p50 {median_range([r.queue_ms.p50 for r in results], '.2f')}  p99 {median_range(p99, '.2f')}  "
              f"max {median_range([r.queue_ms.max for r in results], '.2f')}  "
              f"target p99 < {LATENESS_TARGET_MS:g}: "
              + ("met" if statistics.median(p99) < LATENESS_TARGET_MS else "MISSED"))


if __name__ == "__main__":
    main()
