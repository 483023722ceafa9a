"""The loop: ask -> build the launch -> launch -> warm up -> measure each load level (report, prune) ->
stop the engine -> tell -> track.

A trial's failure is data, never a crash of the study: every way a trial can end is classified
(`infeasible`, `exited-at-start`, `startup-timeout`, `oom`, `bad-flag`, `crashed-mid-run`,
`client-errors`, `interrupted`), told to Optuna as FAIL with that class, and recorded in MLflow with the
server's last log lines. The engine is stopped whatever happens, Ctrl-C included.
"""

from __future__ import annotations

import asyncio
import json
import platform
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from autotuner.bench.metrics import LevelResult
from autotuner.bench.runner import run_level
from autotuner.bench.workload import Workload
from autotuner.config import Experiment
from autotuner.engines._base import Engine, LaunchContext
from autotuner.launchers._base import Handle, LaunchError, Launcher, free_port
from autotuner.model_facts import feasibility_context
from autotuner.objective import level_value, trial_value
from autotuner.progress import Progress
from autotuner.space import SearchSpace
from autotuner.study import best_trial, open_study
from autotuner.tracking import MlflowTracker

LOG_TAIL_LINES = 30


@dataclass
class TrialResult:
    state: str  # COMPLETE, FAIL or PRUNED
    value: float | None = None
    levels: list[LevelResult] = field(default_factory=list)
    failure_class: str | None = None
    reason: str | None = None
    log_tail: str = ""


class _Failed(Exception):
    def __init__(self, failure_class: str, reason: str, log_tail: str = ""):
        super().__init__(reason)
        self.failure_class, self.reason, self.log_tail = failure_class, reason, log_tail


