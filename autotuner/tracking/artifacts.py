"""Study-level outputs, kept up to date while a study runs: the environment and settings in the study's
user attributes, the best value so far on the MLflow parent run, the plots, the best-config files and
the status report.

The tuner calls `start()` once, `after_trial()` after every trial and `finish()` at the end; everything
else it needs is here, so the loop stays a loop. Files go under `results/<study>/`:

    best.json  best-command.sh  best-docker.sh  best-config.<ini|yaml>  report.md  report.json
    plots/     (see plots.py)

and the same files are logged to the study's MLflow parent run (plots under `plots/`). Plot costs are
measured and kept in `self.plot_seconds`; after a trial only the cheap plots are redrawn.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import optuna
from optuna.trial import FrozenTrial

from autotuner import report
from autotuner.config import Experiment, FloatParam, IntParam
from autotuner.config.feasibility import workload_shape
from autotuner.core import launch
from autotuner.core.callbacks import Series, StudyCallback
from autotuner.core.resolved import experiment_from_text, resolved_experiment
from autotuner.core.study import best_trial, primary_value
from autotuner.engines._base import Engine
from autotuner.executors import placement
from autotuner.report import export, plots
from autotuner.stages import kernel_stage
from autotuner.tracking import MlflowTracker
from autotuner.util.secrets import Redactor
from autotuner.workloads.source import shape_lines


def workload_lines(exp: Experiment) -> list[str]:
    """The workload's shape (workloads.source.shape_lines) of the requests every trial sends."""
    w = exp.config.workload
    source = w.source(exp.source.parent, exp.config.load.max_steps)
    return shape_lines(workload_shape(exp, source))


def settings(exp: Experiment) -> dict[str, Any]:
    """What a reader of the report needs to know about how the study measured."""
    c = exp.config
    w = c.workload
    return {
        "model": f"{c.model.name} ({exp.model_path})",
        "workload": f"{w.describe()}, {w.warmup_requests} warm-up",
        "workload_shape": workload_lines(exp),
        "load": c.load.describe(),
        "objective": c.objective.describe()
                     + (" (a Pareto front; every metric at the level the first picks)" if c.objective.multi
                        else " (best level)")
                     + f", at most {c.objective.max_error_rate:.0%} failed requests"
                     + (f", SLO {c.objective.slo}" if c.objective.slo else ""),
        "sampler": f"{c.study.sampler} / {c.study.pruner}",
        "gpus": c.hardware.gpus,
    }


def bounds(exp: Experiment) -> dict[str, tuple[float, float]]:
    return {
        n: (float(p.low), float(p.high)) for n, p in exp.space.params.items() if isinstance(p, (IntParam, FloatParam))
    }


def target(exp: Experiment) -> float | None:
    """The experiment's target value, where the config has one (objective.target or stop.target)."""
    c = exp.config
    for section in ("objective", "stop", "stopping"):
        value = getattr(getattr(c, section, None), "target", None)
        if isinstance(value, (int, float)):
            return float(value)
    return None


def winner_text(fmt: str, engine: Engine, exp: Experiment, row: report.TrialRow, binary: str | None,
                version: str, image: str | None = None) -> str:
    """A trial (the best) in one of export.FORMATS, built as its trials were launched (autotuner.core.launch)."""
    exp = kernel_stage.as_launched(exp, row.launch_tags)  # a Ray node's kernels, where the node chose the key
    if placement.SPREAD_TAG in row.launch_tags:
        if fmt in ("docker", "helm-values"):
            holder = "one container" if fmt == "docker" else "the chart's one pod per engine"
            raise export.ExportError(f"--format {fmt}: the winner ran spread over the nodes of a Ray cluster, "
                                     f"which {holder} cannot hold; --format k8s writes it as a LeaderWorkerSet "
                                     "(a pod a node), --format args gives its command for a node of that cluster")
        if fmt == "k8s":
            return _k8s(engine, placement.spread_launch(exp, engine, None), row, image, version, fmt)
    exp = placement.as_launched(exp, engine, row.launch_tags)  # spread over a Ray cluster's nodes, where it was
    if fmt in ("k8s", "helm-values"):
        return _k8s(engine, exp, row, image, version, fmt)
    winner = launch.planned(exp, engine, row.params, port=launch.EXPORT_PORT, binary=binary,
                            host_port=launch.EXPORT_PORT)
    docker = launch.docker_argv(exp, engine, row.params, host_port=launch.EXPORT_PORT, image=image, version=version)
    return export.export(fmt, engine=engine.name, spec=winner.spec, command=winner.command, docker=docker,
                         tuning_args=engine.tuning_args(row.params), params=row.params,
                         tuning_env=engine.tuning_env(row.params),
                         summary={"trial": row.number, exp.config.objective.metric: row.value})


