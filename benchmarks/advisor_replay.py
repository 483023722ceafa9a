"""Trials until the tuner is within noise of a landscape's best: the real study driver, advisors and baseline
included, replayed on measured llama-server landscapes.

The driver runs for real (ask, the advisors, re-proposals, tell, stop, records); only the trial executor
is replaced by a lookup, and the study's outputs (report, plots, MLflow), which decide nothing, are off:
a config's launch returns what `benchmarks/measure_landscape.py` measured for it (its level metrics, or
its failure), so a study of 20 trials replays in seconds. The
space is the landscape's own axes (categorical over the values measured), with the grid's -b/-ub pairs
as a constraint (an off-grid pair is infeasible: a trial, no launch). The baseline (no flags) is the
grid's config nearest the engine's defaults (-np auto = 4 slots, every core, continuous batching).

Variants, `--seeds` studies each: the tuner as users get it (TPE, baseline, advisors), TPE without
advisors, random search (baseline on, no advisors). Printed per variant: trials until the best so far
is within `--noise` of the landscape's best (median over seeds, with the range; a seed that never gets
there counts as the budget + 1), and the measurement seconds spent by then where the landscape has them.

    .venv/bin/python benchmarks/advisor_replay.py [--csv benchmarks/data/llamacpp_levels.csv] [--seeds 20]
        [--noise 0.05] [--budget N]

The landscape is one measurement per config: its best is partly luck. It measures; it never asserts.
"""

from __future__ import annotations

import argparse
import csv
import logging
import statistics
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import optuna  # noqa: E402  # after the path insert above

from autotuner.config import load_experiment  # noqa: E402
from autotuner.core.executor import TrialResult  # noqa: E402
from autotuner.core.objective import SloViolated, trial_values  # noqa: E402
from autotuner.engines._base import get_engine  # noqa: E402
from benchmarks.replay import replay_driver, scored  # noqa: E402

AXES = ["parallel", "threads", "cont_batching", "flash_attn", "batch_size", "ubatch_size", "cache_type_k",
        "kv_unified"]
BOOLS = {"cont_batching", "kv_unified"}
SINGLE_LEVEL = 16  # the concurrency of a landscape without per-level columns (measure_landscape's default)
LAUNCH_S = 2.0  # llama-server's start on the quickstart model, added to each launch's measurement time
DEFAULTS = {"parallel": 4, "cont_batching": True, "flash_attn": "on", "batch_size": 2048, "ubatch_size": 512,
            "cache_type_k": "f16", "kv_unified": True}  # -np auto is 4 slots; threads: every core (max below)
VARIANTS = {  # name -> (sampler, advisors)
    "tuner (tpe + advisors)": ("tpe", ["earlier-studies", "engine"]),
    "+ neighbours": ("tpe", ["earlier-studies", "engine", "neighbours"]),
    "tpe, no advisors": ("tpe", []),
    "random": ("random", []),
}


def value_of(text: str, axis: str) -> Any:
    if axis in BOOLS:
        return text == "1"
    try:
        return int(text)
    except ValueError:
        return text


