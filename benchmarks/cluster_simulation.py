"""A night on a 64-GPU Ray cluster, on paper: 8 nodes x 8 GPUs, a vLLM study whose configs need 1 to 8
GPUs (TP x DP), run one trial at a time and with trials in flight side by side, as `executor: ray` runs
them. Printed side by side: hours until a trial of the top group is measured, hours for the whole budget,
and GPU utilisation (GPU-hours busy over GPU-hours of the cluster while the study ran).

What is real: the study driver (advisors, sampler, pruner, the baseline, Optuna's pending trials shared
by the workers on one SQLite study), each worker a driver of its own as `autotuner run --ray` starts
them, how many workers the tool starts (`placement.trials_in_flight`), what a config asks of a node
(`executors/placement.py`, the engine's `gpus_needed`). What is replaced: the launch, by a lookup into a
synthetic landscape that holds a node's GPUs for a simulated time; Ray's scheduler, by first-fit of the
oldest waiting launch that fits any node (Ray starts any pending task that fits). Simulated time stands
still while the drivers think.

The landscape, said plainly, is made up: throughput grows with GPUs (DP nearly linearly, TP less),
the scheduler's knobs have a sweet spot, a fixed hash of the config adds +-4%. Startup takes 4 minutes
plus one per doubling of GPUs, measuring 6 minutes. The top group: the best 1% of the configs.

    .venv/bin/python benchmarks/cluster_simulation.py [--budget 64] [--seeds 5] [--workers 1,8,fill,auto]

`auto` is what `autotuner run --ray` starts (placement.trials_in_flight: what the nodes hold of the
defaults, at most a quarter of the budget); `fill` is what the nodes hold, uncapped.

It measures; it never asserts.
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import itertools
import logging
import math
import statistics
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import mlflow  # noqa: E402, F401  # imported before its loggers are quietened
import optuna  # noqa: E402

from autotuner.config import load_experiment  # noqa: E402
from autotuner.core.executor import TrialResult  # noqa: E402
from autotuner.engines._base import get_engine  # noqa: E402
from autotuner.executors import placement  # noqa: E402
from benchmarks.replay import replay_driver, scored  # noqa: E402

NODES, GPUS_PER_NODE = 8, 8
SPACE = {
    "tensor_parallel_size": [1, 2, 4, 8],
    "data_parallel_size": [1, 2, 4, 8],
    "max_num_seqs": [64, 128, 256, 512, 1024],
    "max_num_batched_tokens": [2048, 4096, 8192, 16384],
    "gpu_memory_utilization": [0.85, 0.9, 0.95],
}
DEFAULTS = {"tensor_parallel_size": 1, "data_parallel_size": 1, "max_num_seqs": 256, "max_num_batched_tokens": 8192,
            "gpu_memory_utilization": 0.9}
TOP_SHARE = 0.01  # the top group: the best 1% of the configs


def value(p: dict[str, Any]) -> float:
    """Output tokens/s of one config (made up; see the docstring)."""
    tp, dp = p["tensor_parallel_size"], p["data_parallel_size"]
    seqs = math.exp(-((math.log2(p["max_num_seqs"]) - math.log2(384 * min(tp, 4) / 2)) ** 2) / 4)
    tokens = math.exp(-((math.log2(p["max_num_batched_tokens"]) - 13) ** 2) / 6)
    memory = {0.85: 0.93, 0.9: 0.97, 0.95: 1.0}[p["gpu_memory_utilization"]]
    wobble = int(hashlib.sha256(repr(sorted(p.items())).encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return 2500 * tp ** 0.75 * dp ** 0.95 * (0.5 + 0.5 * seqs) * (0.7 + 0.3 * tokens) * memory * (0.96 + 0.08 * wobble)


def seconds(p: dict[str, Any]) -> float:
    return 240 + 60 * math.log2(p["tensor_parallel_size"] * p["data_parallel_size"]) + 360


def grid() -> list[dict[str, Any]]:
    return [dict(zip(SPACE, combo, strict=True)) for combo in itertools.product(*SPACE.values())
            if combo[0] * combo[1] <= GPUS_PER_NODE]


@dataclass
class Launch:
    gpus: int
    duration: float
    done: threading.Event = field(default_factory=threading.Event)
    end: float = 0.0


@dataclass
class Cluster:
    """Simulated time and GPUs. Launches wait, oldest first, for a node with their GPUs free; the clock
    moves to the next launch's end only when every driver waits (the drivers' thinking takes no time)."""

    drivers: int
    now: float = 0.0
    free: list[int] = field(default_factory=lambda: [GPUS_PER_NODE] * NODES)
    waiting: list[Launch] = field(default_factory=list)
    running: list[tuple[float, int, int, Launch]] = field(default_factory=list)  # end, order, node, launch
    busy_gpu_s: float = 0.0
    blocked: int = 0
    lock: threading.Condition = field(default_factory=threading.Condition)
    order: itertools.count = field(default_factory=itertools.count)

    def occupy(self, gpus: int, duration: float) -> float:
        """Hold `gpus` GPUs of one node for `duration` simulated seconds; the time it ended."""
        launch = Launch(gpus, duration)
        with self.lock:
            self.waiting.append(launch)
            self._place()
            self.blocked += 1
            self._advance()
        launch.done.wait()
        return launch.end

    def leave(self) -> None:
        """A driver finished its trials: it no longer holds the clock back."""
        with self.lock:
            self.drivers -= 1
            self._advance()

    def _place(self) -> None:
        for launch in list(self.waiting):
            node = next((n for n in range(NODES) if self.free[n] >= launch.gpus), None)
            if node is not None:
                self.free[node] -= launch.gpus
                self.waiting.remove(launch)
                heapq.heappush(self.running, (self.now + launch.duration, next(self.order), node, launch))
                self.busy_gpu_s += launch.gpus * launch.duration

    def _advance(self) -> None:
        while self.running and self.blocked >= self.drivers:  # every driver waits on a launch
            end, _, node, launch = heapq.heappop(self.running)
            self.now = launch.end = end
            self.free[node] += launch.gpus
            self._place()
            self.blocked -= 1
            launch.done.set()


def run_study(folder: Path, workers: int | str, budget: int, seed: int) -> dict[str, float]:
    folder.mkdir(parents=True)
    (folder / "space.yaml").write_text("engine: vllm\nparams:\n" + "".join(
        f"  {k}: {{type: categorical, choices: {v}}}\n" for k, v in SPACE.items())
        + f"constraints: ['tensor_parallel_size * data_parallel_size <= {GPUS_PER_NODE}']\n")
    (folder / "exp.yaml").write_text(
        "name: cluster\nengine: vllm\nmodel: {path: /models/llama-70b, name: m}\nhardware: {gpus: 8}\n"
        "search_space: space.yaml\nworkload: {num_prompts: 512, input_len: 1024, output_len: 256}\n"
        "load: {max_concurrency: [256]}\nobjective: {metric: output_tok_per_s, direction: maximize}\n"
        f"study: {{storage: 'sqlite:///{folder}/study.db', sampler: tpe, seed: {seed}}}\n"
        "stop: {patience: null}\nconfirm: {top_k: 0}\nquality: off\nexecutor: ray\n")
    exp = load_experiment(folder / "exp.yaml")
    engine = get_engine("vllm")
    nodes = [placement.Node(f"node{i}", f"10.0.0.{i}", 64, GPUS_PER_NODE) for i in range(NODES)]
    want = placement.config_need(engine, exp.config, {}, nodes)  # the defaults' need, as the executor asks it
    if workers == "auto":  # what `autotuner run --ray` starts (compose.ray_workers)
        workers = placement.trials_in_flight(want, nodes, budget, exp.config.ray.trials_at_once)
    elif workers == "fill":  # as many launches of the defaults as the nodes hold (the rule before ROUNDS)
        workers = min(placement.trials_at_once(want, nodes), budget)
    n = int(workers)
    cluster = Cluster(drivers=n)
    values = sorted((value(p) for p in grid()), reverse=True)
    best, bar = values[0], values[max(0, round(len(values) * TOP_SHARE) - 1)]
    measured: list[tuple[float, float]] = []  # (simulated end, value)

    def lookup(params: dict[str, Any], **_: Any) -> TrialResult:
        p = {**DEFAULTS, **params}
        need = placement.config_need(engine, exp.config, params, nodes)
        if why := placement.unplaceable(need, nodes):  # what the executor refuses before a launch
            return TrialResult("FAIL", failure_class="infeasible", reason=f"no node of the Ray cluster fits: {why}")
        ended = cluster.occupy(need.gpus, seconds(p))
        v = value(p)
        with cluster.lock:
            measured.append((ended, v))
        return scored(exp, [{"max_concurrency": 256, "output_tok_per_s": v, "error_rate": 0.0}])

    def work(k: int) -> None:
        try:
            driver = replay_driver(exp, engine, folder / f"w{k}", lookup)
            driver.run(budget // n + (1 if k < budget % n else 0))
        finally:
            cluster.leave()

    threads = [threading.Thread(target=work, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    top = [end for end, v in measured if v >= bar]
    end = max((e for e, _ in measured), default=0.0)
    return {"workers": n, "top_h": min(top) / 3600 if top else math.inf, "all_h": end / 3600,
            "utilisation": cluster.busy_gpu_s / (NODES * GPUS_PER_NODE * end) if end else 0.0,
            "best_share": max((v for _, v in measured), default=0.0) / best}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=int, default=64)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--workers", default="1,8,fill,auto")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    for noisy in ("alembic", "mlflow"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    configs = grid()
    print(f"64-GPU cluster ({NODES} nodes x {GPUS_PER_NODE} GPUs), {len(configs)} configs needing 1-8 GPUs, "
          f"budget {args.budget} trials, {args.seeds} seeds; top group: the best {TOP_SHARE:.0%} "
          f"({round(len(configs) * TOP_SHARE)} configs)")
    print(f"{'trials in flight':>18} | {'hours to top group [range] found':>32} | {'hours, whole budget':>22} | "
          f"{'GPU utilisation':>18} | best found (median)")
    serial_all = None
    for workers in args.workers.split(","):
        rows = []
        with tempfile.TemporaryDirectory() as tmp:
            for seed in range(args.seeds):
                rows.append(run_study(Path(tmp) / f"s{seed}", workers, args.budget, seed))
        n = rows[0]["workers"]
        top = [r["top_h"] for r in rows]
        found = sum(math.isfinite(t) for t in top)
        alls = [r["all_h"] for r in rows]
        serial_all = serial_all or statistics.median(alls)
        median_top = statistics.median(top)  # a seed that never found it counts as infinitely late
        print(f"{f'{n} ({workers})':>18} | {median_top:7.1f} h [{min(top):.1f}-{max(top):.1f}] {found}/{len(top)} | "
              f"{statistics.median(alls):7.1f} h ({serial_all / statistics.median(alls):4.1f}x) | "
              f"{statistics.median(r['utilisation'] for r in rows):17.0%} | "
              f"{statistics.median(r['best_share'] for r in rows):.1%} of the best")


if __name__ == "__main__":
    main()
