"""Crash-awareness for Optuna's samplers: learn where configurations fail, without fake numbers.

A configuration that failed (crashed, out of memory, infeasible, ...) stays a FAIL trial in the storage,
with its class, and carries a violated constraint (`failure` = 1). Optuna's samplers only learn from
COMPLETE and PRUNED trials, so `FailureAwareSampler` wraps one and shows it each such trial as pruned
and infeasible: TPE then puts it in its "bad" group, below every measured trial, and samples away from
the region, just as it does for constraint-violating trials. Interrupted trials carry no constraint
(they say nothing about the configuration) and stay invisible to the sampler.
"""

from __future__ import annotations

import copy
from collections.abc import Container, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

FAILURE_CONSTRAINT = "failure"


def is_config_failure(trial: FrozenTrial) -> bool:
    return trial.state == TrialState.FAIL and trial.constraints.get(FAILURE_CONSTRAINT, 0.0) > 0


class _StudyView:
    """The study as the wrapped sampler should see it: failed configurations as infeasible, pruned trials."""

    def __init__(self, study: optuna.Study):
        self._study = study

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None,
                    use_cache: bool = False) -> list[FrozenTrial]:
        trials = self._study._get_trials(deepcopy=deepcopy, states=None, use_cache=use_cache)
        shown = []
        for t in trials:
            if is_config_failure(t):
                t = copy.copy(t)
                t.state = TrialState.PRUNED
            if states is None or t.state in states:
                shown.append(t)
        return shown

    def get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        return self._get_trials(deepcopy=deepcopy, states=states)


class FailureAwareSampler(BaseSampler):
    """Wraps a sampler so failed configurations steer it away (see the module docstring)."""

    def __init__(self, base: BaseSampler):
        self.base = base

    def reseed_rng(self) -> None:
        self.base.reseed_rng()

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self.base.infer_relative_search_space(_StudyView(study), trial)  # type: ignore[arg-type]

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return self.base.sample_relative(_StudyView(study), trial, search_space)  # type: ignore[arg-type]

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self.base.sample_independent(_StudyView(study), trial, param_name,  # type: ignore[arg-type]
                                            param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.base.before_trial(study, trial)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self.base.after_trial(study, trial, state, values)
