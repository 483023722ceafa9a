"""What Optuna's samplers see of a study: learn where configurations fail, without fake measurements,
and keep the joint model intact.

A configuration that failed (crashed, out of memory, infeasible, ...) stays a FAIL trial in the storage,
with its class, and carries a violated constraint (`failure` = 1). Optuna's samplers learn only from
COMPLETE (and TPE also from PRUNED) trials, so `FailureAwareSampler` wraps one and shows it each such
trial in the form it reads:

- TPE (`style="pruned"`): as a pruned, infeasible trial. TPE puts it in its "bad" group, below every
  measured trial, and samples away from the region, as it does for constraint-violating trials.
- GP and NSGA-II (`style="infeasible"`): as a COMPLETE trial carrying the worst measured value and the
  violated constraint (every measured trial carries `failure` = 0). Both are constraint-aware: GP's
  constrained acquisition learns the region where configs fail, NSGA-II ranks infeasible trials after
  every feasible one; the stand-in value only fills the slot those samplers expect. Until one trial
  has completed there is no such value, and failures stay hidden (those samplers start at random).

Interrupted trials carry no constraint (they say nothing about the configuration) and stay invisible,
as do re-proposals of measured configs (`record.DUPLICATE_OF`: never launched). The baseline trial is
hidden too: it passes no flags, so it has no params, and one trial without params empties the
intersection search space that multivariate TPE models jointly (every param would then be sampled on
its own). TPE also runs with `group=True`, so conditional params (a KV type only with flash attention)
form their own groups instead of removing each other from the joint model.
"""

from __future__ import annotations

import copy
from collections.abc import Container, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

from autotuner.core import record

FAILURE_CONSTRAINT = "failure"
_CONSTRAINT_ATTR = f"constraints:{FAILURE_CONSTRAINT}"  # where Optuna keeps it (optuna.study._constrained_optimization)


def is_config_failure(trial: FrozenTrial) -> bool:
    return trial.state == TrialState.FAIL and trial.constraints.get(FAILURE_CONSTRAINT, 0.0) > 0


def _hidden(trial: FrozenTrial) -> bool:
    """Trials that say nothing about a point of the search space."""
    return bool(trial.user_attrs.get(record.BASELINE)) or trial.user_attrs.get(record.DUPLICATE_OF) is not None


class _StudyView:
    """The study as the wrapped sampler should see it (see the module docstring)."""

    def __init__(self, study: optuna.Study, style: str):
        self._study = study
        self._style = style

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None,
                    use_cache: bool = False) -> list[FrozenTrial]:
        # Every trial stays in the list, in its place: some samplers index it by trial number.
        trials = self._study._get_trials(deepcopy=deepcopy, states=None, use_cache=use_cache)
        worst = self._worst(trials) if self._style == "infeasible" else None
        shown = []
        for t in trials:
            if _hidden(t) or (is_config_failure(t) and self._style == "infeasible" and worst is None):
                t = copy.copy(t)  # as a failure without constraint: what every sampler ignores
                t.state, t._values, t._system_attrs = TrialState.FAIL, None, {
                    k: v for k, v in t.system_attrs.items() if k != _CONSTRAINT_ATTR}
            elif is_config_failure(t) and self._style == "pruned":
                t = copy.copy(t)
                t.state = TrialState.PRUNED
            elif is_config_failure(t):
                t = copy.copy(t)
                t.state, t._values = TrialState.COMPLETE, list(worst or [])
            elif (
                self._style == "infeasible"
                and t.state == TrialState.COMPLETE
                and _CONSTRAINT_ATTR not in t.system_attrs
            ):
                t = copy.copy(t)  # every trial must name the same constraints (GP checks)
                t._system_attrs = {**t.system_attrs, _CONSTRAINT_ATTR: 0.0}
            if states is None or t.state in states:
                shown.append(t)
        return shown

    def _worst(self, trials: list[FrozenTrial]) -> list[float] | None:
        measured = [t.values for t in trials if t.state == TrialState.COMPLETE and t.values and not _hidden(t)]
        if not measured:
            return None
        return [(min if d == optuna.study.StudyDirection.MAXIMIZE else max)(v[i] for v in measured)
                for i, d in enumerate(self._study.directions)]

    def get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        return self._get_trials(deepcopy=deepcopy, states=states)

    @property
    def trials(self) -> list[FrozenTrial]:
        return self.get_trials()


class FailureAwareSampler(BaseSampler):
    """Wraps a sampler so failed configurations steer it away (see the module docstring)."""

    def __init__(self, base: BaseSampler, style: str = "pruned"):
        self.base = base
        self.style = style  # "pruned" (TPE) or "infeasible" (GP, NSGA-II): how a failure is shown

    def reseed_rng(self) -> None:
        self.base.reseed_rng()

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self.base.infer_relative_search_space(_StudyView(study, self.style), trial)  # type: ignore[arg-type]

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return self.base.sample_relative(_StudyView(study, self.style), trial, search_space)  # type: ignore[arg-type]

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self.base.sample_independent(_StudyView(study, self.style), trial, param_name,  # type: ignore[arg-type]
                                            param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.base.before_trial(study, trial)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self.base.after_trial(study, trial, state, values)
