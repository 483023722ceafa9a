"""The Optuna study of an experiment: storage, sampler and pruner chosen by name, opened or resumed.

Optuna's own samplers, pruners and storages are used as they are; this module only maps the
experiment's names onto them and turns an unusable storage into a clear error.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from autotuner.config import ConfigError, ExperimentConfig
from autotuner.core import record, recovery, winner
from autotuner.core.pruning import CeilingPruner
from autotuner.core.sampling import FailureAwareSampler
from autotuner.util import locks

STARTUP_TRIALS = 10  # TPE's random start-up when the budget is unknown or large


def startup_trials(budget: int | None) -> int:
    """TPE's random start-up sized to the budget: a third of it, 3 to 10 (no 10 random trials in a night of 8)."""
    return STARTUP_TRIALS if budget is None else min(STARTUP_TRIALS, max(3, budget // 3))


def make_sampler(name: str, seed: int | None, startup: int = STARTUP_TRIALS) -> optuna.samplers.BaseSampler:
    """Optuna's sampler of that name; all but random search learn from failed configurations."""
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return FailureAwareSampler(_base_sampler(name, seed, startup), style="pruned" if name == "tpe" else "infeasible")


def sized_sampler(cfg: ExperimentConfig, study: optuna.Study, budget: int | None) -> optuna.samplers.BaseSampler:
    """The experiment's sampler for a run of `budget` trials (a resumed seeded study reseeded as in open_study)."""
    n = len(study.get_trials(deepcopy=False))
    seed = cfg.study.seed + n if cfg.study.seed is not None and n else cfg.study.seed
    return make_sampler(cfg.study.sampler, seed, startup_trials(budget))


def _base_sampler(name: str, seed: int | None, startup: int = STARTUP_TRIALS) -> optuna.samplers.BaseSampler:
    if name == "tpe":
        # multivariate: llama.cpp's knobs interact (slots x batch x threads); constant_liar: parallel workers.
        # group: conditional params get groups of their own instead of leaving the joint model.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, constant_liar=True,
                                              n_startup_trials=startup)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    raise ConfigError(f"unknown sampler '{name}' (samplers: tpe, random, gp, nsga2)")


def make_pruner(name: str, n_levels: int) -> optuna.pruners.BasePruner:
    if name == "none":
        return optuna.pruners.NopPruner()
    if name == "ceiling":
        return CeilingPruner()
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=0)
    if name == "wilcoxon":
        return optuna.pruners.WilcoxonPruner()
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=1, max_resource=max(n_levels, 1))
    raise ConfigError(f"unknown pruner '{name}' (pruners: none, ceiling, median, wilcoxon, hyperband)")


