"""Measure an exhaustive grid of llama-server configs once and store the landscape as a CSV.

The landscape is what `benchmarks/sample_efficiency.py` replays as an objective: every config of the
grid below, launched and measured with the project's own pieces (LlamaCppEngine.build, ProcessLauncher,
bench.runner.run_level), one row per config: the config's values, output_tok_per_s, ttft_ms_p99, and
`failed` with the failure's class (a config that aborts at start is data, as in the tuner).

The grid (5 x 2 x 2 x 3 x 2 x 2 = 240 configs) covers the knobs that matter on a CPU (slots,
continuous batching) and some with small effects (flash attention, batch sizes, K-cache type, unified
KV buffer). Batch and micro-batch size are one axis of pairs (llama.cpp's default 2048/512, 512/128 and
a tiny 8/8); 8/8 with 16 slots aborts at start (`GGML_ASSERT(n_outputs_max <= cparams.n_outputs_max)`:
llama.cpp needs -b >= -np), which gives the landscape real failures. Threads are fixed at -t 1: on the
2-core machine this was measured on, shared with other developers' servers and tests (load average
5-14), -t 2 was 3-10x slower than -t 1 (its two threads wait on each other at every step while the
cores are busy elsewhere), and -np 1 -t 2 ran past the 120 s request timeout, so half the grid would
have taken over an hour to measure and only said "-t 2 is bad here".

Configs are measured in a shuffled order (so a change of the machine's load over the run is not
confounded with one param), appended to the CSV as they finish, and skipped when already there, so an
interrupted run resumes. Lines starting with '#' in the CSV say how it was measured.

    .venv/bin/python benchmarks/measure_landscape.py [--out benchmarks/data/llamacpp_landscape.csv]
        [--model models/quickstart.gguf] [--limit N]

With `--levels 4,16` it records a landscape per load level instead, for `benchmarks/pruning_savings.py`:
the quickstart's workload (32 requests of 64 words in, 64 tokens out) at each concurrency in one launch,
each level with prompts of its own (as the tuner sends them), and per level the throughput, TTFT p99
and the seconds the level took. Its grid (LEVELS_GRID) is the knobs with the largest effects, threads
included, so configs that shine only under load are in it:

    .venv/bin/python benchmarks/measure_landscape.py --levels 4,16 --out benchmarks/data/llamacpp_levels.csv

One measurement per config: on a shared 2-core machine a single measurement moves by 5-10% (sometimes
more) between repeats, so the landscape is a noisy snapshot, not ground truth. This script measures;
it never asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import itertools
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from autotuner.bench.runner import run_level  # noqa: E402
from autotuner.engines._base import LaunchContext  # noqa: E402
from autotuner.engines.llamacpp import LlamaCppEngine  # noqa: E402
from autotuner.launchers._base import Handle, LaunchError, free_port  # noqa: E402
from autotuner.launchers.process import ProcessLauncher  # noqa: E402
from autotuner.util import paths  # noqa: E402
from autotuner.workloads.synthetic import Workload, level_workload, warmup_workload  # noqa: E402

# The grid: param (the llamacpp adapter's names) -> values. "batch" is -b/-ub as pairs.
GRID: dict[str, list[Any]] = {
    "parallel": [1, 2, 4, 8, 16],
    "threads": [1],
    "cont_batching": [True, False],
    "flash_attn": ["on", "off"],
    "batch": ["8/8", "512/128", "2048/512"],
    "cache_type_k": ["f16", "q8_0"],
    "kv_unified": [True, False],
}
LEVELS_GRID: dict[str, list[Any]] = {
    "parallel": [1, 2, 4, 8, 16],
    "threads": [1, 2],
    "cont_batching": [True, False],
    "flash_attn": ["on"],
    "batch": ["2048/512"],
    "cache_type_k": ["f16"],
    "kv_unified": [True],
}
LEVELS_WORKLOAD = Workload(endpoint="completions", num_prompts=32, input_len=64, output_len=64, seed=0)
CONFIG_COLUMNS = ["parallel", "threads", "cont_batching", "flash_attn", "batch_size", "ubatch_size", "cache_type_k",
                  "kv_unified"]
COLUMNS = [*CONFIG_COLUMNS, "output_tok_per_s", "ttft_ms_p99", "failed", "failure", "load1"]

WORKLOAD = Workload(endpoint="completions", num_prompts=16, input_len=16, output_len=16, seed=0)
MAX_CONCURRENCY = 16
WARMUP_REQUESTS = 2
STARTUP_TIMEOUT_S = 60.0
REQUEST_TIMEOUT_S = 120.0
MAX_ERROR_RATE = 0.05  # as the tuner's default objective: more failed requests fail the config
ORDER_SEED = 0


def grid_configs(grid: dict[str, list[Any]] = GRID) -> list[dict[str, Any]]:
    """Every config of `grid`, as CSV columns (batch split into batch_size and ubatch_size)."""
    configs = []
    for values in itertools.product(*grid.values()):
        point = dict(zip(grid, values, strict=False))
        b, ub = (int(x) for x in point.pop("batch").split("/"))
        configs.append({**point, "batch_size": b, "ubatch_size": ub})
    return configs


def key(row: dict[str, Any]) -> tuple[str, ...]:
    """A config's identity, from a config dict or a CSV row (both rendered as CSV text)."""
    return tuple(_text(row[c]) for c in CONFIG_COLUMNS)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def read_done(path: Path) -> set[tuple[str, ...]]:
    if not path.exists():
        return set()
    with path.open() as f:
        return {key(row) for row in csv.DictReader(line for line in f if not line.startswith("#"))}


