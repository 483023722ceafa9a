"""What the study driver tells the parts that record a study: MLflow (`tracking.MlflowStudyLog`) and the
study's own files (`study_artifacts.StudyArtifacts`).

The driver calls each event on every callback, in the order they were given. A callback records; it
never decides anything about the study (which config runs, when to stop, who wins) and never raises
into it: an unreachable tracking server or a failed plot is that callback's business.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial

Series = Sequence[tuple[str, float, int, int]]  # (metric name, value, step, timestamp in ms)


class StudyCallback:
    """Every event, as a no-op: a callback overrides the ones it records."""

    def study_started(self, study: optuna.Study) -> None:
        """The study is open (called under the study's creation lock: workers agree on one parent run)."""

    def trials_recovered(self) -> None:
        """Trials of a dead worker or a killed run were failed and queued again."""

    def trial_started(self, number: int, tags: Mapping[str, str]) -> None:
        """Trial `number` is about to launch."""

    def level_measured(self, number: int, step: int, metrics: Mapping[str, float]) -> None:
        """One load level of trial `number` was measured (what the load generator and /metrics saw)."""

    def trial_finished(self, trial: FrozenTrial, series: Series) -> None:
        """Trial `trial` was told to Optuna (its typed record is in its user attributes)."""

    def reference_answered(self, answers: Mapping[str, Any]) -> None:
        """The engine's defaults answered the quality prompts: the study's reference (quality.Answers)."""

    def confirmation_finished(self, measurements: Mapping[str, Any]) -> None:
        """The confirmation round ended (its order and measurements)."""

    def study_aborted(self) -> None:
        """Stopped at once (a second Ctrl-C): record that much, quickly; nothing else comes."""

    def study_finished(self, status: str | None, metrics: Mapping[str, float]) -> None:
        """The run ends: `status` FINISHED or KILLED (None: other workers still add trials), with the
        study's summary metrics (the winner by `winner.decide`)."""
