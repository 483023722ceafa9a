"""The study's MLflow parent run and one nested run per trial, kept as the driver reports (a study
callback): trials are logged from Optuna's record of them (`trial_record`), so a run missed while the
tracking server was down is backfilled the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotuner.core import record
from autotuner.core.callbacks import Series, StudyCallback
from autotuner.tracking.tracker import LEVEL_PREFIX, MlflowTracker, TrialRecord, trial_record


class MlflowStudyLog(StudyCallback):
    """The study in MLflow, as driver events: a parent run, one nested run per trial (load levels live,
    the scored level's metrics at the end), the summary and the confirmation round on the parent run.
    The Optuna storage stays the truth: what MLflow missed while unreachable is logged from it later."""

    def __init__(self, tracker: MlflowTracker, *, study_name: str, params: Mapping[str, Any],
                 tags: Mapping[str, str], workdir: Path, metric: str, direction: str):
        self.tracker = tracker
        self.study_name, self.params, self.tags = study_name, dict(params), dict(tags)
        self.workdir, self.metric, self.direction = workdir, metric, direction
        self.study: optuna.Study | None = None
        self._runs: dict[int, str | None] = {}

    def record(self, trial: FrozenTrial) -> TrialRecord:
        return trial_record(trial, self.workdir / f"trial-{trial.number:04d}", self.metric, self.direction,
                            self.tags)

    def study_started(self, study: optuna.Study) -> None:
        self.study = study
        self.tracker.start_study(self.study_name, params=self.params, tags=self.tags)
        self._sync(force=True)  # what a killed tuner left open is logged with how it ended

    def trials_recovered(self) -> None:
        self._sync(force=True)

    def trial_started(self, number: int, tags: Mapping[str, str]) -> None:
        self._sync()
        self._runs[number] = self.tracker.start_trial(number, tags={**self.tags, **tags})

    def level_measured(self, number: int, step: int, metrics: Mapping[str, float]) -> None:
        # Per level under level/ (MLflow charts them as one section); the run's own metrics, logged at
        # the end, are the scored level's, so the runs table compares trials by what they scored.
        self.tracker.log_step(self._runs.get(number), step, {LEVEL_PREFIX + k: v for k, v in metrics.items()})

    def trial_finished(self, trial: FrozenTrial, series: Series) -> None:
        run_id = self._runs.pop(trial.number, None)
        self.tracker.log_series(run_id, series)
        self.tracker.log_trial(self.record(trial), run_id=run_id)

    def reference_answered(self, answers: Mapping[str, Any]) -> None:
        self.tracker.log_study(artifacts={"quality_reference.json": json.dumps(answers, indent=2)})

    def confirmation_finished(self, measurements: Mapping[str, Any]) -> None:
        self.tracker.log_study(artifacts={"confirmation.json": json.dumps(measurements, indent=2)})

    def study_aborted(self) -> None:
        self.tracker.end_study("KILLED")

    def study_finished(self, status: str | None, metrics: Mapping[str, float]) -> None:
        if metrics:
            self.tracker.log_study(metrics=metrics)
        if status:
            self.tracker.end_study(status)

    def _sync(self, force: bool = False) -> None:
        """Log to MLflow what it missed while it was unreachable (the Optuna storage is the truth)."""
        if self.study is None or not (force or self.tracker.missed):
            return
        finished = self.study.get_trials(
            deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)
        )
        launched = [t for t in finished if record.view(t).duplicate_of is None]  # a re-proposal never ran: no run
        self.tracker.backfill([self.record(t) for t in launched], force=force)