def _k8s(engine: Engine, exp: Experiment, row: report.TrialRow, image: str | None, version: str,
         fmt: str = "k8s") -> str:
    from autotuner.report import helm_values, kubernetes

    c = launch.in_container(exp, engine, row.params, port=launch.EXPORT_PORT, image=image, version=version)
    if c.settings.network_host:  # a pod has its own network: the server must listen on it, not on loopback
        plain = exp.config.docker.model_copy(update={"network_host": False}) if exp.config.docker else None
        exp = exp.model_copy(update={"config": exp.config.model_copy(update={"docker": plain})})
        c = launch.in_container(exp, engine, row.params, port=launch.EXPORT_PORT, image=image, version=version)
    g = c.gpus
    if g == "all" and not exp.config.hardware.gpus:
        raise export.ExportError(f"--format {fmt}: docker.gpus is 'all' but hardware.gpus is 0: set hardware.gpus "
                                 "to the GPUs the engine needs")
    gpus = exp.config.hardware.gpus if g == "all" else g if isinstance(g, int) else len(g) if g else 0
    metric = exp.config.objective.metric
    annotations = {"autotuner/study": exp.config.study_name, "autotuner/trial": str(row.number),
                   f"autotuner/{metric}": f"{row.value:.1f}"}
    if fmt == "helm-values":
        return helm_values.values(c, name=exp.config.study_name, gpus=gpus, annotations=annotations)
    if placement.SPREAD_TAG in row.launch_tags:  # a pod for each node it spread over
        from autotuner.report import leader_workers

        tags = row.launch_tags
        if placement.SPREAD_NODE_GPUS_TAG not in tags or placement.SPREAD_GPUS_TAG not in tags:
            raise export.ExportError(f"--format {fmt}: the winner ran spread over the nodes of a Ray cluster and "
                                     "its trial did not record their GPUs (a pod's size)")
        return leader_workers.manifests(c, name=exp.config.study_name, gpus=int(tags[placement.SPREAD_GPUS_TAG]),
                                        gpus_per_pod=int(tags[placement.SPREAD_NODE_GPUS_TAG]),
                                        startup_timeout_s=exp.config.startup_timeout_s,
                                        ip_env=engine.spread_ip_env or "VLLM_HOST_IP", annotations=annotations)
    return kubernetes.manifests(c, name=exp.config.study_name, gpus=gpus,
                                startup_timeout_s=exp.config.startup_timeout_s, annotations=annotations)


def study_binary(study: optuna.Study, exp: Experiment, engine: Engine) -> str | None:
    """The engine's executable a study's trials ran (a process study's, as it recorded it, else the one
    found here); None in a container, where the engine is the image's."""
    if exp.config.launcher == "docker":
        return None
    return study.user_attrs.get("binary") or engine.find_binary()[0]


def front_commands(summary: report.StudySummary, engine: Engine, exp: Experiment, binary: str | None,
                   version: str) -> None:
    """Several objectives: give each member of the Pareto front its command, ready to run."""
    for row in summary.front:
        row.command = winner_text("args", engine, exp, row, binary, version).strip()


