"""Losing nothing when a tuner dies: who runs a trial, heartbeats, and failing-and-retrying the trials
of a tuner that is gone.

A RUNNING trial records its worker (`host:pid:start`, as the launchers record an engine's owner). When a
study is opened, a RUNNING trial whose worker was on this host and no longer runs (a SIGKILLed tuner) is
failed at once; a worker on another host is judged by Optuna's heartbeat (its grace period). Either way
Optuna's RetryFailedTrialCallback puts the same configuration back in the queue, so a rerun measures it
again and every finished trial stays.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

import optuna
from optuna.trial import TrialState

from autotuner.launchers._base import owner_alive

WORKER_ATTR = "worker"
HEARTBEAT_INTERVAL_S = 20
GRACE_PERIOD_S = 90
MAX_RETRY = 2


def _worker_gone(worker: str) -> bool:
    """True when `worker` ran on this host and that process is gone (its PID's start time differs)."""
    return not owner_alive(worker)


def recover_stale_trials(study: optuna.Study) -> list[int]:
    """Fail (and queue again) the trials of dead workers; return their numbers."""
    storage = study._storage  # Optuna exposes no public setter for another worker's trial state
    failed = []
    retry = retry_callback()
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = trial.user_attrs.get(WORKER_ATTR)
        if worker and _worker_gone(worker):
            try:
                storage.set_trial_user_attr(trial._trial_id, "failure_class", "interrupted")
                storage.set_trial_user_attr(trial._trial_id, "failure_reason",
                                            f"the tuner running it ({worker}) was killed")
                if storage.set_trial_state_values(trial._trial_id, TrialState.FAIL):
                    retry(study, storage.get_trial(trial._trial_id))
                    failed.append(trial.number)
            except optuna.exceptions.UpdateFinishedTrialError:
                continue  # another worker failed (and queued) it a moment ago
    # Workers on other hosts: Optuna's heartbeat decides, and calls the same retry callback.
    failed += [n for n in _fail_stale_by_heartbeat(study)]
    return failed


def retry_callback() -> optuna.storages.RetryHeartbeatStaleTrialCallback:
    """Optuna's callback that queues a failed trial's params again (at most MAX_RETRY times)."""
    with warnings.catch_warnings():  # experimental in Optuna 5, and the documented way to retry
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRY)


def _heartbeat_enabled(storage: object) -> bool:
    interval = getattr(storage, "get_heartbeat_interval", lambda: None)()
    return interval is not None


def _fail_stale_by_heartbeat(study: optuna.Study) -> list[int]:
    if not _heartbeat_enabled(study._storage):
        return []
    before = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    after = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
    return sorted(before - after)


class Heartbeat:
    """Records a trial's heartbeat every HEARTBEAT_INTERVAL_S while the trial runs (a daemon thread)."""

    def __init__(self, study: optuna.Study, trial: optuna.Trial):
        self._storage: Any = study._storage  # record_heartbeat: on heartbeat storages only (_heartbeat_enabled)
        self._trial_id = trial._trial_id
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Heartbeat:
        if _heartbeat_enabled(self._storage):
            self._storage.record_heartbeat(self._trial_id)
            self._thread = threading.Thread(target=self._beat, name="autotuner-heartbeat", daemon=True)
            self._thread.start()
        return self

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_INTERVAL_S):
            try:
                self._storage.record_heartbeat(self._trial_id)
            except Exception:  # a busy database must not kill the trial; the next beat tries again
                continue

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