class Tuner:
    """Runs trials of one experiment's study. Construct, then `run(n_trials)`; safe to rerun (resumes)."""

    def __init__(self, experiment: Experiment, *, engine: Engine, launcher: Launcher, tracker: MlflowTracker,
                 results_dir: Path = Path("results"), binary: str | None = None,
                 progress: Callable[[int | None], Progress] | None = None):
        self.exp = experiment
        self.cfg = experiment.config
        self.engine = engine
        self.launcher = launcher
        self.tracker = tracker
        self.space = SearchSpace(experiment.space)
        self.binary = binary
        self.workdir = results_dir / self.cfg.study_name
        self.labels = {"autotuner.study": self.cfg.study_name}
        self._progress_factory = progress or (lambda total: Progress(total, self.cfg.objective.metric))
        self.engine_version = self._engine_version()
        self.facts = feasibility_context(experiment)  # workload, GPUs and the model's shape, read once
        self.study = open_study(self.cfg, n_levels=len(self.cfg.load.levels()))

    # --- the study --------------------------------------------------------------------------------------

    def run(self, n_trials: int, timeout_s: float | None = None) -> optuna.Study:
        """Run up to `n_trials` more trials (or until `timeout_s`); returns the study."""
        progress = self._progress_factory(n_trials)
        reaped = self.launcher.reap(self.labels)
        if reaped:
            progress.note(f"removed {len(reaped)} engine(s) left by an interrupted run: {', '.join(reaped)}")
        self.tracker.start_study(self.cfg.study_name, params=self._study_params(), tags=self._common_tags())
        self._enqueue_first_trials()
        deadline = time.monotonic() + timeout_s if timeout_s else None
        try:
            for index in range(1, n_trials + 1):
                if deadline and time.monotonic() >= deadline:
                    progress.note(f"time budget of {timeout_s:g} s spent after {index - 1} trial(s)")
                    break
                self._run_trial(index, progress)
                if self._target_met():
                    progress.note(f"target {self.cfg.objective.target:g} {self.cfg.objective.metric} reached")
                    break
        except KeyboardInterrupt:
            self.tracker.end_study("KILLED")
            raise
        self._log_study_summary()
        self.tracker.end_study("FINISHED")
        return self.study

    def _enqueue_first_trials(self) -> None:
        trials = self.study.get_trials(deepcopy=False)
        if self.cfg.study.baseline and not any(
            t.user_attrs.get("baseline") and t.user_attrs.get("failure_class") != "interrupted" for t in trials
        ):
            self.study.enqueue_trial({}, user_attrs={"baseline": True})
        for params in self.cfg.enqueue:
            self.study.enqueue_trial(dict(params), user_attrs={"enqueued": True}, skip_if_exists=True)

    # --- one trial --------------------------------------------------------------------------------------

    def _run_trial(self, index: int, progress: Progress) -> None:
        t0 = time.perf_counter()
        trial = self.study.ask()
        baseline = bool(trial.user_attrs.get("baseline"))
        params = {} if baseline else self.space.suggest(trial)
        config = self.engine.describe(params)
        progress.trial_started(index, trial.number,
                               "baseline: engine defaults" if baseline else "config: " + (config or "(defaults)"))
        trial_dir = self.workdir / f"trial-{trial.number:04d}"
        run_id = self.tracker.start_trial(trial.number, tags={**self._common_tags(), "autotuner.baseline": str(baseline).lower()})
        timings: dict[str, float] = {}
        handle: Handle | None = None
        command = ""
        interrupted = False
        try:
            broken = self._infeasible(params)
            if broken:
                raise _Failed("infeasible", "; ".join(broken))
            spec = self.engine.build(params, self.launch_context(free_port()))
            command = spec.command_line()
            progress.phase("launching")
            t = time.perf_counter()
            handle = self.launcher.start(spec, trial_dir / "server.log", {**self.labels, "autotuner.trial": str(trial.number)})
            try:
                self.launcher.wait_ready(handle, self.cfg.startup_timeout_s)
            except LaunchError as e:
                cls, line = self.engine.classify_failure(e.log_tail, getattr(e, "exit_code", None))
                raise _Failed(cls or e.failure_class, f"{e}: {line}" if line else str(e), e.log_tail) from None
            timings["ready_s"] = time.perf_counter() - t
            result = asyncio.run(self._measure(handle, trial, run_id, progress, timings))
        except _Failed as f:
            result = TrialResult("FAIL", failure_class=f.failure_class, reason=f.reason, log_tail=f.log_tail)
        except KeyboardInterrupt:
            interrupted = True
            result = TrialResult("FAIL", failure_class="interrupted", reason="interrupted by the user")
        finally:
            if handle is not None:  # first, whatever happened: an engine must never outlive its trial
                t = time.perf_counter()
                self.launcher.stop(handle)
                timings["stop_s"] = time.perf_counter() - t
        self._finish(trial, run_id, params, result, command, trial_dir, timings, t0, progress)
        if interrupted:
            raise KeyboardInterrupt

    async def _measure(self, handle: Handle, trial: optuna.Trial, run_id: str, progress: Progress,
                       timings: dict[str, float]) -> TrialResult:
        w = self.cfg.workload
        workload = Workload(endpoint=w.endpoint, num_prompts=w.num_prompts, input_len=w.input_len,
                            output_len=w.output_len, seed=w.seed)
        model = handle.spec.served_model_name
        levels = self.cfg.load.levels()
        if w.warmup_requests:
            progress.phase(f"warming up ({w.warmup_requests} requests)")
            t = time.perf_counter()
            await run_level(handle.base_url, model, replace(workload, num_prompts=w.warmup_requests),
                            timeout_s=w.request_timeout_s, **levels[0])
            timings["warmup_s"] = time.perf_counter() - t
        results: list[LevelResult] = []
        t = time.perf_counter()
        for step, level in enumerate(levels):
            progress.phase(f"measuring {_level_text(level)} ({w.num_prompts} requests)")
            result, _records = await run_level(handle.base_url, model, workload, timeout_s=w.request_timeout_s, **level)
            results.append(result)
            metrics = result.metrics()
            self.tracker.log_step(run_id, step, metrics)
            if not self.launcher.is_running(handle):
                raise _Failed("crashed-mid-run", f"server died while measuring {_level_text(level)}",
                              self.launcher.logs(handle, LOG_TAIL_LINES))
            if metrics["error_rate"] > self.cfg.objective.max_error_rate:
                sample = "; ".join(list(result.error_samples)[:3])
                raise _Failed("client-errors", f"{metrics['error_rate']:.0%} of requests failed at "
                              f"{_level_text(level)}: {sample}", self.launcher.logs(handle, LOG_TAIL_LINES))
            trial.report(level_value(metrics, self.cfg.objective), step)
            if trial.should_prune():
                timings["measure_s"] = time.perf_counter() - t
                return TrialResult("PRUNED", levels=results, reason=f"pruned after {_level_text(level)}")
        timings["measure_s"] = time.perf_counter() - t
        return TrialResult("COMPLETE", value=trial_value([r.metrics() for r in results], self.cfg.objective),
                           levels=results)

    def _finish(self, trial: optuna.Trial, run_id: str, params: dict[str, Any], result: TrialResult,
                command: str, trial_dir: Path, timings: dict[str, float], t0: float, progress: Progress) -> None:
        timings["total_s"] = time.perf_counter() - t0
        level_metrics = [r.metrics() for r in result.levels]
        attrs = {"state": result.state, "command": command, "timings": timings, "levels": level_metrics,
                 "engine_version": self.engine_version}
        if result.failure_class:
            attrs.update(failure_class=result.failure_class, failure_reason=result.reason,
                         log_tail=result.log_tail[-4000:])
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        if result.state == "COMPLETE":
            self.study.tell(trial, result.value)
        else:
            self.study.tell(trial, state=TrialState.PRUNED if result.state == "PRUNED" else TrialState.FAIL)

        final = _final_metrics(level_metrics, self.cfg.objective.metric, self.cfg.objective.direction)
        tags = {"autotuner.state": result.state, "autotuner.failure_class": result.failure_class or "",
                "autotuner.failure_reason": (result.reason or "")[:5000]}
        bench = {"state": result.state, "value": result.value, "levels": [r.to_json() for r in result.levels]}
        artifacts: dict[str, str | Path] = {"bench.json": json.dumps(bench, indent=2),
                                            "server.log": trial_dir / "server.log"}
        if command:
            artifacts["command.txt"] = command + "\n"
        if result.log_tail:
            artifacts["failure.txt"] = f"{result.failure_class}: {result.reason}\n\n{result.log_tail}\n"
        status = {"COMPLETE": "FINISHED", "PRUNED": "KILLED"}.get(result.state, "FAILED")
        if result.failure_class == "interrupted":
            status = "KILLED"
        self.tracker.end_trial(run_id, status=status, params=params or {"baseline": "engine defaults"},
                               metrics={**final, **{f"time_{k}": v for k, v in timings.items()}},
                               tags=tags, artifacts=artifacts)
        best = best_trial(self.study)
        progress.trial_finished(result.state, result.value,
                                f"{result.failure_class}: {result.reason}" if result.failure_class else result.reason,
                                (best.number, best.value) if best else None)
        if result.log_tail and result.failure_class != "infeasible":
            last = [line for line in result.log_tail.splitlines() if line.strip()][-3:]
            for line in last:
                progress.note(f"    | {line[:200]}")

    # --- helpers ----------------------------------------------------------------------------------------

    def _infeasible(self, params: dict[str, Any]) -> list[str]:
        return self.space.broken_constraints(params) + self.engine.infeasible(params, self.facts)

    def _target_met(self) -> bool:
        target, best = self.cfg.objective.target, best_trial(self.study)
        if target is None or best is None:
            return False
        return best.value >= target if self.cfg.objective.direction == "maximize" else best.value <= target

    def launch_context(self, port: int) -> LaunchContext:
        return LaunchContext(model_path=self.exp.model_path, served_model_name=self.cfg.model.name, port=port,
                             binary=self.binary, extra_args=tuple(self.cfg.engine_args), gpus=self.cfg.hardware.gpus,
                             extra_env=tuple(self.cfg.engine_env.items()))

    def _engine_version(self) -> str:
        if not self.binary:
            return "unknown"
        try:
            out = subprocess.run(self.engine.version_argv(self.binary), capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return "unknown"
        return self.engine.parse_version(out.stdout + out.stderr)

    def _common_tags(self) -> dict[str, str]:
        return {"autotuner.engine": self.engine.name, "autotuner.engine_version": self.engine_version,
                "autotuner.launcher": self.cfg.launcher, "autotuner.host": platform.node(),
                "autotuner.cpu": platform.processor() or platform.machine()}

    def _study_params(self) -> dict[str, Any]:
        c = self.cfg
        return {"experiment": str(self.exp.source), "engine": c.engine, "model": str(self.exp.model_path),
                "search_space": json.dumps(self.exp.space.model_dump(mode="json")),
                "objective": f"{c.objective.direction} {c.objective.metric}", "sampler": c.study.sampler,
                "pruner": c.study.pruner, "storage": c.study.storage, "load": json.dumps(c.load.levels()),
                "workload": json.dumps(c.workload.model_dump(mode="json"))}

    def _log_study_summary(self) -> None:
        trials = self.study.get_trials(deepcopy=False)
        counts = {s.name.lower(): sum(t.state == s for t in trials) for s in (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)}
        metrics: dict[str, float] = {f"trials_{k}": v for k, v in counts.items()}
        best = best_trial(self.study)
        if best is not None:
            metrics[f"best_{self.cfg.objective.metric}"] = best.value
            metrics["best_trial"] = best.number
        self.tracker.log_study(metrics=metrics)


def _level_text(level: dict[str, Any]) -> str:
    if "max_concurrency" in level:
        return f"concurrency {level['max_concurrency']}"
    return f"rate {level['request_rate']:g} req/s"


def _final_metrics(levels: list[dict[str, float]], metric: str, direction: str) -> dict[str, float]:
    """The metrics of the level that scored best on the objective: what the trial is compared by."""
    if not levels:
        return {}
    pick = max if direction == "maximize" else min
    return dict(pick(levels, key=lambda m: m[metric]))
