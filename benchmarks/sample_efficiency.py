"""How many trials each sampler needs on a real landscape: a measured grid of llama-server configs, replayed.

`benchmarks/measure_landscape.py` measured every config of a grid once on a real llama-server and stored
the results in `benchmarks/data/llamacpp_landscape.csv`. Here that table is the objective: an Optuna
study suggests the grid's params (categorical over the values the CSV holds), the objective looks the
config up and returns its measured output_tok_per_s. As in the tuner, a config that failed when measured
is told as FAIL with the `failure` constraint set (so make_sampler's FailureAwareSampler learns from it),
and a config proposed again gets its earlier result (the tuner reuses it instead of launching again).
Each sampler runs `--seeds` studies of `--budget` trials (default: twice the grid's size).

Printed: the landscape's summary (best and worst config, spread, failures, how many configs lie within
95% / 99% of the best), then two Markdown tables:
- trials until the best so far reaches 95% and 99% of the landscape's best: the median over seeds, how
  many seeds never got there within the budget (counted as never: ">budget" when that decides the
  median), the distinct configs launched by then, and how many times fewer trials than random search;
- the best so far, as a share of the landscape's best, after 10, 20, 40 and 80 trials (a tuner's usual
  budgets), and the distinct configs launched in 80 trials.

Samplers: `tpe` exactly as autotuner.core.study.make_sampler builds it (the tuner's default), `gp` (the same
for GPSampler; needs torch, which the project does not depend on: skipped with a note when missing; slow:
about 3 minutes per study of 240 trials on 2 busy cores, so pass a smaller --seeds/--budget with it),
`random`, and `grid` (GridSampler over the whole grid, in a seeded random order). `--variants` adds TPE
with 10 or 3 startup trials, univariate, without failure-awareness, and "random config on repeat": when
TPE proposes a config measured before, a random config not measured yet is enqueued as the next trial.

    .venv/bin/python benchmarks/sample_efficiency.py [--csv benchmarks/data/llamacpp_landscape.csv]
        [--budget N] [--seeds 30] [--samplers tpe gp random grid] [--thresholds 0.95 0.99] [--variants]

The replay has no baseline trial, no enqueued configs and no confirmation runs: only what each sampler
proposes. The landscape is one noisy measurement per config, so "the best" is partly the luck of that
measurement; it is the same fixed landscape for every sampler, which keeps the comparison fair, but a
needle made of noise is something no model can predict. This script measures; it never asserts.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import math
import random
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import optuna  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

from autotuner.core.sampling import FAILURE_CONSTRAINT, FailureAwareSampler  # noqa: E402
from autotuner.core.study import make_sampler  # noqa: E402

CHECKPOINTS = (10, 20, 40, 80)  # trials after which the best so far is reported
METRIC = "output_tok_per_s"

# CSV column -> how its text becomes the value a trial suggests. batch_size/ubatch_size form one param,
# "batch" ("2048/512"), as the grid was measured in pairs.
_CONVERT: dict[str, Callable[[str], Any]] = {
    "parallel": int, "threads": int, "cont_batching": lambda s: s == "1", "flash_attn": str, "cache_type_k": str,
    "kv_unified": lambda s: s == "1",
}
PARAMS = ["parallel", "threads", "cont_batching", "flash_attn", "batch", "cache_type_k", "kv_unified"]


@dataclass(frozen=True)
class Landscape:
    """The measured grid: the values of each param, and each config's value (None: it failed).

    Params with one value in the grid (`fixed`) are not suggested: they would change nothing.
    """

    space: dict[str, list[Any]]
    fixed: dict[str, Any]
    values: dict[tuple[Any, ...], float | None]
    failures: dict[tuple[Any, ...], str]

    @property
    def best(self) -> tuple[tuple[Any, ...], float]:
        measured = {k: v for k, v in self.values.items() if v is not None}
        key = max(measured, key=measured.__getitem__)
        return key, measured[key]

    def value(self, params: dict[str, Any]) -> float | None:
        return self.values[tuple(params[name] for name in self.space)]

    def describe(self, key: tuple[Any, ...]) -> str:
        return " ".join(f"{name}={value}" for name, value in zip(self.space, key, strict=False))


def load_landscape(path: Path) -> Landscape:
    with path.open() as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    params: list[dict[str, Any]] = []
    for row in rows:
        p = {name: conv(row[name]) for name, conv in _CONVERT.items() if name in row}
        p["batch"] = f"{row['batch_size']}/{row['ubatch_size']}"
        params.append(p)
    names = [n for n in PARAMS if n in params[0]]
    choices = {n: sorted({p[n] for p in params}, key=lambda v: (isinstance(v, str), v)) for n in names}
    space = {n: c for n, c in choices.items() if len(c) > 1}
    fixed = {n: c[0] for n, c in choices.items() if len(c) == 1}
    values: dict[tuple[Any, ...], float | None] = {}
    failures: dict[tuple[Any, ...], str] = {}
    for row, p in zip(rows, params, strict=False):
        key = tuple(p[n] for n in space)
        if row["failed"] == "1":
            values[key] = None
            failures[key] = row["failure"]
        else:
            values[key] = float(row[METRIC])
    expected = math.prod(len(v) for v in space.values())
    if len(values) != expected or len(rows) != expected:
        raise SystemExit(f"{path}: {len(rows)} rows, but the grid of its values has {expected} configs: "
                         "finish measuring it first (benchmarks/measure_landscape.py resumes)")
    return Landscape(space=space, fixed=fixed, values=values, failures=failures)


class ReplayGridSampler(optuna.samplers.GridSampler):
    """GridSampler that does not call study.stop() once the grid is done: that only works inside
    study.optimize, and the replay's ask/tell loop ends by itself."""

    def after_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial, state: TrialState,
                    values: Any) -> None:
        pass


