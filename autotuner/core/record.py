"""THE typed trial record: every key the tuner writes to a trial's Optuna user attributes, and the one
way to read them back (report, tracking, stopping, the winner, the CLI).

Optuna's storage is the source of truth for a study; its user attributes are untyped JSON. This module
names each key once and turns a `FrozenTrial` into a `TrialView` with typed fields, so no other module
spells a key or guesses which load level scored a trial (`scored_level` says it).

It must never talk to MLflow, launch anything or decide anything: it reads and names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from optuna.trial import FrozenTrial, TrialState

# Trial user attributes (one name per fact).
BASELINE = "baseline"  # the engine's defaults: no tuning flag at all
ENQUEUED = "enqueued"  # from the experiment's `enqueue` list
PROPOSED_BY = "proposed_by"  # who proposed the config (sampler, baseline, enqueued, retry, ...)
REASON = "reason"  # why, in one line
RETRY_OF = "retry_of"  # the trial this one measures again (interrupted, or a transient failure)
TRANSIENT = "transient"  # a failure the machine may have caused: settled only by its retry
DUPLICATE_OF = "duplicate_of"  # a proposal of an already measured config: never launched, never counted
STATE = "state"
COMMAND = "command"
TIMINGS = "timings"
LEVELS = "levels"  # per load level: the load generator's, spread and /metrics metrics
SCORED_LEVEL = "scored_level"  # index into LEVELS of the level the value was read at
MAX_LOAD = "max_load_meeting_slo"
ENGINE_VERSION = "engine_version"
ENGINE_ARGS = "engine_args"
LAUNCH_TAGS = "launch_tags"
FAILURE_CLASS = "failure_class"
FAILURE_REASON = "failure_reason"
LOG_TAIL = "log_tail"
QUALITY = "quality"  # the quality gate's numbers (quality.Score.metrics) and the answering speed
REUSED_FROM = "reused_from"  # studies before duplicates were re-asked: a reused, not re-measured, result
# The baseline's answers (quality.Answers.to_json) as soon as it gave them, before its load levels, or
# {NO_ANSWERS: why} when it gave none: a worker waiting for the reference goes on then, not at its end.
EARLY_ANSWERS = "early_answers"
NO_ANSWERS = "no_answers"

# Study user attributes.
CONFIRMATION = "confirmation"  # {trial number: [value or None per confirmation launch]}
CONFIRMATION_ORDER = "confirmation_order"  # the round's candidates, in measuring order
CONFIRMATION_NODE = "confirmation_node"  # on a Ray cluster: the node every confirmation launch ran on
TRAFFIC = "traffic"  # how prompts are made: the one-token words, BOS count, a dataset's counts (core/traffic.py)
STOP_REASON = "stop_reason"
QUALITY_REFERENCE = "quality_reference"  # the defaults' answers to the prompt set (quality.Answers.to_json)


@dataclass(frozen=True)
class TrialView:
    """One finished (or running) trial, typed."""

    number: int
    state: str  # COMPLETE, FAIL, PRUNED, RUNNING, WAITING
    params: dict[str, Any]
    values: list[float] | None
    baseline: bool = False
    failure_class: str | None = None
    failure_reason: str | None = None
    levels: list[dict[str, float]] = field(default_factory=list)
    scored_level: int | None = None
    command: str = ""
    engine_version: str | None = None
    proposed_by: str | None = None
    reason: str | None = None
    retry_of: int | None = None
    duplicate_of: int | None = None
    reused_from: int | None = None
    quality: dict[str, float] = field(default_factory=dict)
    transient: bool = False
    launch_tags: dict[str, str] = field(default_factory=dict)  # where and how it ran (image, Ray node, kernels)

    @property
    def value(self) -> float | None:
        return self.values[0] if self.values else None

    @property
    def counted(self) -> bool:
        """A trial that launched something: not a re-proposal answered without a launch."""
        return self.duplicate_of is None and self.reused_from is None

    @property
    def first_measurement(self) -> bool:
        """Measured its config for the first time (not a retry, a duplicate or an interrupted run)."""
        return self.counted and self.retry_of is None and self.failure_class != "interrupted"

    @property
    def config_key(self) -> ConfigKey:
        return config_key(self.params, self.baseline)

    def scored_metrics(self, metric: str, direction: str) -> dict[str, float]:
        """The metrics of the level the trial was scored by (older records: the best on `metric`)."""
        if self.scored_level is not None and 0 <= self.scored_level < len(self.levels):
            return dict(self.levels[self.scored_level])
        scored = [m for m in self.levels if m.get(metric) is not None]
        if not scored:
            return {}
        if self.value is not None:  # records written before scored_level existed
            return dict(min(scored, key=lambda m: abs(float(m[metric]) - self.value)))  # type: ignore[operator]  # self.value checked above
        pick = max if direction == "maximize" else min
        return dict(pick(scored, key=lambda m: float(m[metric])))


ConfigKey = tuple[bool, tuple[tuple[str, str], ...]]


def config_key(params: Mapping[str, Any], baseline: bool) -> ConfigKey:
    """What makes two trials the same configuration (the baseline passes no flags at all)."""
    return baseline, tuple(sorted((k, repr(v)) for k, v in params.items()))


def view(trial: FrozenTrial) -> TrialView:
    a: Mapping[str, Any] = trial.user_attrs
    return TrialView(
        number=trial.number, state=trial.state.name, params=dict(trial.params),
        values=[float(v) for v in trial.values] if trial.values and trial.state == TrialState.COMPLETE else None,
        baseline=bool(a.get(BASELINE)), failure_class=a.get(FAILURE_CLASS), failure_reason=a.get(FAILURE_REASON),
        levels=list(a.get(LEVELS) or []), scored_level=a.get(SCORED_LEVEL), command=a.get(COMMAND) or "",
        engine_version=a.get(ENGINE_VERSION), proposed_by=a.get(PROPOSED_BY), reason=a.get(REASON),
        retry_of=a.get(RETRY_OF), duplicate_of=a.get(DUPLICATE_OF), reused_from=a.get(REUSED_FROM),
        quality=dict(a.get(QUALITY) or {}), transient=bool(a.get(TRANSIENT)),
        launch_tags=dict(a.get(LAUNCH_TAGS) or {}),
    )


def confirmation(study_attrs: Mapping[str, Any]) -> dict[int, list[float | None]]:
    """The confirmation round's measurements per trial number."""
    return {int(k): list(v) for k, v in (study_attrs.get(CONFIRMATION) or {}).items()}
