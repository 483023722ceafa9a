"""What the device pool's rules cost and buy: a night of `--parallel` trials on one 8-GPU node, simulated.

The pool serves requests first come, first served (autotuner/node/pool.py: a request waits while an older one
for overlapping units waits) and places them with `pack` (aligned blocks, best fit). The alternative is
greedy backfill: serve any waiting request that fits, oldest first, which keeps GPUs busier but can
starve a big trial behind a stream of small ones. Both run here on the same random workloads: W workers,
each asking for one trial after another with a need drawn from a mix (TP1/TP2/TP4/TP8) and a duration
(load, warm up, sweep: lognormal around 10 minutes, longer for bigger configs). `pack` is the real one.

Printed per mix and policy (medians over seeds): GPU utilization, trials finished in the night, and the
wait before a trial starts (p95 and max over all trials, and the median wait of TP8 trials). It measures;
it never asserts.

    .venv/bin/python benchmarks/pool_packing.py [--gpus 8] [--workers 4] [--hours 8] [--seeds 20]
"""

from __future__ import annotations

import argparse
import heapq
import random
import statistics
from dataclasses import dataclass, field

from autotuner.node.pool import pack

MIXES = {
    "mostly small: TP1 60%, TP2 30%, TP8 10%": [(1, 0.6), (2, 0.3), (8, 0.1)],
    "mixed: TP1, TP2, TP4, TP8 alike": [(1, 0.25), (2, 0.25), (4, 0.25), (8, 0.25)],
    "mostly big: TP2 20%, TP4 50%, TP8 30%": [(2, 0.2), (4, 0.5), (8, 0.3)],
}


@dataclass
class Night:
    utilization: float = 0.0
    finished: int = 0
    waits: dict[int, list[float]] = field(default_factory=dict)  # need -> minutes waited, per trial


def simulate(policy: str, mix: list[tuple[int, float]], gpus: int, workers: int, hours: float, seed: int) -> Night:
    """One night: every worker asks for its next trial as soon as its last one ends."""
    rng = random.Random(seed)
    units, end = tuple(range(gpus)), hours * 3600
    night = Night()
    held: dict[int, tuple[int, ...]] = {}  # worker -> the units its running trial holds
    queue: list[tuple[float, int, int]] = []  # (asked at, worker, need), oldest first
    ends: list[tuple[float, int]] = []  # (when a trial ends, worker)
    busy_s, last = 0.0, 0.0

    def ask(now: float, worker: int) -> None:
        queue.append((now, worker, rng.choices([n for n, _ in mix], [w for _, w in mix])[0]))

    def serve(now: float) -> None:
        while queue:
            busy = {u for us in held.values() for u in us}
            candidates = [0] if policy == "first come, first served" else range(len(queue))
            served = next(((i, got) for i in candidates if (got := pack(units, busy, queue[i][2])) is not None), None)
            if served is None:
                return
            i, got = served
            asked, worker, need = queue.pop(i)
            held[worker] = got
            night.waits.setdefault(need, []).append((now - asked) / 60)
            minutes = rng.lognormvariate(2.3, 0.4) * (1 + need / 8)
            heapq.heappush(ends, (now + minutes * 60, worker))

    for w in range(workers):
        ask(0.0, w)
    serve(0.0)
    while ends:
        now, worker = heapq.heappop(ends)
        now = min(now, end)
        busy_s += sum(len(us) for us in held.values()) * (now - last)
        last = now
        if now >= end:
            break
        night.finished += 1
        del held[worker]
        ask(now, worker)
        serve(now)
    night.utilization = busy_s / (gpus * end)
    return night


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--workers", type=int, default=4, help="--parallel")
    parser.add_argument("--hours", type=float, default=8)
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()
    policies = ("first come, first served", "greedy backfill")
    print(f"{args.gpus} GPUs, --parallel {args.workers}, {args.hours:g} h, medians over {args.seeds} seeds\n")
    print("| mix | policy | GPU utilization | trials | wait p95 (min) | wait max (min) | TP8 median wait (min) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, mix in MIXES.items():
        for policy in policies:
            nights = [simulate(policy, mix, args.gpus, args.workers, args.hours, seed) for seed in range(args.seeds)]
            waits = [[w for ws in n.waits.values() for w in ws] for n in nights]
            big = [statistics.median(n.waits[8]) if n.waits.get(8) else float("inf") for n in nights]
            print(f"| {name} | {policy} | {statistics.median(n.utilization for n in nights):.0%} "
                  f"| {statistics.median(n.finished for n in nights):g} "
                  f"| {statistics.median(statistics.quantiles(w, n=20)[-1] for w in waits):.1f} "
                  f"| {statistics.median(max(w) for w in waits):.1f} | {statistics.median(big):.1f} |")


if __name__ == "__main__":
    main()
