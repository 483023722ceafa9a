"""Trials until the tuner is within 2% of the best, on a landscape computed with AIConfigurator: the real
study driver, advisors and baseline included, on `search_spaces/vllm-gpu.yaml` for Llama-3.1-8B on one
`h100_sxm` (experiments/vllm-h100-8b.yaml: 1024 tokens in, 256 out, 64 and 256 clients).

The landscape: AIConfigurator's estimate (the performance-model advisor's own `predict`, so the same
mapping of our params) for every config of the space it can estimate, at each load level; the params it
is blind to (block size, prefix caching, async scheduling, attention backend, CUDA-graph sizes) do not
change a config's value. Configs the engine's rules refuse cost no launch; configs it predicts out of
memory fail. The driver runs for real; only the trial executor is replaced by a lookup into that
landscape (as benchmarks/advisor_replay.py does for a measured one).

CIRCULAR, said plainly: where the performance-model advisor is on, the prior that proposes is the
landscape that scores, so "with the performance model" is the model agreeing with itself, not evidence
that it helps on a real GPU. The interesting numbers are the tuner as shipped (the engine-knowledge
advisor: the default advisors) against TPE without advisors and against random search.

    nice -n 19 .venv/bin/python benchmarks/perfmodel_landscape.py [--seeds 20] [--budget 60] [--goal 0.02]

Needs AIConfigurator (autotuner[aiconfigurator], or its venv under the user cache). It measures; it never
asserts.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import optuna  # noqa: E402  # after the path insert above

from autotuner.advisors.aic_inputs import VLLM_DEFAULTS, VLLM_MODELED  # noqa: E402
from autotuner.advisors.performance_model import PerformanceModel, grid, performance_model  # noqa: E402
from autotuner.config import Experiment, load_experiment  # noqa: E402
from autotuner.config.space import SearchSpace  # noqa: E402
from autotuner.core.executor import TrialResult  # noqa: E402
from autotuner.core.objective import trial_values  # noqa: E402
from autotuner.engines._base import get_engine  # noqa: E402
from benchmarks.replay import replay_driver, scored  # noqa: E402

EXPERIMENT = REPO / "experiments" / "vllm-h100-8b.yaml"
SYSTEM = "h100_sxm"
ENGINE_VERSION = "0.32.0"  # the experiment's image; AIConfigurator's nearest vLLM database is used
VARIANTS = {  # name -> (sampler, advisors)
    "tuner as shipped (tpe + engine)": ("tpe", ["earlier-studies", "engine"]),
    "+ neighbours": ("tpe", ["earlier-studies", "engine", "neighbours"]),
    "tpe + performance model (circular)": ("tpe", ["performance-model", "earlier-studies", "engine"]),
    "tpe, no advisors": ("tpe", []),
    "random": ("random", []),
}


def experiment_text(folder: Path, sampler: str, advisors: list[str], seed: int) -> str:
    text = EXPERIMENT.read_text()
    text = (text.replace("launcher: docker", "launcher: process").replace("../search_spaces/", f"{REPO}/search_spaces/")
            .replace("sampler: tpe", f"sampler: {sampler}").replace("seed: 0", f"seed: {seed}")
            .replace("sqlite:///autotuner.db", f"sqlite:///{folder}/study.db")
            .replace("hardware:\n  gpus: 1", f"hardware:\n  gpus: 1\n  gpu_system: {SYSTEM}"))
    return text + (f"quality: off\nengine_cache: false\nadvisors: {advisors}\nconfirm: {{top_k: 0}}\n"
                   "stop: {patience: null}\n")


class Landscape:
    """Every config of the space's modeled params: its level metrics (None: predicted out of memory or not
    estimated) or why the engine's rules refuse it."""

    def __init__(self, exp: Experiment, advisor: PerformanceModel):
        self.space = SearchSpace(exp.space)
        self.names = [n for n in self.space.names if n in VLLM_MODELED]
        self.levels = [int(c) for c in exp.config.load.max_concurrency or []]
        configs = grid(self.space, VLLM_MODELED)
        self.refused = {self.key(c): why for c in configs if (why := advisor.infeasible(c))}
        feasible = [c for c in configs if self.key(c) not in self.refused]
        per_level = {}
        for clients in self.levels:
            at = PerformanceModel(dataclasses.replace(advisor.target, clients=clients), effective=advisor.effective,
                                  infeasible=advisor.infeasible, estimator=advisor.estimator)
            per_level[clients] = at.predict(feasible)
        self.metrics: dict[tuple[Any, ...], list[dict[str, float]] | None] = {}
        for i, c in enumerate(feasible):
            preds = [(clients, per_level[clients][i]) for clients in self.levels]
            self.metrics[self.key(c)] = None if any(p is None for _, p in preds) else [
                {"max_concurrency": clients, "output_tok_per_s": p.tokens_per_s, "error_rate": 0.0}
                for clients, p in preds if p is not None]

    def key(self, params: dict[str, Any]) -> tuple[Any, ...]:
        full = {**VLLM_DEFAULTS, **params}
        return tuple(full.get(n) for n in self.names)