def check_storage(url: str, field: str = "study.storage") -> None:
    """Fail before anything starts when a database URL cannot work: not a URL, a database SQLAlchemy does
    not know, a driver that is not installed, or a SQLite file in a folder that does not exist. Opens
    no connection: a server that is down is found when the study opens."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise ConfigError(f"{field}: '{url}' is not a database URL (e.g. sqlite:///autotuner.db, "
                          "postgresql://user:password@host/db)") from None
    try:
        parsed.get_dialect().import_dbapi()
    except NoSuchModuleError:
        raise ConfigError(f"{field}: no database called '{parsed.drivername}' ({url}); use sqlite, "
                          "postgresql or mysql") from None
    except ImportError as e:
        raise ConfigError(f"{field}: the {parsed.drivername} driver is not installed ({e})") from None
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        folder = Path(parsed.database).parent
        if not folder.exists():
            raise ConfigError(f"{field}: folder {folder} does not exist ({url})")


def open_study(cfg: ExperimentConfig, n_levels: int) -> optuna.Study:
    """Create the study, or load it when one of that name exists in the storage (resume)."""
    check_storage(cfg.study.storage)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        with warnings.catch_warnings(), locks.exclusive(cfg.study.storage):
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # heartbeats: what we need
            storage = optuna.storages.RDBStorage(
                cfg.study.storage, heartbeat_interval=recovery.HEARTBEAT_INTERVAL_S,
                grace_period=recovery.GRACE_PERIOD_S, heartbeat_stale_trial_callback=recovery.retry_callback(),
            )
            study = optuna.create_study(
                study_name=cfg.study_name, storage=storage, load_if_exists=True,
                directions=cfg.objective.all_directions, sampler=make_sampler(cfg.study.sampler, cfg.study.seed),
                pruner=make_pruner(cfg.study.pruner, n_levels),
            )
    except ImportError as e:
        raise ConfigError(f"study.storage: cannot open {cfg.study.storage}: {e}") from None
    except Exception as e:  # SQLAlchemy's errors for unreachable or malformed URLs
        if type(e).__module__.startswith(("sqlalchemy", "optuna")):
            raise ConfigError(f"study.storage: cannot open {cfg.study.storage}: {str(e).splitlines()[0]}") from None
        raise
    if cfg.study.seed is not None and (n := len(study.get_trials(deepcopy=False))):
        # A resumed study: a sampler seeded as at the start would replay its first proposals, all measured.
        study.sampler = make_sampler(cfg.study.sampler, cfg.study.seed + n)
    with warnings.catch_warnings():  # experimental since Optuna 3.2, stable in use; names the axis in plots
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(cfg.objective.names)
    return study


def candidates(study: optuna.Study) -> list[winner.Candidate]:
    """One candidate per configuration measured to completion, with its confirmation measurements."""
    trials = [record.view(t) for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    confirmations = record.confirmation(study.user_attrs)
    by_config: dict[Any, list[record.TrialView]] = {}
    for t in sorted(trials, key=lambda t: t.number):
        if t.counted and t.value is not None:
            by_config.setdefault(t.config_key, []).append(t)
    out = []
    for same in by_config.values():
        first = same[0]
        confirmed = [v for t in same for v in confirmations.get(t.number, [])]
        out.append(winner.Candidate(first.number, first.value, first.baseline, tuple(confirmed)))  # type: ignore[arg-type]  # complete trials: value set
    return out


def verdict(study: optuna.Study) -> winner.Verdict:
    """The study's winner and gain by the one rule (`winner.decide`); the first objective's direction."""
    direction = "maximize" if study.directions[0] == optuna.study.StudyDirection.MAXIMIZE else "minimize"
    return winner.decide(candidates(study), direction)


def confirmed_winner(study: optuna.Study) -> tuple[int, float | None] | None:
    """A finished study's confirmed winner, if a tuned config won: (its trial number, its gain over the
    defaults); None for a multi-objective study, an unconfirmed winner or the defaults kept."""
    if len(study.directions) > 1:
        return None
    v = verdict(study)
    if v.winner is None or not v.confirmed or v.winner.baseline:
        return None
    return v.winner.number, v.gain


def best_trial(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    """The winner's trial (`verdict`), or None when no trial has completed yet. Multi-objective: the
    member of the Pareto front best on the first metric (the one that also picks each trial's level)."""
    if len(study.directions) > 1:
        return _front_best(study)
    v = verdict(study)
    return study.trials[v.winner.number] if v.winner is not None else None


def best_tuned(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    """The best tuned configuration's trial: the winner, or, where the engine defaults are kept (measured
    best, or a gain within the noise), the tuned config the verdict ranks highest; a config that failed a
    confirmation launch is passed over. None when no tuned config completed."""
    if len(study.directions) > 1:
        return _front_best(study, tuned=True)
    v = verdict(study)
    pick = next((c for c in v.ranking if not c.baseline and c.number not in v.flaky), None)
    return study.trials[pick.number] if pick is not None else None


def _front_best(study: optuna.Study, tuned: bool = False) -> optuna.trial.FrozenTrial | None:
    sign = 1 if study.directions[0] == optuna.study.StudyDirection.MAXIMIZE else -1
    front = [t for t in study.best_trials if record.view(t).counted and not (tuned and t.user_attrs.get("baseline"))]
    return max(front, key=lambda t: sign * t.values[0], default=None)


def primary_value(trial: optuna.trial.FrozenTrial) -> float | None:
    """The first objective's value: `trial.value` raises in a multi-objective study, this does not."""
    return trial.values[0] if trial.values else None