class StudyArtifacts(StudyCallback):
    """The study's files under results/<study>/ (report, plots, best-*), kept current after every trial
    and copied to the MLflow parent run; a study callback of the driver."""

    def __init__(self, study: optuna.Study, exp: Experiment, engine: Engine, tracker: MlflowTracker,
                 folder: Path, *, binary: str | None, engine_version: str, environment: dict[str, Any],
                 redactor: Redactor | None = None):
        self.study, self.exp, self.engine, self.tracker = study, exp, engine, tracker
        self.folder, self.binary, self.version = folder, binary, engine_version
        self.redactor = redactor or Redactor({})  # every text this writes passes through it (secrets.py)
        self.environment = self._redacted(environment)
        self.experiment_text = self.redactor.text(resolved_experiment(exp)) or ""
        self.plot_seconds: list[float] = []
        self._trials_seen = 0
        self._plotly_logged = False

    # --- driver events ----------------------------------------------------------------------------

    def study_started(self, study: optuna.Study) -> None:
        self.start()

    def trial_finished(self, trial: FrozenTrial, series: Series) -> None:
        self.after_trial()

    def study_finished(self, status: str | None, metrics: Mapping[str, float]) -> None:
        self.finish()

    # --- hooks ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Record where and how the study runs (study user attributes, MLflow parent artifacts)."""
        self.study.set_user_attr("environment", self.environment)
        self.study.set_user_attr("settings", self._redacted(settings(self.exp)))
        self.study.set_user_attr("experiment", self.experiment_text)
        self.study.set_user_attr("binary", self.binary)  # `autotuner best` exports the command the trials ran
        self.tracker.log_study(artifacts={"experiment.yaml": self.experiment_text})

    def after_trial(self) -> None:
        """Best so far on the parent run (step: the trial number); cheap plots; best files. Never raises."""
        self._trials_seen += 1
        metric = self.exp.config.objective.metric
        best = best_trial(self.study)
        finished = [t.number for t in self.study.get_trials(deepcopy=False) if t.state.is_finished()]
        if best is not None and finished and self.tracker.parent_run_id:
            metrics = {f"best_so_far_{metric}": cast(float, primary_value(best))}  # a completed trial: has values
            if self.exp.config.objective.multi:
                metrics["pareto_front_size"] = len(self.study.best_trials)
            self.tracker.log_step(self.tracker.parent_run_id, max(finished), metrics)
        try:
            with_importances = self._trials_seen % plots.IMPORTANCE_EVERY == 0
            self._write(final=False, importances=with_importances)
        except Exception as e:  # noqa: BLE001 - an artifact must never stop a study
            self.tracker.log_study(tags={"autotuner.artifacts_error": f"{type(e).__name__}: {e}"[:500]})

    def finish(self) -> report.StudySummary:
        return self._write(final=True, importances=True)

    # --- work -------------------------------------------------------------------------------------

    def summary(self, importances: bool = True) -> report.StudySummary:
        return report.summarize(self.study, self.exp.config.objective.metric, target=target(self.exp),
                                bounds=bounds(self.exp), importances=importances)

    def _write(self, *, final: bool, importances: bool) -> report.StudySummary:
        t = time.perf_counter()
        result = plots.write_plots(self.study, self.folder / "plots", importances=importances, png=final)
        self.plot_seconds.append(time.perf_counter() - t)
        finished = [t.number for t in self.study.get_trials(deepcopy=False) if t.state.is_finished()]
        if self.tracker.parent_run_id and finished:
            self.tracker.log_step(self.tracker.parent_run_id, max(finished) + int(final),
                                  {"plot_s": self.plot_seconds[-1]})
        summary = self.summary(importances=final)
        summary.plots = [str(p) for p in result.files if p.suffix in (".html", ".png") and p.name != "study.html"]
        front_commands(summary, self.engine, self.exp, self.binary, self.version)
        files: dict[str, str] = {}
        command = None
        if summary.best is not None:
            command = winner_text("args", self.engine, self.exp, summary.best, self.binary, self.version).strip()
            try:
                files["best-docker.sh"] = "#!/bin/sh\nexec " + winner_text(
                    "docker", self.engine, self.exp, summary.best, self.binary, self.version)
            except export.ExportError as e:  # a winner spread over a cluster's nodes: no one container
                files["best-docker.sh"] = f"#!/bin/sh\n# {e}\nexit 2\n"
            config_name = "best-config.ini" if self.engine.name == "llamacpp" else "best-config.yaml"
            files[config_name] = winner_text("config", self.engine, self.exp, summary.best, self.binary, self.version)
            summary.best_files = [str(self.folder / n) for n in ("best.json", "best-command.sh", *files)]
        files["report.md"] = report.to_markdown(summary, self.engine, command)
        files["report.json"] = json.dumps(report.to_json(summary, command), indent=2)
        files = {name: self.redactor.text(text) or "" for name, text in files.items()}
        report.write_best(summary, command, self.folder, extra=files)
        for name in ("best.json", "best-command.sh"):
            self.redactor.file(self.folder / name)
        artifacts: dict[str, str | Path] = {name: self.folder / name for name in files}
        if final:  # again at the end: a tracking hiccup at the start must not lose the study's definition
            artifacts["experiment.yaml"] = self.experiment_text
        for name in ("best.json", "best-command.sh"):
            artifacts[name] = self.folder / name
        for path in result.files:
            if path.suffix == ".png" or path.name == "study.html":
                artifacts[f"plots/{path.name}"] = path
        # The report is also the parent run's description, shown on its page in the MLflow UI.
        self.tracker.log_study(artifacts=artifacts, tags={"mlflow.note.content": files["report.md"][:7900]})
        return summary

    def _redacted(self, value: Any) -> Any:
        return json.loads(self.redactor.text(json.dumps(value)) or "null")


# --- reading a study back (autotuner report / best) ---------------------------------------------------

def open_existing(
    exp: Experiment | None, storage: str | None, study_name: str | None
) -> tuple[optuna.Study, Experiment]:
    """The study to report on: by `storage` and `study_name`, defaulting to the experiment's. The
    experiment is the one the study recorded when it has one, else `exp`. Raises ConfigError."""
    from autotuner.config import ConfigError

    storage = storage or (exp.config.study.storage if exp else None)
    name = study_name or (exp.config.study_name if exp else None)
    if not storage or not name:
        raise ConfigError("give --experiment FILE, or --storage URL and --study NAME")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        try:
            names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
        except Exception:  # noqa: BLE001 - the names only decorate the error below
            names = []
        raise ConfigError(f"no study '{name}' in {storage} (studies: {', '.join(names) or 'none'})") from None
    except Exception as e:  # noqa: BLE001 - SQLAlchemy errors for unreadable storages
        raise ConfigError(f"cannot open {storage}: {str(e).splitlines()[0]}") from None
    text = study.user_attrs.get("experiment")
    if text:
        return study, experiment_from_text(text, f"study {name} in {storage}")
    if exp is None:
        raise ConfigError(f"study '{name}' recorded no experiment: give --experiment FILE")
    return study, exp