@dataclass
class Run:
    """One study replayed: when each threshold was reached (trial number, distinct configs launched by
    then; inf: not within the budget) and the best value so far after each checkpoint's trials."""

    trials_to: dict[float, float]
    launches_to: dict[float, float]
    best_at: dict[int, float]
    launches_at: dict[int, int]


@dataclass(frozen=True)
class Strategy:
    """A sampler made from a seed; `explore_on_repeat`: after a trial proposes a config measured before
    (which the tuner reuses instead of launching), enqueue a random config not measured yet."""

    make: Callable[[int], optuna.samplers.BaseSampler]
    explore_on_repeat: bool = False


def replay(landscape: Landscape, strategy: Strategy, seed: int, budget: int, thresholds: tuple[float, ...],
           checkpoints: tuple[int, ...]) -> Run:
    """Run one study against the landscape, as the tuner would: a repeated config gets its earlier result."""
    study = optuna.create_study(direction="maximize", sampler=strategy.make(seed))
    rng = random.Random(seed)
    best_value = landscape.best[1]
    trials_to = {q: math.inf for q in thresholds}
    launches_to = {q: math.inf for q in thresholds}
    best_at: dict[int, float] = {}
    launches_at: dict[int, int] = {}
    best_so_far = 0.0
    launched: set[tuple[Any, ...]] = set()
    for n in range(1, budget + 1):
        trial = study.ask()
        params = {name: trial.suggest_categorical(name, choices) for name, choices in landscape.space.items()}
        key = tuple(params.values())
        repeated = key in launched
        launched.add(key)
        value = landscape.value(params)
        if value is None:
            trial.set_constraint(FAILURE_CONSTRAINT, 1.0)  # as the tuner tells a config that failed
            study.tell(trial, state=TrialState.FAIL)
        else:
            study.tell(trial, value)
            best_so_far = max(best_so_far, value)
        if repeated and strategy.explore_on_repeat:
            fresh = [k for k in landscape.values if k not in launched]
            if fresh:
                study.enqueue_trial(dict(zip(landscape.space, rng.choice(fresh), strict=False)))
        for q in thresholds:
            if trials_to[q] == math.inf and best_so_far >= q * best_value:
                trials_to[q], launches_to[q] = n, len(launched)
        if n in checkpoints:
            best_at[n], launches_at[n] = best_so_far / best_value, len(launched)
        if n >= max(checkpoints) and all(v != math.inf for v in trials_to.values()):
            break  # what comes after cannot change the results
    for c in checkpoints:  # checkpoints after an early stop keep the final best
        best_at.setdefault(c, best_so_far / best_value)
        launches_at.setdefault(c, len(launched))
    return Run(trials_to, launches_to, best_at, launches_at)


