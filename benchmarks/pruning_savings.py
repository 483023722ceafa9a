"""Pruning where the value is decided: measurement time saved, and whether the winner stays the same.

Replays a landscape recorded per load level (`benchmarks/measure_landscape.py --levels 4,16`) through
the pieces a trial uses: the quickstart's load plan (`load_search.make_plan`, saturation stop
included), its objective and SLO (`objective.meets`, `trial_values`), the ceiling each level reports
(`pruning.ceiling`) and the study's pruner as `study.make_pruner` builds it, inside a real Optuna study.
Each seed proposes the landscape's configs in its own random order (every config once: the order is
what a sampler changes); a pruned trial costs only the levels it measured.

For each pruner: measurement seconds against no pruning (median over seeds, with the range), trials
pruned, and in how many seeds the winner is the one no pruning finds. `median (old)` is the median
pruner fed each level's own value, as the tuner did before ceilings.

    .venv/bin/python benchmarks/pruning_savings.py [--landscape benchmarks/data/llamacpp_levels.csv]
        [--seeds 20]

It replays and prints; it never asserts.
"""

from __future__ import annotations

import argparse
import csv
import random
import statistics
from pathlib import Path
from typing import Any

import optuna

from autotuner.config import load_experiment
from autotuner.core.load_search import make_plan
from autotuner.core.objective import SloViolated, level_value, meets, trial_values
from autotuner.core.pruning import ceiling, measured_scaling
from autotuner.core.study import make_pruner

REPO = Path(__file__).resolve().parent.parent


def read(path: Path) -> tuple[list[int], list[dict[str, Any]]]:
    with path.open() as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    levels = sorted({int(k.split("@")[1]) for k in rows[0] if k.startswith("output_tok_per_s@")})
    return levels, [r for r in rows if r["failed"] == "0"]


def replay(rows: list[dict[str, Any]], levels: list[int], exp: Any, pruner_name: str, seed: int) -> dict[str, Any]:
    cfg = exp.config
    objective, load = cfg.objective, cfg.load.model_copy(update={"max_concurrency": levels})
    old = pruner_name == "median (old)"
    study = optuna.create_study(direction="maximize", pruner=make_pruner(pruner_name.split()[0], len(levels)))
    order = rows[:]
    random.Random(seed).shuffle(order)
    spent, pruned, best = 0.0, 0, (None, -1.0)
    finished: list[list[dict[str, float]]] = []  # as the executor reads them from the study
    for row in order:
        trial = study.ask()
        plan = make_plan(load, lambda m: meets(m, objective))
        measured: list[dict[str, float]] = []
        level, step, state = plan.next_level([]), 0, "COMPLETE"
        while level is not None:
            c = level["max_concurrency"]
            measured.append(
                {
                    "max_concurrency": c,
                    "output_tok_per_s": float(row[f"output_tok_per_s@{c}"]),
                    "ttft_ms_p99": float(row[f"ttft_ms_p99@{c}"]),
                    "error_rate": float(row[f"error_rate@{c}"]),
                }
            )
            spent += float(row[f"measure_s@{c}"])
            following = plan.next_level(measured)
            if old:  # each level's own value, when it met the SLO
                bound = level_value(measured[-1], objective) if meets(measured[-1], objective) else None
            else:
                learned = (measured_scaling(finished, metric=objective.metric, load_key="max_concurrency",
                                            max_load=max(levels)) if pruner_name == "ceiling" else {})
                bound = ceiling(measured, metric=objective.metric, direction=objective.direction,
                                load_key="max_concurrency", max_load=max(levels),
                                passes=lambda m: meets(m, objective), last_level=following is None, scaling=learned)
            if bound is not None:
                trial.report(bound, step)
                if following is not None and trial.should_prune():
                    state = "PRUNED"
                    break
            level, step = following, step + 1
        finished.append(measured)
        if state == "PRUNED":
            pruned += 1
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            continue
        try:
            value = trial_values(measured, objective)[0]
        except SloViolated:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            continue
        study.tell(trial, value)
        if value > best[1]:
            best = (tuple(row[k] for k in ("parallel", "threads", "cont_batching", "flash_attn")), value)
    return {"seconds": spent, "pruned": pruned, "winner": best[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--landscape", type=Path, default=REPO / "benchmarks" / "data" / "llamacpp_levels.csv")
    ap.add_argument("--seeds", type=int, default=20)
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    levels, rows = read(args.landscape)
    exp = load_experiment(REPO / "experiments" / "quickstart.yaml")
    runs = {name: [replay(rows, levels, exp, name, s) for s in range(args.seeds)]
            for name in ("none", "ceiling (sound)", "ceiling", "median", "median (old)")}
    base = runs["none"]
    print(
        f"\n{len(rows)} configs that start, levels {levels}, {args.seeds} orders; measurement time against no pruning"
    )
    print(f"{'pruner':<14} {'seconds (median)':>17} {'saved: median [min, max]':>27} {'pruned':>7} {'same winner':>12}")
    for name, rs in runs.items():
        saved = sorted(1 - r["seconds"] / b["seconds"] for r, b in zip(rs, base, strict=False))
        same = sum(r["winner"] == b["winner"] for r, b in zip(rs, base, strict=False))
        print(f"{name:<14} {statistics.median(r['seconds'] for r in rs):>17.1f} "
              f"{statistics.median(saved):>12.1%} [{saved[0]:+.1%}, {saved[-1]:+.1%}] "
              f"{statistics.median(r['pruned'] for r in rs):>7} {same:>7}/{len(rs)}")


if __name__ == "__main__":
    main()
