"""MLflow tracking: one parent run per study, one nested run per trial.

The only module that imports mlflow; the tuner talks to `MlflowTracker`. The Optuna storage is the
source of truth and MLflow mirrors it for people to compare trials:
- a resumed study finds and continues its parent run (tagged with the study name);
- every trial's run is built from the trial as Optuna holds it (`trial_record`), so a run that could
  not be logged is logged later, the same way (`backfill`);
- a tracking server that is down or slow never stops the study: each call is retried with backoff,
  then tracking is marked unavailable and skipped (costing no more time) until the next trial, which
  probes it once and, when it is back, backfills what it missed.

Layout (the README's "Comparing trials in MLflow" lists every name): one experiment per study; a parent
run holding the settings, the search space, `best_so_far_<objective>` per trial and the study's report,
plots and best-config files; a nested run per trial with the params as sampled, the best level's
metrics, each level as a step under `level/`, the engine's sampled /metrics under `server/`, tags
(trial, state, failure class, engine and version, launcher, image, `host.*`) and artifacts (argv,
server log, requests.jsonl, server_metrics.jsonl, bench.json, the resolved experiment).
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from optuna.trial import FrozenTrial
from tenacity import Retrying, stop_after_attempt, wait_exponential

from autotuner.core import record
from autotuner.util import locks

LEVEL_PREFIX = "level/"  # per-load-level series (step = level index); plain names hold the trial's result
STUDY_TAG = "autotuner.study"
ROLE_TAG = "autotuner.role"
_T = TypeVar("_T")
# MLflow 3's UI opens a "GenAI" overview for experiments of unknown kind; this opens the runs table.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}


def default_tracking_uri(root: Path) -> str:
    """The local store: an SQLite database under mlruns/ (MLflow's file store is deprecated)."""
    return f"sqlite:///{(root / 'mlflow.db').resolve()}"


@dataclass
class TrialRecord:
    """One trial as MLflow shows it, derived from the Optuna trial alone (plus its folder of files)."""

    number: int
    status: str  # MLflow run status: FINISHED, FAILED or KILLED
    params: dict[str, Any]
    metrics: dict[str, float]
    steps: list[dict[str, float]]
    tags: dict[str, str]
    artifact_dir: Path  # every file in it is logged: command, server log, bench JSON, failure, launch files


def trial_record(trial: FrozenTrial, artifact_dir: Path, metric: str, direction: str,
                 common_tags: Mapping[str, str]) -> TrialRecord:
    attrs = trial.user_attrs  # the keys are record.py's
    view = record.view(trial)
    state = trial.state.name
    failure = attrs.get("failure_class")
    status = {"COMPLETE": "FINISHED", "PRUNED": "KILLED"}.get(state, "FAILED")
    if failure == "interrupted":
        status = "KILLED"
    levels = list(attrs.get("levels") or [])
    timings = attrs.get("timings") or {}
    tags = {
        **common_tags,
        "autotuner.trial": str(trial.number),
        "autotuner.state": state,
        "autotuner.failure_class": failure or "",
        "autotuner.failure_reason": (attrs.get("failure_reason") or "")[:5000],
        "autotuner.baseline": str(bool(attrs.get("baseline"))).lower(),
    }
    if attrs.get("engine_version"):
        tags["autotuner.engine_version"] = attrs["engine_version"]
    if attrs.get("reused_from") is not None:
        tags["autotuner.reused_from"] = str(attrs["reused_from"])
    tags.update(attrs.get("launch_tags") or {})
    return TrialRecord(
        number=trial.number, status=status,
        # The params exactly as sampled, and the flags they became (what a user pastes).
        params={**(dict(trial.params) or {"baseline": "engine defaults"}), "engine_args": attrs.get("engine_args", "")},
        metrics={**view.scored_metrics(metric, direction), **view.quality,
                 **{f"time_{k}": v for k, v in timings.items()}, **_found_load(attrs)},
        steps=levels, tags=tags, artifact_dir=artifact_dir,
    )


def _found_load(attrs: Mapping[str, Any]) -> dict[str, float]:
    """The highest load that met the SLO, where the trial has one (a load search's answer)."""
    found = attrs.get("max_load_meeting_slo")
    return {"max_load_meeting_slo": float(found)} if found is not None else {}


def _quiet() -> None:
    # MLflow's and Alembic's INFO lines go where `autotuner run` sends library logs (logfile.py).
    # MLflow's own HTTP retries would wait minutes for a dead server; ours are shorter and bounded.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")
    # A link per closed run would bury the tuner's own progress lines.
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")


class MlflowTracker:
    """Records a study in MLflow. `uri` None means the local store under `root` (default mlruns/)."""

    def __init__(self, uri: str | None = None, root: Path = Path("mlruns"),
                 warn: Callable[[str], None] = lambda message: None, attempts: int = 3):
        _quiet()
        from mlflow.tracking import MlflowClient

        self.warn = warn
        self.available = True
        self.missed = False  # something was not logged: backfill once the server is back
        self._attempts = attempts
        self.uri = uri or default_tracking_uri(root)
        self._artifact_root = (root / "artifacts").resolve() if uri is None else None
        if uri is None:
            root.mkdir(parents=True, exist_ok=True)
        with locks.exclusive(self.uri):  # opening a new store migrates its schema: one tuner at a time
            self.client = MlflowClient(tracking_uri=self.uri)
            self._safe("open the store", lambda: self.client.search_experiments(max_results=1))
        self.parent_run_id: str | None = None
        self.experiment_id: str | None = None
        self._study: tuple[str, Mapping[str, Any], Mapping[str, str]] | None = None

    # --- resilience -----------------------------------------------------------------------------------

    def _safe(self, what: str, fn: Callable[[], _T]) -> _T | None:
        if not self.available:
            self.missed = True
            return None
        try:
            for attempt in Retrying(stop=stop_after_attempt(self._attempts), wait=wait_exponential(0.5, max=4),
                                    reraise=True):
                with attempt:
                    return fn()
        except Exception as e:  # any failure of the tracking side is tracking's problem, not the study's
            self.available = False
            self.missed = True
            self.warn(f"MLflow unavailable ({what}: {type(e).__name__}: {str(e).splitlines()[0][:200]}); "
                      "the study goes on and logs what it missed once MLflow is back")
        return None

    def probe(self) -> bool:
        """At a trial boundary: is a tracking side that failed back? (One cheap call.)"""
        if self.available:
            return True
        try:
            self.client.search_experiments(max_results=1)
        except Exception:
            return False
        self.available = True
        self.warn("MLflow is back")
        if self.parent_run_id is None and self._study:
            self.start_study(*self._study)
        return self.available

    # --- study ----------------------------------------------------------------------------------------

    def start_study(self, study_name: str, params: Mapping[str, Any], tags: Mapping[str, str]) -> str | None:
        """Create the study's experiment and parent run, or continue them. (Trial runs a killed tuner left
        open are closed by `backfill`, with how the Optuna storage says their trials ended.)"""
        self._study = (study_name, params, tags)
        return self._safe("start study", lambda: self._start_study(study_name, params, tags))

    def _start_study(self, study_name: str, params: Mapping[str, Any], tags: Mapping[str, str]) -> str:
        exp = self.client.get_experiment_by_name(study_name)
        if exp is None:
            location = (self._artifact_root / study_name).as_uri() if self._artifact_root else None
            try:
                self.experiment_id = self.client.create_experiment(study_name, artifact_location=location,
                                                                   tags=EXPERIMENT_KIND)
            except Exception:  # another worker created it a moment ago
                exp = self.client.get_experiment_by_name(study_name)
                if exp is None:
                    raise
        if exp is not None:
            self.experiment_id = exp.experiment_id
        found = self._parent_runs(study_name)
        if found:
            self.parent_run_id = found[0].info.run_id
            self.client.update_run(self.parent_run_id, status="RUNNING")
            return self.parent_run_id
        assert self.experiment_id is not None  # created or found above
        run = self.client.create_run(self.experiment_id, run_name=study_name,
                                     tags={ROLE_TAG: "study", STUDY_TAG: study_name, **tags})
        # Workers starting at once may each create one: all keep the oldest, the others delete theirs.
        oldest = self._parent_runs(study_name)[0]
        if oldest.info.run_id != run.info.run_id:
            self.client.delete_run(run.info.run_id)
        else:
            self._log_params(run.info.run_id, params)
        self.parent_run_id = oldest.info.run_id
        return self.parent_run_id

    def _parent_runs(self, study_name: str) -> list[Any]:
        """The study's parent runs, oldest first (ties: by run id, so every worker picks the same)."""
        assert self.experiment_id is not None  # set by start_study
        runs = self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.`{ROLE_TAG}` = 'study' and tags.`{STUDY_TAG}` = '{study_name}'",
            max_results=100)
        return sorted(runs, key=lambda r: (r.info.start_time, r.info.run_id))

    def _trial_runs(self, status: str | None = None) -> list[Any]:
        query = f"tags.`mlflow.parentRunId` = '{self.parent_run_id}'"
        if status:
            query += f" and attributes.status = '{status}'"
        assert self.experiment_id is not None  # set by start_study
        runs, token = [], None
        while True:
            page = self.client.search_runs([self.experiment_id], filter_string=query, max_results=1000,
                                           page_token=token)
            runs += list(page)
            token = page.token
            if not token:
                return runs

    def log_study(self, metrics: Mapping[str, float] | None = None, tags: Mapping[str, str] | None = None,
                  artifacts: Mapping[str, str | Path] | None = None) -> None:
        if self.parent_run_id:
            run_id = self.parent_run_id
            self._safe("study summary", lambda: self._log(run_id, metrics=metrics, tags=tags, artifacts=artifacts))

    def end_study(self, status: str = "FINISHED") -> None:
        if self.parent_run_id:
            run_id = self.parent_run_id
            self._safe("end study", lambda: self.client.set_terminated(run_id, status=status))

    # --- trials ---------------------------------------------------------------------------------------

    def start_trial(self, number: int, tags: Mapping[str, str]) -> str | None:
        """Open the trial's run so load levels can be logged live; None when tracking is unavailable."""
        self.probe()
        if self.missed and self.available:
            self.warn("MLflow: logging what it missed")  # the tuner calls backfill next
        if not self.parent_run_id:
            return None
        return self._safe("start trial", lambda: self._create_trial_run(number, tags))

    def _create_trial_run(self, number: int, tags: Mapping[str, str]) -> str:
        assert self.parent_run_id and self.experiment_id
        run = self.client.create_run(
            self.experiment_id, run_name=f"trial-{number:04d}",
            tags={"mlflow.parentRunId": self.parent_run_id, ROLE_TAG: "trial", "autotuner.trial": str(number),
                  **tags},
        )
        return run.info.run_id

    def log_step(self, run_id: str | None, step: int, metrics: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        if run_id:
            now = _now_ms()
            self._safe("log step", lambda: self.client.log_batch(
                run_id, metrics=[Metric(k, float(v), now, step) for k, v in metrics.items()]))

    def log_trial(self, record: TrialRecord, run_id: str | None = None) -> bool:
        """Log a finished trial into its run (created now when `run_id` is None) and close the run."""
        if not self.parent_run_id and not (self.probe() and self.parent_run_id):
            self.missed = True
            return False
        return self._safe(f"trial {record.number}", lambda: self._log_trial(record, run_id)) is not None

    def _log_trial(self, record: TrialRecord, run_id: str | None) -> bool:
        live = run_id is not None
        if run_id is None:
            run_id = self._create_trial_run(record.number, record.tags)
        self._log_params(run_id, record.params)
        if not live:  # the levels were not logged as they were measured
            from mlflow.entities import Metric

            now = _now_ms()
            self.client.log_batch(run_id, metrics=[Metric(LEVEL_PREFIX + k, float(v), now, step)
                                                   for step, m in enumerate(record.steps) for k, v in m.items()])
        files = sorted(record.artifact_dir.iterdir()) if record.artifact_dir.is_dir() else []
        artifacts = {f.name: f for f in files if f.is_file()}
        self._log(run_id, metrics=record.metrics, tags=record.tags, artifacts=artifacts)
        self.client.set_terminated(run_id, status=record.status)
        return True

    def backfill(self, records: Iterable[TrialRecord], force: bool = False) -> int:
        """Log every finished trial MLflow lacks (or holds still open); returns how many were logged.
        Only looks when something was missed, or when `force`d (a resumed study: an earlier tuner may
        have died while MLflow was down)."""
        if not (self.missed or force) or not self.probe() or not self.parent_run_id:
            return 0
        runs = self._safe("list trial runs", self._trial_runs) or []
        closed = {r.data.tags.get("autotuner.trial") for r in runs if r.info.status != "RUNNING"}
        open_runs = {r.data.tags.get("autotuner.trial"): r.info.run_id for r in runs if r.info.status == "RUNNING"}
        logged = 0
        for rec in records:
            if str(rec.number) in closed:
                continue
            if not self.log_trial(rec, run_id=open_runs.get(str(rec.number))):
                return logged
            logged += 1
        self.missed = not self.available
        return logged

    def log_series(self, run_id: str | None, points: Sequence[tuple[str, float, int, int]]) -> None:
        """Metric histories: (key, value, step, timestamp in ms) points, e.g. the engine's /metrics samples."""
        from mlflow.entities import Metric

        if not run_id:
            return
        batch = [Metric(k, float(v), ts, step) for k, v, step, ts in points if v == v]  # NaN left out
        for i in range(0, len(batch), 1000):  # MLflow's limit per batch
            chunk = batch[i:i + 1000]
            self._safe("server metrics", functools.partial(self.client.log_batch, run_id, metrics=chunk))

    # --- helpers --------------------------------------------------------------------------------------

    def _log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        if params:
            self.client.log_batch(run_id, params=[Param(k, _param_text(v)) for k, v in params.items()])

    def _log(self, run_id: str, *, metrics: Mapping[str, float] | None, tags: Mapping[str, str] | None,
             artifacts: Mapping[str, str | Path] | None) -> None:
        from mlflow.entities import Metric, RunTag

        now = _now_ms()
        self.client.log_batch(
            run_id,
            metrics=[Metric(k, float(v), now, 0) for k, v in (metrics or {}).items()],
            tags=[RunTag(k, str(v)) for k, v in (tags or {}).items()],
        )
        for name, content in (artifacts or {}).items():
            # "plots/x.png" goes into the run's plots/ folder; a Path keeps its own file name.
            folder = str(Path(name).parent) if "/" in name else None
            if isinstance(content, Path):
                if content.is_file():
                    self.client.log_artifact(run_id, str(content), artifact_path=folder)
            else:
                self.client.log_text(run_id, content, name)  # name may hold a folder: plots/x.html


def _param_text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text[:6000]


def _now_ms() -> int:
    return int(time.time() * 1000)