def strategies(landscape: Landscape, names: list[str], variants: bool) -> dict[str, Strategy | str]:
    """Sampler name -> how to make it, or the reason it is skipped."""
    out: dict[str, Strategy | str] = {}
    for name in names:
        if name == "tpe":
            out["tpe (default)"] = Strategy(lambda seed: make_sampler("tpe", seed))
        elif name == "gp":
            if importlib.util.find_spec("torch") is None:
                out["gp"] = "skipped: optuna.samplers.GPSampler needs torch, which is not installed here"
            else:
                out["gp"] = Strategy(lambda seed: make_sampler("gp", seed))
        elif name == "random":
            out["random"] = Strategy(lambda seed: make_sampler("random", seed))
        elif name == "grid":
            out["grid"] = Strategy(lambda seed: ReplayGridSampler(landscape.space, seed=seed))
        else:
            raise SystemExit(f"unknown sampler '{name}' (samplers: tpe, gp, random, grid)")
    if variants:
        def tpe(**kw: Any) -> Callable[[int], optuna.samplers.BaseSampler]:
            options = {"multivariate": True, "constant_liar": True, "n_startup_trials": 5, **kw}
            return lambda s: FailureAwareSampler(optuna.samplers.TPESampler(seed=s, **options))

        out.update({
            "tpe, 10 startup trials": Strategy(tpe(n_startup_trials=10)),
            "tpe, 3 startup trials": Strategy(tpe(n_startup_trials=3)),
            "tpe, univariate": Strategy(tpe(multivariate=False)),
            "tpe, failures not shown to it": Strategy(lambda s: optuna.samplers.TPESampler(
                seed=s, multivariate=True, constant_liar=True, n_startup_trials=5)),
            "tpe + random config on repeat": Strategy(lambda s: make_sampler("tpe", s), explore_on_repeat=True),
        })
    return out


def median_text(xs: list[float], budget: int) -> str:
    m = statistics.median(xs)
    return f">{budget}" if m == math.inf else f"{m:g}"


def ratio_text(reference: list[float], xs: list[float], budget: int) -> str:
    ref, m = statistics.median(reference), statistics.median(xs)
    if m == math.inf:
        return "n/a"
    if ref == math.inf:
        return f">{budget / m:.1f}x"
    return f"{ref / m:.1f}x"


