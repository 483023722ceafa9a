"""The `performance-model` advisor: AIConfigurator's estimate of every config of the space, best first.

Where AIConfigurator covers the model, the GPU system and the engine, the advisor enumerates the space's
values of the params an estimate reads (aic_inputs.VLLM_MODELED; the others are the sampler's), drops the
configs the engine's rules refuse and those it predicts not to fit in memory, and proposes the predicted
best few, each with its predicted throughput. Where it cannot estimate, it raises `CannotEstimate` with
one line (the driver says it once) and steps aside. The estimates are a prior, never a measurement: they
order the first launches and are never recorded as a trial's value.

The estimator is a seam (`Estimator`, AicRunner in a run, a fake in tests); this module never imports
aiconfigurator.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from autotuner.advisors import Proposal, StudySoFar
from autotuner.advisors.aic_inputs import (
    VLLM_MODELED,
    EstimateInputs,
    database_versions,
    gpu_system,
    match_model,
    vllm_inputs,
)
from autotuner.advisors.aic_runner import AicRunner, CannotEstimate, Coverage, Estimate
from autotuner.config import BoolParam, CategoricalParam, FloatParam, IntParam
from autotuner.config.feasibility import feasibility_context
from autotuner.config.space import SearchSpace

FEW = 3  # proposals: the predicted best, enough to cover the model's error without spending the budget on it
MAX_STEPS = 16  # an int or float param with more values than this is sampled at its ends and middle
METRIC = "output_tok_per_s"  # what an estimate predicts; a study scored otherwise gets no ranking


class Estimator(Protocol):
    def describe(self) -> Coverage: ...

    def covered(self, model: str, system: str, backend: str, backend_versions: Sequence[str]) -> str | None: ...

    def estimate(self, model: str, system: str, backend: str, backend_version: str,
                 points: Sequence[dict[str, Any]]) -> list[Estimate]: ...


@dataclass(frozen=True)
class Target:
    """What is estimated: the study's model, GPU system, engine and workload."""

    model_names: tuple[str, ...]  # a folder with config.json, the served name, the folder's name
    model_folder: str | None  # the local model folder, when it holds a config.json
    system: str | None  # AIConfigurator's GPU system (hardware.gpu_system, or the host's GPU name)
    engine: str
    engine_version: str | None
    isl: int
    osl: int
    clients: float | None  # the highest concurrency measured; None under a request rate
    metric: str


@dataclass(frozen=True)
class Prediction:
    params: dict[str, Any]
    tokens_per_s: float
    kv_short: bool


def grid(space: SearchSpace, names: Sequence[str]) -> list[dict[str, Any]]:
    """Every combination of the space's values of `names` (those it has)."""
    axes: dict[str, list[Any]] = {}
    for name, spec in space.config.params.items():
        if name not in names:
            continue
        if isinstance(spec, CategoricalParam):
            axes[name] = list(spec.choices)
        elif isinstance(spec, BoolParam):
            axes[name] = [False, True]
        elif isinstance(spec, (IntParam, FloatParam)):
            step = spec.step or (spec.high - spec.low) / 2
            count = int(round((spec.high - spec.low) / step)) + 1 if step else 1
            values = [spec.low + i * step for i in range(count)] if count <= MAX_STEPS else \
                [spec.low, (spec.low + spec.high) / 2, spec.high]
            axes[name] = [round(v, 6) if isinstance(spec, FloatParam) else int(v) for v in values]
    return [dict(zip(axes, combo, strict=True)) for combo in itertools.product(*axes.values())]


