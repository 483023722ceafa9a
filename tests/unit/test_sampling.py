"""Failed configurations steer the sampler away, while the storage keeps them as FAIL (no fake value)."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from autotuner.core.sampling import FAILURE_CONSTRAINT, FailureAwareSampler, is_config_failure


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


def test_nsga2_and_gp_learn_from_failures_too():
    from autotuner.core.study import make_sampler
    # NSGA-II breeds after its first generation (50 trials); GP after its 10 random start-up trials.
    for name, start, n in (("nsga2", 50, 120),) + ((("gp", 10, 40),) if _has_torch() else ()):
        aware = [sum(t.state == TrialState.FAIL for t in run(make_sampler(name, s), n=n).trials[start:])
                 for s in range(3)]
        blind = [sum(t.state == TrialState.FAIL for t in run(optuna.samplers.RandomSampler(seed=s), n=n).trials[start:])
                 for s in range(3)]
        assert sum(aware) < 0.7 * sum(blind), (name, aware, blind)


def _has_torch() -> bool:
    try:
        import torch  # noqa: F401 - only whether it imports
    except ImportError:
        return False
    return True


def test_the_joint_model_survives_a_baseline_trial_and_conditional_params(tmp_path):
    """A real study as users run it (SQLite, the llama.cpp space with its conditional cache_type_v, the
    baseline trial first): TPE's relative (joint) search space holds every param."""
    from pathlib import Path

    from autotuner.config import load_experiment
    from autotuner.config.space import SearchSpace
    from autotuner.core.study import open_study
    repo = Path(__file__).resolve().parents[2]
    exp = load_experiment(repo / "experiments" / "quickstart.yaml")
    cfg = exp.config.model_copy(update={"study": exp.config.study.model_copy(
        update={"storage": f"sqlite:///{tmp_path}/s.db"})})
    study = open_study(cfg, n_levels=2)
    space = SearchSpace(exp.space)
    study.enqueue_trial({}, user_attrs={"baseline": True})
    t = study.ask()
    study.tell(t, 100.0)
    for i in range(12):
        t = study.ask()
        params = space.suggest(t)
        study.tell(t, 100.0 + i + (5 if params.get("flash_attn") == "off" else 0))
    import warnings
    warnings.simplefilter("ignore", UserWarning)  # heartbeats outside Study.optimize: the tuner's own thread
    trial = study.ask()
    joint = study.sampler.infer_relative_search_space(study, study._storage.get_trial(trial._trial_id))
    assert set(space.names) <= set(joint), sorted(joint)
    # What users got before: plain multivariate TPE on the same trials models no param jointly.
    plain = optuna.samplers.TPESampler(seed=0, multivariate=True)
    assert plain.infer_relative_search_space(study, study._storage.get_trial(trial._trial_id)) == {}