def engine_version(binary: str) -> str:
    engine = LlamaCppEngine()
    try:
        out = subprocess.run(engine.version_argv(binary), capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return engine.parse_version(out.stdout + out.stderr)


@contextlib.contextmanager
def launched(config: dict[str, Any], engine: LlamaCppEngine, launcher: ProcessLauncher, binary: str,
             model: Path, work: Path) -> Iterator[tuple[Handle | None, str]]:
    """The config's server, ready (handle, served name); (None, failure class) when it did not start.
    Stopped, and its log removed, on the way out."""
    ctx = LaunchContext(model_path=model, served_model_name="tiny-llama", port=free_port(), binary=binary)
    spec = engine.build(config, ctx)
    log_path = work / f"server-{ctx.port}.log"
    handle = launcher.start(spec, log_path, {"autotuner.benchmark": "landscape"})
    try:
        try:
            launcher.wait_ready(handle, STARTUP_TIMEOUT_S)
        except LaunchError as e:
            cls, _line = engine.classify_failure(e.log_tail)
            yield None, cls or e.failure_class
            return
        yield handle, spec.served_model_name
    finally:
        launcher.stop(handle)
        log_path.unlink(missing_ok=True)


def measure(config: dict[str, Any], engine: LlamaCppEngine, launcher: ProcessLauncher, binary: str,
            model: Path, work: Path) -> dict[str, Any]:
    """Launch, wait, warm up, measure, stop: the row for this config."""
    row: dict[str, Any] = {"output_tok_per_s": "", "ttft_ms_p99": "", "failed": 0, "failure": ""}
    with launched(config, engine, launcher, binary, model, work) as (handle, name):
        if handle is None:
            return {**row, "failed": 1, "failure": name}
        result, _ = asyncio.run(run_level(handle.base_url, name, WORKLOAD,
                                          max_concurrency=MAX_CONCURRENCY, warmup_requests=WARMUP_REQUESTS,
                                          timeout_s=REQUEST_TIMEOUT_S))
        if not launcher.is_running(handle):
            return {**row, "failed": 1, "failure": "crashed-mid-run"}
        if result.error_rate > MAX_ERROR_RATE:
            return {**row, "failed": 1, "failure": "client-errors"}
        return {**row, "output_tok_per_s": f"{result.output_tok_per_s:.1f}", "ttft_ms_p99": f"{result.ttft_ms.p99:.1f}"}


def level_columns(levels: list[int]) -> list[str]:
    return [f"{m}@{c}" for c in levels for m in ("output_tok_per_s", "ttft_ms_p99", "error_rate", "measure_s")]


def measure_levels(config: dict[str, Any], engine: LlamaCppEngine, launcher: ProcessLauncher, binary: str,
                   model: Path, work: Path, levels: list[int]) -> dict[str, Any]:
    """Launch, wait, warm up, measure each concurrency in `levels` (prompts of its own each), stop."""
    row: dict[str, Any] = {"failed": 0, "failure": ""}
    with launched(config, engine, launcher, binary, model, work) as (handle, name):
        if handle is None:
            return {**row, "failed": 1, "failure": name}
        asyncio.run(run_level(handle.base_url, name, warmup_workload(LEVELS_WORKLOAD, WARMUP_REQUESTS * 2),
                              max_concurrency=levels[0], timeout_s=REQUEST_TIMEOUT_S))
        for step, c in enumerate(levels):
            t = time.perf_counter()
            result, _ = asyncio.run(run_level(handle.base_url, name, level_workload(LEVELS_WORKLOAD, step),
                                              max_concurrency=c, timeout_s=REQUEST_TIMEOUT_S))
            row.update({f"output_tok_per_s@{c}": f"{result.output_tok_per_s:.1f}",
                        f"ttft_ms_p99@{c}": f"{result.ttft_ms.p99:.1f}", f"error_rate@{c}": f"{result.error_rate:.3f}",
                        f"measure_s@{c}": f"{time.perf_counter() - t:.2f}"})
            if not launcher.is_running(handle):
                return {**row, "failed": 1, "failure": "crashed-mid-run"}
        return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "data" / "llamacpp_landscape.csv")
    ap.add_argument("--model", type=Path, default=REPO / "models" / "quickstart.gguf",
                    help="the small random-weight model (python -m autotuner.models.tiny_gguf --size small)")
    ap.add_argument("--limit", type=int, default=None, help="measure at most N configs this run")
    ap.add_argument("--levels", type=lambda t: [int(c) for c in t.split(",")], default=None,
                    help="concurrencies to measure in one launch (a per-level landscape: LEVELS_GRID)")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop the running server on a plain kill too
    binary = paths.llama_server_binary()
    if binary is None or not args.model.exists():
        raise SystemExit("needs llama-server and the model: run scripts/setup.sh first "
                         "(or python -m autotuner.models.tiny_gguf --out MODEL --size small)")

    configs = grid_configs(LEVELS_GRID if args.levels else GRID)
    columns = [*CONFIG_COLUMNS, *level_columns(args.levels), "failed", "failure", "load1"] if args.levels else COLUMNS
    random.Random(ORDER_SEED).shuffle(configs)
    done = read_done(args.out)
    todo = [c for c in configs if key(c) not in done][: args.limit]
    print(f"{len(configs)} configs in the grid, {len(done)} already in {args.out}, measuring {len(todo)}", flush=True)
    if not todo:
        return

    args.out.parent.mkdir(parents=True, exist_ok=True)
    new_file = not args.out.exists()
    engine, t_start = LlamaCppEngine(), time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="landscape-") as tmp, args.out.open("a", newline="") as f:
        work = Path(tmp)
        launcher = ProcessLauncher(work / "procs")
        if new_file:
            f.write(f"# llama-server {engine_version(str(binary))}; model {args.model.name} "
                    f"({args.model.stat().st_size // 2**20} MiB); {os.cpu_count()} CPUs; measured "
                    f"{time.strftime('%Y-%m-%d')} by benchmarks/measure_landscape.py, one measurement per config\n")
            w, conc = (LEVELS_WORKLOAD, f"concurrency {args.levels} in one launch") if args.levels else (
                WORKLOAD, f"concurrency {MAX_CONCURRENCY}")
            f.write(f"# workload: {w.num_prompts} requests, {w.input_len} words in, "
                    f"{w.output_len} tokens out, {conc}, warmup; "
                    f"load1 = the machine's 1-minute load average when the config was measured\n")
        writer = csv.DictWriter(f, fieldnames=columns)
        if new_file:
            writer.writeheader()
        for i, config in enumerate(todo, 1):
            t = time.perf_counter()
            load1 = os.getloadavg()[0]
            measured = (measure_levels(config, engine, launcher, str(binary), args.model.resolve(), work, args.levels)
                        if args.levels else measure(config, engine, launcher, str(binary), args.model.resolve(), work))
            row = {**config, **measured, "load1": f"{load1:.1f}"}
            writer.writerow({k: _text(v) for k, v in row.items()})
            f.flush()
            took = time.perf_counter() - t
            elapsed = time.perf_counter() - t_start
            eta = elapsed / i * (len(todo) - i)
            shown = row.get("output_tok_per_s") or row.get(f"output_tok_per_s@{args.levels[-1]}" if args.levels else "")
            result = f"FAIL {row['failure']}" if row["failed"] else f"{shown:>7} tok/s"
            flags = " ".join(engine.tuning_args(config))
            print(f"[{i:>3}/{len(todo)}] {result:<22} {took:5.1f} s  load {load1:4.1f}  "
                  f"eta {eta / 60:4.1f} min  {flags}",
                  flush=True)
    print(f"done in {(time.perf_counter() - t_start) / 60:.1f} min -> {args.out}")


if __name__ == "__main__":
    main()
