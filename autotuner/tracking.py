"""MLflow tracking: one parent run per study, one nested run per trial.

The only module that imports mlflow; the tuner talks to `MlflowTracker`. The Optuna storage is the
source of truth: tracking mirrors it for people to compare trials in the MLflow UI, so a resumed study
finds and continues its parent run (tagged with the study name) instead of starting a new one.

Layout (the README's "Comparing trials in MLflow" lists every name): one experiment per study; a parent
run holding the settings, the search space, `best_so_far_<objective>` per trial and the study's report,
plots and best-config files; a nested run per trial with the params as sampled, the best level's
metrics, each level as a step under `level/`, the engine's sampled /metrics under `server/`, tags
(trial, state, failure class, engine and version, launcher, image, `host.*`) and artifacts (argv,
server log, requests.jsonl, server_metrics.jsonl, bench.json, the resolved experiment).
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

STUDY_TAG = "autotuner.study"
ROLE_TAG = "autotuner.role"
# MLflow 3's UI opens a "GenAI" overview for experiments of unknown kind; this opens the runs table.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}


def default_tracking_uri(root: Path) -> str:
    """The local store: an SQLite database under mlruns/ (MLflow's file store is deprecated)."""
    return f"sqlite:///{(root / 'mlflow.db').resolve()}"


def _quiet() -> None:
    for name in ("mlflow", "alembic", "alembic.runtime.migration"):
        logging.getLogger(name).setLevel(logging.WARNING)


class MlflowTracker:
    """Records a study in MLflow. `uri` None means the local store under `root` (default mlruns/)."""

    def __init__(self, uri: str | None = None, root: Path = Path("mlruns")):
        _quiet()
        from mlflow.tracking import MlflowClient

        self.uri = uri or default_tracking_uri(root)
        self._artifact_root = (root / "artifacts").resolve() if uri is None else None
        if uri is None:
            root.mkdir(parents=True, exist_ok=True)
        self.client = MlflowClient(tracking_uri=self.uri)
        self.parent_run_id: str | None = None
        self.experiment_id: str | None = None

    # --- study ----------------------------------------------------------------------------------------

    def start_study(self, study_name: str, params: Mapping[str, Any], tags: Mapping[str, str]) -> str:
        """Create the study's experiment and parent run, or continue them. Closes runs a killed tuner left."""
        exp = self.client.get_experiment_by_name(study_name)
        if exp is None:
            location = (self._artifact_root / study_name).as_uri() if self._artifact_root else None
            self.experiment_id = self.client.create_experiment(study_name, artifact_location=location,
                                                               tags=EXPERIMENT_KIND)
        else:
            self.experiment_id = exp.experiment_id
        found = self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.`{ROLE_TAG}` = 'study' and tags.`{STUDY_TAG}` = '{study_name}'",
            max_results=1, order_by=["attributes.start_time ASC"],
        )
        if found:
            self.parent_run_id = found[0].info.run_id
            self.client.update_run(self.parent_run_id, status="RUNNING")
            self._close_orphans()
        else:
            run = self.client.create_run(self.experiment_id, run_name=study_name,
                                         tags={ROLE_TAG: "study", STUDY_TAG: study_name, **tags})
            self.parent_run_id = run.info.run_id
            self._log_params(self.parent_run_id, params)
        return self.parent_run_id

    def _close_orphans(self) -> None:
        """A trial run still RUNNING when a study resumes belongs to a tuner that was killed."""
        for run in self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`mlflow.parentRunId` = '{self.parent_run_id}' and attributes.status = 'RUNNING'",
        ):
            self.client.set_tag(run.info.run_id, "autotuner.state", "KILLED")
            self.client.set_terminated(run.info.run_id, status="KILLED")

    def log_study(self, metrics: Mapping[str, float] | None = None, tags: Mapping[str, str] | None = None,
                  artifacts: Mapping[str, str | Path] | None = None) -> None:
        assert self.parent_run_id
        self._log(self.parent_run_id, metrics=metrics, tags=tags, artifacts=artifacts)

    def end_study(self, status: str = "FINISHED") -> None:
        if self.parent_run_id:
            self.client.set_terminated(self.parent_run_id, status=status)

    # --- trials ---------------------------------------------------------------------------------------

    def start_trial(self, number: int, tags: Mapping[str, str]) -> str:
        assert self.parent_run_id and self.experiment_id
        run = self.client.create_run(
            self.experiment_id, run_name=f"trial-{number:04d}",
            tags={"mlflow.parentRunId": self.parent_run_id, ROLE_TAG: "trial", "autotuner.trial": str(number),
                  **tags},
        )
        return run.info.run_id

    def log_step(self, run_id: str, step: int, metrics: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = _now_ms()
        self.client.log_batch(run_id, metrics=[Metric(k, float(v), now, step) for k, v in metrics.items()])

    def log_series(self, run_id: str, points: Sequence[tuple[str, float, int, int]]) -> None:
        """Metric histories: (key, value, step, timestamp in ms) points, e.g. the engine's /metrics samples."""
        from mlflow.entities import Metric

        batch = [Metric(k, float(v), ts, step) for k, v, step, ts in points if v == v]  # NaN left out
        for i in range(0, len(batch), 1000):  # MLflow's limit per batch
            self.client.log_batch(run_id, metrics=batch[i:i + 1000])

    def end_trial(self, run_id: str, *, status: str, params: Mapping[str, Any], metrics: Mapping[str, float],
                  tags: Mapping[str, str], artifacts: Mapping[str, str | Path]) -> None:
        """Log a finished trial. status: FINISHED (complete), FAILED (failed/infeasible), KILLED (pruned/interrupted)."""
        self._log_params(run_id, params)
        self._log(run_id, metrics=metrics, tags=tags, artifacts=artifacts)
        self.client.set_terminated(run_id, status=status)

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
                with tempfile.TemporaryDirectory() as tmp:
                    path = Path(tmp) / Path(name).name
                    path.write_text(content)
                    self.client.log_artifact(run_id, str(path), artifact_path=folder)


def _param_text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text[:6000]


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)