class PerformanceModel:
    name = "performance-model"

    def __init__(self, target: Target, *, effective: Callable[[Mapping[str, Any]], dict[str, Any]],
                 infeasible: Callable[[Mapping[str, Any]], list[str]], estimator: Estimator | None = None,
                 few: int = FEW):
        self.target, self.effective, self.infeasible, self.few = target, effective, infeasible, few
        self.estimator: Estimator = estimator or AicRunner()
        self._resolved: tuple[str, str, str, str] | None = None  # model, system, backend version, aic version
        self._why: str | None = None  # why it cannot estimate, once found
        self._ranking: list[Prediction] | None = None

    @property
    def label(self) -> str:
        model, system, backend_version, version = self._resolve()
        return f"AIConfigurator {version} ({self.target.engine} {backend_version} data, {system})"

    def _resolve(self) -> tuple[str, str, str, str]:
        """Model, system and database version it estimates with; CannotEstimate (said the same each time)."""
        if self._why:
            raise CannotEstimate(self._why)
        if self._resolved is None:
            try:
                self._resolved = self._find()
            except CannotEstimate as e:
                self._why = str(e)
                raise
        return self._resolved

    def _find(self) -> tuple[str, str, str, str]:
        t = self.target
        if t.engine != "vllm":
            raise CannotEstimate(f"no mapping of {t.engine}'s params to AIConfigurator's inputs (vllm only)")
        if t.metric != METRIC:
            raise CannotEstimate(f"it predicts {METRIC}; this study is scored by {t.metric}")
        cov = self.estimator.describe()
        if t.system is None:
            raise CannotEstimate("no GPU system known: set hardware.gpu_system (e.g. h100_sxm; AIConfigurator "
                                 f"{cov.version} has {', '.join(sorted(cov.systems))})")
        if t.system not in cov.systems:
            raise CannotEstimate(f"AIConfigurator {cov.version} has no data for GPU system '{t.system}' (it has "
                                 f"{', '.join(sorted(cov.systems))})")
        versions = database_versions(cov.systems[t.system].get(t.engine, []), t.engine_version)
        if not versions:
            raise CannotEstimate(f"AIConfigurator {cov.version} has no {t.engine} data for {t.system}")
        model = t.model_folder or match_model(t.model_names, cov.models)
        if model is None:
            raise CannotEstimate(f"AIConfigurator {cov.version} bundles no model named like "
                                 f"{', '.join(t.model_names)} and no config.json is at hand")
        backend_version = self.estimator.covered(model, t.system, t.engine, versions)
        if backend_version is None:
            raise CannotEstimate(f"AIConfigurator {cov.version} does not cover {model} on {t.system} with "
                                 f"{t.engine} ({', '.join(versions)})")
        return model, t.system, backend_version, cov.version

    def inputs(self, params: Mapping[str, Any]) -> EstimateInputs:
        return vllm_inputs(self.effective(params), isl=self.target.isl, osl=self.target.osl,
                           clients=self.target.clients)

    def predict(self, configs: Sequence[Mapping[str, Any]]) -> list[Prediction | None]:
        """Each config's predicted throughput (replicas included); None where it did not estimate or predicts
        an OOM. Identical inputs are estimated once."""
        model, system, backend_version, _ = self._resolve()
        inputs = [self.inputs(c) for c in configs]
        unique = list(dict.fromkeys(inputs))
        found = self.estimator.estimate(model, system, self.target.engine, backend_version,
                                        [i.keywords() for i in unique])
        by_input = dict(zip(unique, found, strict=True))
        out: list[Prediction | None] = []
        for config, i in zip(configs, inputs, strict=True):
            e = by_input[i]
            ok = e.tokens_per_s is not None and e.oom is None and e.error is None
            out.append(Prediction(dict(config), e.tokens_per_s * i.replicas, e.kv_short) if ok else None)  # type: ignore[operator]  # ok: set
        return out

    def ranking(self, space: SearchSpace) -> list[Prediction]:
        """The space's configs it can estimate and predicts to fit, best first (a KV cache too small for the
        batch ranks after every config whose batch fits)."""
        if self._ranking is None:
            configs = [c for c in grid(space, VLLM_MODELED) if not self.infeasible(c)]
            found = [p for p in self.predict(configs) if p is not None]
            self._ranking = sorted(found, key=lambda p: (not p.kv_short, p.tokens_per_s), reverse=True)
        return self._ranking

    def reason(self, p: Prediction) -> str:
        short = ", KV cache short of the batch" if p.kv_short else ""
        return f"predicted {p.tokens_per_s:,.0f} tok/s by {self.label}{short} (a prior, not a measurement)"

    def propose(self, study: StudySoFar) -> list[Proposal]:
        """The predicted best few that it tells apart (configs predicted alike differ only where it is blind)."""
        chosen: list[Prediction] = []
        for p in self.ranking(study.space):
            if len(chosen) == self.few:
                break
            if all(abs(p.tokens_per_s - c.tokens_per_s) > 1e-3 * c.tokens_per_s for c in chosen):
                chosen.append(p)
        return [Proposal(p.params, self.reason(p)) for p in chosen]


def target_of(exp: Any, engine_version: str | None, host_gpu_names: str | None) -> Target:
    """The estimate's target for an experiment (autotuner.config.Experiment) on this host."""
    cfg = exp.config
    folder = exp.model_path if (Path(exp.model_path) / "config.json").is_file() else None
    names = tuple(dict.fromkeys([Path(exp.model_path).name, cfg.model.name]))
    clients = cfg.load.max_load if cfg.load.kind == "max_concurrency" else None
    return Target(model_names=names, model_folder=str(folder) if folder else None,
                  system=cfg.hardware.gpu_system or gpu_system(host_gpu_names or ""), engine=cfg.engine,
                  engine_version=engine_version, isl=cfg.workload.input_len, osl=cfg.workload.output_len,
                  clients=clients, metric=cfg.objective.metric)


def performance_model(exp: Any, engine: Any, engine_version: str | None, host_gpu_names: str | None,
                      estimator: Estimator | None = None) -> PerformanceModel:
    """The advisor for an experiment, as a run and a dry run make it: the space's constraints, the engine's
    rules and the values a launch gets (engine_args applied) are the ones the tuner checks."""
    facts, space = feasibility_context(exp), SearchSpace(exp.space)
    version = engine_version if engine_version and engine_version != "unknown" else None
    return PerformanceModel(
        target_of(exp, version, host_gpu_names), estimator=estimator,
        effective=lambda p: engine.effective(p, exp.config.engine_args),
        infeasible=lambda p: space.broken_constraints(p) + engine.infeasible(p, facts))
