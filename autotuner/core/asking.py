"""Asking (one verb of the study): a trial with a configuration no trial has settled yet. The queue
first (the baseline, the experiment's configs, the advisors' proposals, retries), then the sampler; a
re-proposal of a settled config is answered without a launch and the sampler is asked again.
"""

from __future__ import annotations

import random
import warnings
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import TrialState

from autotuner.config.space import RandomSuggester
from autotuner.core import record
from autotuner.core.progress import Progress
from autotuner.core.recovery import WORKER_ATTR
from autotuner.launchers._base import this_owner
from autotuner.util import locks

if TYPE_CHECKING:
    from autotuner.core.driver import StudyDriver

MAX_REASKS = 20  # re-proposals of measured configs in a row before an unmeasured one is drawn at random


def ask(driver: StudyDriver) -> optuna.Trial:
    """The next trial from Optuna (the queue first, then the sampler), marked with this worker."""
    # Under the study's lock: Optuna pops a queued trial by reading then writing its state, and on
    # SQLite (no SELECT ... FOR UPDATE) two workers asking at once could both pop the same one (CI
    # saw it: two workers ran trial #0, and the second could not record it).
    with warnings.catch_warnings(), locks.exclusive(driver.cfg.study.storage):
        # we run our own heartbeat thread (recovery.Heartbeat) in ask/tell
        warnings.filterwarnings("ignore", "Heartbeat of storage is supposed to be used with Study.optimize")
        trial = driver.study.ask()
    trial.set_user_attr(WORKER_ATTR, this_owner())
    return trial


def ask_new(driver: StudyDriver, progress: Progress) -> tuple[optuna.Trial, dict[str, Any]] | None:
    """A trial with a configuration no finished trial measured (a retry measures its own again).

    A re-proposal is told as a FAIL marked `duplicate_of` (hidden from the sampler, never launched,
    never counted) and the sampler is asked again; after `MAX_REASKS` in a row an unmeasured config is
    drawn at random. None when the space holds no unmeasured configuration."""
    for attempt in range(MAX_REASKS + 1):
        trial = ask(driver)
        baseline = bool(trial.user_attrs.get(record.BASELINE))
        params = {} if baseline else driver.space.suggest(trial)
        if trial.user_attrs.get(record.RETRY_OF) is not None:
            return trial, params
        earlier = settled_by(driver, params, baseline, asking=trial.number)
        if earlier is None:
            return trial, params
        trial.set_user_attr(record.DUPLICATE_OF, earlier)
        driver.study.tell(trial, state=TrialState.FAIL)
        if attempt + 1 == MAX_REASKS:
            fresh = unmeasured_config(driver)
            if fresh is None:
                return None
            progress.note(f"the sampler proposed measured configs {MAX_REASKS} times in a row: "
                          "measuring an unmeasured one drawn at random")
            driver.study.enqueue_trial(
                fresh,
                user_attrs={
                    record.PROPOSED_BY: "random",
                    record.REASON: "the sampler kept re-proposing measured configs",
                },
            )
    return None


def settled_by(driver: StudyDriver, params: dict[str, Any], baseline: bool, asking: int | None = None) -> int | None:
    """The trial that settled this configuration: measured it, or failed it (a transient failure is
    settled by its retry; an interruption settles nothing), or another worker measuring it now."""
    key = record.config_key(params, baseline)
    settled = (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED, TrialState.RUNNING)
    for t in map(record.view, driver.study.get_trials(deepcopy=False, states=settled)):
        if t.number == asking or t.config_key != key or t.duplicate_of is not None:
            continue
        if t.state != "FAIL" or t.retry_of is not None or not (t.transient or t.failure_class == "interrupted"):
            return t.number
    return None


def unmeasured_config(driver: StudyDriver) -> dict[str, Any] | None:
    """A random feasible config of the space that no trial settled (None: none found in many draws)."""
    rng = random.Random(len(driver.study.trials))
    for _ in range(500):
        params = driver.space.suggest(RandomSuggester(rng))
        if not driver.executor.infeasible(params) and settled_by(driver, params, False) is None:
            return params
    return None
