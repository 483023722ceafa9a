"""Failed configurations steer the sampler away, while the storage keeps them as FAIL (no fake value)."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from autotuner.sampling import FAILURE_CONSTRAINT, FailureAwareSampler, is_config_failure


def run(sampler: optuna.samplers.BaseSampler, n: int = 50) -> optuna.Study:
    """A landscape where half the configs crash: x < 10 fails, else the value is x."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for _ in range(n):
        trial = study.ask()
        x = trial.suggest_int("x", 0, 19)
        y = trial.suggest_categorical("y", ["a", "b"])
        if x < 10:
            trial.set_user_attr("failure_class", "oom")
            trial.set_constraint(FAILURE_CONSTRAINT, 1.0)
            study.tell(trial, state=TrialState.FAIL)
        else:
            study.tell(trial, x + (0.5 if y == "a" else 0.0))
    return study


def failures_after_startup(study: optuna.Study) -> int:
    return sum(t.state == TrialState.FAIL for t in study.trials[10:])


def test_failures_stay_fail_in_the_storage_with_their_class():
    study = run(FailureAwareSampler(optuna.samplers.TPESampler(seed=0, n_startup_trials=10)), n=20)
    failed = [t for t in study.trials if t.state == TrialState.FAIL]
    assert failed and all(t.value is None and is_config_failure(t) for t in failed)


def test_tpe_learns_to_avoid_the_crash_region_only_when_wrapped():
    aware = [failures_after_startup(run(FailureAwareSampler(optuna.samplers.TPESampler(seed=s, n_startup_trials=10))))
             for s in range(5)]
    blind = [failures_after_startup(run(optuna.samplers.TPESampler(seed=s, n_startup_trials=10))) for s in range(5)]
    # Blind TPE never sees the failures, so it keeps landing in the crash region; the wrapped one
    # learns it is worse than anything measured.
    assert sum(aware) < 0.5 * sum(blind), (aware, blind)


def test_interrupted_trials_are_invisible_to_the_sampler():
    study = optuna.create_study(sampler=FailureAwareSampler(optuna.samplers.TPESampler(seed=0)))
    trial = study.ask()
    trial.suggest_int("x", 0, 3)
    study.tell(trial, state=TrialState.FAIL)  # no constraint: an interruption, not the config's fault
    assert not is_config_failure(study.trials[0])
