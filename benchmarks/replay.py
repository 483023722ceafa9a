"""What the replay benchmarks share (advisor_replay.py, perfmodel_landscape.py): the real study driver
with one part replaced, a launch that is a lookup into a landscape, and its outputs (report, plots, MLflow
runs) off, since they decide nothing and cost seconds per study; the studies share one MLflow store."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from autotuner.compose import make_driver  # noqa: E402
from autotuner.config import Experiment
from autotuner.core.driver import StudyDriver
from autotuner.core.executor import TrialResult
from autotuner.core.objective import SloViolated, trial_values
from autotuner.core.progress import Progress
from autotuner.engines._base import Engine
from autotuner.launchers.process import ProcessLauncher
from autotuner.tracking import MlflowTracker


def replay_driver(exp: Experiment, engine: Engine, folder: Path, lookup: Callable[..., TrialResult],
                  engine_version: str | None = None) -> StudyDriver:
    """The driver of a study in `folder`, whose every launch is `lookup(params, **_)`; MLflow's store is
    the one beside `folder`."""
    metric = exp.config.objective.metric
    driver = make_driver(exp, engine=engine, launcher=ProcessLauncher(folder / "procs"),
                         tracker=MlflowTracker(root=folder.parent / "mlruns"), results_dir=folder / "results",
                         engine_version=engine_version,
                         progress=lambda total: Progress(total, metric, Console(file=io.StringIO())))
    driver.executor.run = lookup  # type: ignore[method-assign]  # the one replaced part: a launch is a lookup
    driver.callbacks = []  # no report, plots or MLflow runs
    return driver


def scored(exp: Experiment, metrics: list[dict[str, Any]]) -> TrialResult:
    """A looked-up trial's level metrics as the executor would end it: COMPLETE with its values, or FAIL
    when no level meets the SLO."""
    try:
        values = trial_values(metrics, exp.config.objective)
    except SloViolated as e:
        return TrialResult("FAIL", failure_class="slo-violated", reason=str(e), level_metrics=metrics)
    return TrialResult("COMPLETE", values=values, level_metrics=metrics)
