"""How many streamed tokens/s the load generator itself can take, on one core and with worker processes.

The fake OpenAI server (tests/fake_openai_server.py) runs in its own process, pinned to the last
core, and streams every response "instantly" (all of a response's SSE events written at once, one
HTTP chunk per token, as real servers frame them); the load generator (autotuner.bench.runner) runs
pinned to the other core(s). For each concurrency it prints requests/s, output tokens/s, the CPU
each side used, and TTFT; when the client's CPU is ~100% the client is what saturates, when the
server's is, the number is only a lower bound for the client.

    python benchmarks/loadgen_capacity.py            # default run, well under two minutes
    python benchmarks/loadgen_capacity.py --concurrency 64 --workers 1 2 --output-len 256

This script measures; it never asserts. Target: >= 130,000 output tokens/s at concurrency 64 on one
core (so that a load generator on a small CI box can saturate any single-GPU server we tune).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from autotuner.bench.runner import run_level_sync  # noqa: E402
from autotuner.workloads.synthetic import Workload  # noqa: E402

TARGET_TOK_PER_S = 130_000  # at concurrency 64, one client core
CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def own_cpu_s() -> float:
    """CPU seconds of this process and of its reaped children (the worker processes)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def start_server(cpu: int | None, itl_ms: float) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, str(REPO / "tests" / "fake_openai_server.py"), "--port", "0"]
    if itl_ms:
        cmd += ["--itl-s", str(itl_ms / 1000), "--ttft-s", str(itl_ms / 1000), "--coarse-timing"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("listening "):
        proc.kill()
        raise SystemExit(f"fake server did not start: {line!r}")
    if cpu is not None:
        os.sched_setaffinity(proc.pid, {cpu})
    return proc, line.split(" ", 1)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 64, 256, 1024])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="client processes to try")
    parser.add_argument("--output-len", type=int, default=256, help="tokens per response")
    parser.add_argument("--input-len", type=int, default=128, help="prompt words per request")
    parser.add_argument("--seconds", type=float, default=2.5, help="rough length of each level")
    parser.add_argument("--itl-ms", type=float, default=0.0,
                        help="0: instant responses; else TTFT = ITL = this (one network read per token)")
    parser.add_argument("--endpoint", choices=["completions", "chat"], default="completions")
    args = parser.parse_args()

    cpus = sorted(os.sched_getaffinity(0))
    server_cpu = cpus[-1] if len(cpus) > 1 else None
    client_cpus = set(cpus[:-1]) if len(cpus) > 1 else set(cpus)
    one_core = {min(client_cpus)}
    server, base_url = start_server(server_cpu, args.itl_ms)
    print(f"cores {cpus}: server pinned to {server_cpu}, one-core client pinned to {sorted(one_core)}; "
          f"{args.output_len} output tokens per request, {args.endpoint}, "
          f"{'instant' if not args.itl_ms else f'ITL {args.itl_ms} ms'} server")
    header = (f"{'workers':>7} {'conc':>5} {'requests':>8} {'req/s':>9} {'out tok/s':>11} {'client CPU':>10} "
              f"{'server CPU':>10} {'tok/CPU-s':>10} {'TTFT p50':>9} {'errors':>6}")
    # tok/CPU-s: output tokens (warm-up included) per CPU-second the client used: what one whole core
    # would stream even when other programs on the machine take part of it.
    # With an instant server the true TTFT is ~0: the TTFT column is the client's own delay (its event
    # loop busy with other responses), i.e. how much it would inflate a real server's TTFT at that load.
    print(header)
    print("-" * len(header))
    rows: dict[tuple[int, int], float] = {}
    estimate_req_per_s = 1000.0  # refined after each level, to size the next one to --seconds
    try:
        for workers in args.workers:
            # One worker: the load generator on ONE core. More: the client cores, and when there are
            # fewer of those than workers, every core (then they share the server's core).
            os.sched_setaffinity(0, one_core if workers == 1 else client_cpus if len(client_cpus) >= workers
                                 else set(cpus))
            for conc in args.concurrency:
                if workers > conc:
                    continue
                n = max(4 * conc, int(estimate_req_per_s * args.seconds), 100)
                workload = Workload(endpoint=args.endpoint, num_prompts=n, input_len=args.input_len,
                                    output_len=args.output_len)
                cpu0, srv0, t0 = own_cpu_s(), proc_cpu_s(server.pid), time.perf_counter()
                result, _ = run_level_sync(base_url, "fake", workload, max_concurrency=conc,
                                           warmup_requests=conc, workers=workers, timeout_s=60)
                wall_s = time.perf_counter() - t0
                client_cpu_s = own_cpu_s() - cpu0
                client_pct = 100 * client_cpu_s / wall_s
                per_cpu_s = result.output_tokens * (n + conc) / n / client_cpu_s
                server_pct = 100 * (proc_cpu_s(server.pid) - srv0) / wall_s
                rows[(workers, conc)] = result.output_tok_per_s
                estimate_req_per_s = max(result.request_per_s, 50.0)
                print(f"{workers:>7} {conc:>5} {n:>8} {result.request_per_s:>9,.0f} {result.output_tok_per_s:>11,.0f} "
                      f"{client_pct:>9.0f}% {server_pct:>9.0f}% {per_cpu_s:>10,.0f} {result.ttft_ms.p50:>7.2f}ms "
                      f"{result.failed:>6}",
                      flush=True)
                if result.failed:
                    print(f"        errors: {result.error_samples}")
    finally:
        server.terminate()
        server.wait(10)

    print()
    one = {c: v for (w, c), v in rows.items() if w == 1}
    if one:
        best_conc = max(one, key=one.get)  # type: ignore[arg-type]
        print(f"one core: peak {one[best_conc]:,.0f} output tok/s at concurrency {best_conc}")
        levels = sorted(one)
        saturated = next((prev for prev, c in pairwise(levels) if one[c] < 1.05 * one[prev]), None)
        if saturated is not None:
            print(f"one core: saturated from concurrency {saturated} on (the next level adds < 5%)")
    if 64 in one:
        print(f"target at concurrency 64 on one core: {one[64]:,.0f} / {TARGET_TOK_PER_S:,} tok/s = "
              f"{one[64] / TARGET_TOK_PER_S:.2f}x")
    for workers in args.workers:
        if workers == 1:
            continue
        ratios = [f"c{c}: {rows[(workers, c)] / one[c]:.2f}x" for c in args.concurrency
                  if (workers, c) in rows and c in one]
        if ratios:
            print(f"{workers} workers vs one core: " + ", ".join(ratios))


if __name__ == "__main__":
    main()