class Landscape:
    def __init__(self, path: Path):
        with path.open() as f:
            rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
        self.levels = sorted({int(k.split("@")[1]) for k in rows[0] if k.startswith("output_tok_per_s@")}) or [
            SINGLE_LEVEL]
        self.rows = {self.key({a: value_of(r[a], a) for a in AXES}): r for r in rows}
        self.axes = {a: sorted({value_of(r[a], a) for r in rows}, key=str) for a in AXES}
        self.pairs = sorted({(int(r["batch_size"]), int(r["ubatch_size"])) for r in rows})

    @staticmethod
    def key(params: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(params[a] for a in AXES)

    def level_metrics(self, row: Mapping[str, str]) -> list[dict[str, float]]:
        if "output_tok_per_s" in row:
            return [{"max_concurrency": SINGLE_LEVEL, "output_tok_per_s": float(row["output_tok_per_s"]),
                     "ttft_ms_p99": float(row["ttft_ms_p99"]), "error_rate": 0.0}]
        return [{"max_concurrency": c, "output_tok_per_s": float(row[f"output_tok_per_s@{c}"]),
                 "ttft_ms_p99": float(row[f"ttft_ms_p99@{c}"]), "error_rate": float(row[f"error_rate@{c}"])}
                for c in self.levels if row.get(f"output_tok_per_s@{c}")]

    def seconds(self, row: Mapping[str, str]) -> float:
        return LAUNCH_S + sum(float(row.get(f"measure_s@{c}") or 0) for c in self.levels)

    def space_yaml(self) -> str:
        lines = ["engine: llamacpp", "params:"]
        for axis, values in self.axes.items():
            if len(values) > 1:
                kind = "{type: bool}" if axis in BOOLS else f"{{type: categorical, choices: {list(values)}}}"
                lines.append(f"  {axis}: {kind}")
        pairs = " or ".join(f"(batch_size == {b} and ubatch_size == {u})" for b, u in self.pairs)
        if len(self.pairs) > 1:
            lines.append(f"constraints: [\"{pairs}\"]")
        return "\n".join(lines) + "\n"


def run_study(land: Landscape, folder: Path, sampler: str, advisors: list[str], seed: int,
              budget: int) -> list[tuple[float | None, float]]:
    """One study; per launched trial in order: (its value, seconds it would have cost)."""
    folder.mkdir(parents=True)
    (folder / "space.yaml").write_text(land.space_yaml())
    exp_text = (REPO / "experiments" / "quickstart.yaml").read_text()
    exp_text = (exp_text.replace("../models/quickstart.gguf", str(REPO / "models" / "quickstart.gguf"))
                .replace("../search_spaces/llamacpp.yaml", "space.yaml")
                .replace("sampler: tpe", f"sampler: {sampler}").replace("seed: 0", f"seed: {seed}")
                .replace("sqlite:///autotuner.db", f"sqlite:///{folder}/study.db")
                .replace("patience: 8", "patience: null").replace("top_k: 2", "top_k: 0")
                .replace("max_concurrency: [4, 16]", f"max_concurrency: {land.levels}"))
    (folder / "exp.yaml").write_text(exp_text + f"quality: off\nadvisors: {advisors}\nhardware: {{cpus: "
                                     f"{max(land.axes['threads'])}}}\n")
    exp = load_experiment(folder / "exp.yaml")
    spent: list[tuple[float | None, float]] = []

    def lookup(params: dict[str, Any], **_: Any) -> TrialResult:
        full = {**DEFAULTS, "threads": max(land.axes["threads"])} if not params else params
        fixed = {a: v[0] for a, v in land.axes.items() if len(v) == 1}
        row = land.rows.get(land.key({**fixed, **full}))
        if row is None:
            spent.append((None, 0.0))
            return TrialResult("FAIL", failure_class="infeasible", reason="not in the landscape")
        if row["failed"] == "1":
            spent.append((None, LAUNCH_S))
            return TrialResult("FAIL", failure_class=row["failure"], reason="failed when measured")
        result = scored(exp, land.level_metrics(row))
        spent.append((result.values[0] if result.values else None, land.seconds(row)))
        return result

    driver = replay_driver(exp, get_engine("llamacpp"), folder, lookup)
    driver.run(budget)
    return spent


def landscape_best(land: Landscape) -> float:
    exp = load_experiment(REPO / "experiments" / "quickstart.yaml")
    best = 0.0
    for row in land.rows.values():
        if row["failed"] == "1":
            continue
        try:
            best = max(best, trial_values(land.level_metrics(row), exp.config.objective)[0])
        except SloViolated:
            continue
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--csv", type=Path, default=REPO / "benchmarks" / "data" / "llamacpp_levels.csv")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--noise", type=float, default=0.05)
    parser.add_argument("--budget", type=int, default=None, help="trials per study (default: the grid's size)")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    land = Landscape(args.csv)
    budget = args.budget or len(land.rows)
    best = landscape_best(land)
    goal = best * (1 - args.noise)
    print(f"{args.csv.name}: {len(land.rows)} configs, levels {land.levels}, best {best:,.1f}; goal: within "
          f"{args.noise:.0%} ({goal:,.1f}); {args.seeds} seeds, {budget} trials each")
    print(f"{'variant':26} {'trials to goal: median [min, max]':>34} {'seconds by then (median)':>25}")
    results: dict[str, list[int]] = {}
    with tempfile.TemporaryDirectory(prefix="advisor-replay-") as tmp:
        for name, (sampler, advisors) in VARIANTS.items():
            trials, seconds = [], []
            for seed in range(args.seeds):
                spent = run_study(land, Path(tmp) / f"{len(results)}-{seed}", sampler, advisors, seed, budget)
                hit = next((i for i, (v, _) in enumerate(spent, 1) if v is not None and v >= goal), budget + 1)
                trials.append(hit)
                seconds.append(sum(s for _, s in spent[:hit]))
            results[name] = trials
            print(f"{name:26} {statistics.median(trials):>14} [{min(trials)}, {max(trials)}]"
                  f"{'':>10} {statistics.median(seconds):>15,.0f}", flush=True)
    ratio = statistics.median(results["random"]) / statistics.median(results["tuner (tpe + advisors)"])
    print(f"random search needs {ratio:.1f}x the trials the tuner needs (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