def run_study(land: Landscape, advisor: PerformanceModel, folder: Path, sampler: str, advisors: list[str],
              seed: int, budget: int) -> list[float | None]:
    """One study; per launch in order, its value (None: failed)."""
    folder.mkdir(parents=True)
    (folder / "exp.yaml").write_text(experiment_text(folder, sampler, advisors, seed))
    exp = load_experiment(folder / "exp.yaml")
    launches: list[float | None] = []

    def lookup(params: dict[str, Any], **_: Any) -> TrialResult:
        key = land.key(params)
        if key in land.refused:  # the engine's rules: no launch
            return TrialResult("FAIL", failure_class="infeasible", reason=land.refused[key][0])
        metrics = land.metrics.get(key)
        if metrics is None:
            launches.append(None)
            return TrialResult("FAIL", failure_class="oom", reason="predicted out of memory")
        result = scored(exp, metrics)
        launches.append(result.values[0] if result.values else None)
        return result

    driver = replay_driver(exp, get_engine("vllm"), folder, lookup, engine_version=ENGINE_VERSION)
    # The advisor's ranking is computed once for all studies (the same estimates; only time is saved).
    driver.advisors = [advisor if a.name == advisor.name else a for a in driver.advisors]
    driver.run(budget)
    return launches


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--budget", type=int, default=60, help="trials per study")
    parser.add_argument("--goal", type=float, default=0.02, help="within this fraction of the best")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="perfmodel-landscape-") as tmp:
        (Path(tmp) / "exp.yaml").write_text(experiment_text(Path(tmp), "tpe", [], 0))
        exp = load_experiment(Path(tmp) / "exp.yaml")
        advisor = performance_model(exp, get_engine("vllm"), ENGINE_VERSION, None)
        land = Landscape(exp, advisor)
        scored = {k: trial_values(m, exp.config.objective)[0] for k, m in land.metrics.items() if m is not None}
        best = max(scored.values())
        goal = best * (1 - args.goal)
        near = sum(v >= goal for v in scored.values())
        print(f"Llama-3.1-8B (AIConfigurator's meta-llama/Meta-Llama-3.1-8B) on {SYSTEM}, vLLM {ENGINE_VERSION} "
              f"(estimated with {advisor.label}); levels {land.levels} clients")
        print(f"landscape over {', '.join(land.names)}: {len(land.metrics) + len(land.refused)} configs, "
              f"{len(land.refused)} refused by vLLM's rules, {len(land.metrics) - len(scored)} predicted out of "
              f"memory, {len(scored)} estimated; best {best:,.0f} tok/s, {near} within {args.goal:.0%}")
        print(f"defaults (baseline): {scored.get(land.key({}), float('nan')):,.0f} tok/s")
        print("CIRCULAR: with the performance model on, the prior that proposes is the landscape that scores.")
        print(f"{'variant':36} launches to within {args.goal:.0%}: median [min, max] over {args.seeds} seeds")
        for name, (sampler, advisors) in VARIANTS.items():
            hits = []
            for seed in range(args.seeds):
                launches = run_study(land, advisor, Path(tmp) / f"{name.split()[0]}-{len(advisors)}-{seed}", sampler,
                                     advisors, seed, args.budget)
                hits.append(next((i for i, v in enumerate(launches, 1) if v is not None and v >= goal),
                                 args.budget + 1))
            print(f"{name:36} {statistics.median(hits):>6} [{min(hits)}, {max(hits)}]", flush=True)
    print(f"(a study that never got there counts as {args.budget + 1}; refused configs cost no launch)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