def print_landscape(landscape: Landscape, path: Path, thresholds: tuple[float, ...]) -> None:
    done = {k: v for k, v in landscape.values.items() if v is not None}
    best_key, best = landscape.best
    worst_key = min(done, key=done.__getitem__)
    classes = sorted(set(landscape.failures.values()))
    print(f"Landscape: {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
    print(f"  {len(landscape.values)} configs over {', '.join(f'{n} {v}' for n, v in landscape.space.items())}"
          + (f"; fixed: {', '.join(f'{n}={v}' for n, v in landscape.fixed.items())}" if landscape.fixed else ""))
    print(f"  failed: {len(landscape.failures)} ({len(landscape.failures) / len(landscape.values):.0%}; "
          f"{', '.join(classes) or 'none'})")
    print(f"  best  {best:8.1f} {METRIC}  {landscape.describe(best_key)}")
    print(f"  worst {done[worst_key]:8.1f} {METRIC}  {landscape.describe(worst_key)}")
    ranked = sorted(done.values(), reverse=True)
    print(f"  median {statistics.median(ranked):.1f}, best/worst {best / ranked[-1]:.1f}x, "
          f"2nd best {ranked[1]:.1f} ({ranked[1] / best:.1%} of best)")
    for q in thresholds:
        k = sum(v >= q * best for v in ranked)
        print(f"  within {q:.0%} of best: {k} configs ({k / len(landscape.values):.1%} of the grid; "
              f"a random draw hits one in {len(landscape.values) / k:.0f} on average)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", type=Path, default=REPO / "benchmarks" / "data" / "llamacpp_landscape.csv")
    ap.add_argument("--budget", type=int, default=None,
                    help="trials per study (default: twice the grid's size, so that grid search always gets there "
                         "and random search's median is seen)")
    ap.add_argument("--seeds", type=int, default=30,
                    help="studies per sampler (seeds 0..N-1); with 10 the verdict flipped between seed sets")
    ap.add_argument("--samplers", nargs="+", default=["tpe", "gp", "random", "grid"])
    ap.add_argument("--thresholds", nargs="+", type=float, default=[0.95, 0.99],
                    help="shares of the landscape's best to reach; the last one is compared with random")
    ap.add_argument("--variants", action="store_true",
                    help="also run TPE variants (startup trials, univariate, without failure-awareness, random "
                         "config on repeat)")
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
    thresholds = tuple(sorted(args.thresholds))
    last = thresholds[-1]

    landscape = load_landscape(args.csv)
    print_landscape(landscape, args.csv, thresholds)
    budget = args.budget or 2 * len(landscape.values)
    checkpoints = tuple(c for c in CHECKPOINTS if c <= budget) or (budget,)

    results: dict[str, list[Run]] = {}
    notes: list[str] = []
    for name, strategy in strategies(landscape, args.samplers, args.variants).items():
        if isinstance(strategy, str):
            notes.append(f"{name}: {strategy}")
            continue
        t = time.perf_counter()
        results[name] = [replay(landscape, strategy, seed, budget, thresholds, checkpoints)
                         for seed in range(args.seeds)]
        notes.append(f"{name}: {time.perf_counter() - t:.1f} s for {args.seeds} studies")

    reference = results.get("random")
    shares = " / ".join(f"{q:.0%}" for q in thresholds)
    print(f"\nTrials to reach {shares} of the landscape's best ({landscape.best[1]:.1f} {METRIC}), "
          f"median over {args.seeds} seeds, budget {budget} trials")
    print("(missed: seeds that never got there within the budget; launched: distinct configs run by then)\n")
    header = "| sampler | " + " | ".join(f"trials to {q:.0%} | missed" for q in thresholds)
    print(header + f" | launched to {last:.0%} | {last:.0%}: fewer trials than random |")
    print("|---|" + "---:|---:|" * len(thresholds) + "---:|---:|")
    for name, runs in results.items():
        cells = []
        for q in thresholds:
            xs = [r.trials_to[q] for r in runs]
            cells += [median_text(xs, budget), str(sum(x == math.inf for x in xs))]
        cells.append(median_text([r.launches_to[last] for r in runs], budget))
        cells.append(ratio_text([r.trials_to[last] for r in reference], [r.trials_to[last] for r in runs], budget)
                     if reference else "n/a")
        print(f"| {name} | " + " | ".join(cells) + " |")

    print(f"\nBest so far, as a share of the landscape's best, after N trials (median over {args.seeds} seeds)\n")
    print("| sampler | " + " | ".join(f"after {c}" for c in checkpoints)
          + f" | configs launched in {checkpoints[-1]} |")
    print("|---|" + "---:|" * (len(checkpoints) + 1))
    for name, runs in results.items():
        cells = [f"{statistics.median(r.best_at[c] for r in runs):.0%}" for c in checkpoints]
        cells.append(f"{statistics.median(r.launches_at[checkpoints[-1]] for r in runs):g}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print()
    for note in notes:
        print(note)
    if "tpe (default)" in results and reference:
        tpe = statistics.median(r.trials_to[last] for r in results["tpe (default)"])
        rnd = statistics.median(r.trials_to[last] for r in reference)
        if tpe == math.inf:
            verdict = "no (TPE's median is past the budget)"
        elif rnd == math.inf and 3 * tpe > budget:
            verdict = f"undecided (random's median is past the budget of {budget}: raise --budget)"
        else:
            verdict = "yes" if 3 * tpe <= rnd else "no"
        print(f"default TPE reaches {last:.0%} of the best in at most a third of random's trials: {verdict} "
              f"(median {median_text([tpe], budget)} vs {median_text([rnd], budget)} trials)")


if __name__ == "__main__":
    main()
