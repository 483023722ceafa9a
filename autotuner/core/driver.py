"""The study: ask (the queue first, then the sampler), run each trial through the executor, tell, stop,
confirm, recover.

`StudyDriver.run(n)` is the whole loop of a night: it recovers what a killed run left, queues the
baseline and the experiment's configs, then for each of `n` trials asks Optuna for a configuration
no trial has settled yet (a re-proposal is answered without a launch and not counted), has
`executor.TrialExecutor` measure it, records the typed trial (`record.py`), tells Optuna, lets tracking
and the study's artifacts react, and decides whether to stop (`stopping.py`). At the end it confirms:
the top configurations and the baseline are launched again, interleaved (`confirm.py`), and `winner.py`
names the winner. Advisors propose between trials (`advising.py`). Rerunning the same command resumes.

It never launches or measures by itself (the executor does) and never decides a winner by its own rule.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import optuna
from optuna.trial import TrialState

from autotuner import quality
from autotuner.advisors import Advisor
from autotuner.config import Experiment, recheck
from autotuner.config.space import SearchSpace
from autotuner.core import advising, asking, confirm, record, stopping
from autotuner.core.callbacks import StudyCallback
from autotuner.core.executor import TrialExecutor, TrialResult
from autotuner.core.load_search import highest_passing, level_text
from autotuner.core.objective import meets, scored_index, slo_violations
from autotuner.core.progress import Progress
from autotuner.core.recovery import Heartbeat, recover_stale_trials
from autotuner.core.resolved import resolved_experiment
from autotuner.core.sampling import FAILURE_CONSTRAINT
from autotuner.core.study import best_trial, open_study, primary_value, sized_sampler
from autotuner.core.study import candidates as study_candidates
from autotuner.core.study import verdict as study_verdict
from autotuner.core.traffic import keep_state, shape_line
from autotuner.engines._base import Engine, LaunchSpec
from autotuner.launchers._base import Launcher
from autotuner.node import host
from autotuner.node.pool import Leases
from autotuner.util import locks, secrets
from autotuner.util.interrupts import StopRequests

REFERENCE_TRIES = 2  # launches of the defaults to get the quality gate's reference before giving up
REFERENCE_POLL_S = 3.0  # how often a worker waiting for another's baseline looks for its reference

# With --advice ask: shown a proposal (the question, its params), the user says yes (True), no (False), or
# gives the config to launch instead (params, edited).
AskUser = Callable[[str, dict[str, Any]], "bool | dict[str, Any]"]


class StudyDriver:
    """Runs trials of one experiment's study. Construct, then `run(n_trials)`; safe to rerun (resumes).

    What records the study (`callbacks`: MLflow, the study's files) and who proposes configs (`advisors`)
    are handed in by the composition root (`autotuner/app.py`), each built from the driver's own facts
    (its study, folder, engine version, host, redactor): the driver knows neither tracking nor report.
    `ask`: with --advice ask, the user's say on each proposal (None: proposals are taken as they come).
    `executor`: what runs each launch (core/executor.py here, executors/ray.py on a cluster).
    """

    def __init__(self, experiment: Experiment, *, engine: Engine, launcher: Launcher,
                 results_dir: Path = Path("results"), binary: str | None = None,
                 progress: Callable[[int | None], Progress] | None = None, engine_version: str | None = None,
                 pool: Leases | None = None, ask: AskUser | None = None,
                 callbacks: Callable[[StudyDriver], Sequence[StudyCallback]] | None = None,
                 advisors: Callable[[StudyDriver], Sequence[Advisor]] | None = None,
                 executor: Callable[..., TrialExecutor] = TrialExecutor):
        self.exp = experiment
        self.cfg = experiment.config
        recheck(self.cfg)  # command-line overrides are applied after the file was validated
        self.engine = engine
        self.launcher = launcher
        self.space = SearchSpace(experiment.space)
        self.binary = binary
        self.workdir = results_dir / self.cfg.study_name
        self.labels = {"autotuner.study": self.cfg.study_name}
        self._progress_factory = progress or (lambda total: Progress(total, self.cfg.objective.metric))
        self.engine_version = engine_version or self._engine_version()  # given: e.g. read from an image
        self.host = host.fingerprint()
        self.study = open_study(self.cfg, n_levels=self.cfg.load.max_steps)
        self.secrets = secrets.collect(self.cfg.secret_env)
        self.redact = secrets.Redactor(self.secrets)
        self.experiment_text = self.redact.text(resolved_experiment(experiment)) or ""  # each trial keeps it
        self.executor = executor(experiment, engine=engine, launcher=launcher, binary=binary,
                                 secrets=self.secrets, pool=pool)
        self.executor.cache_dir = self._engine_cache() if self.cfg.engine_cache else None
        # The prompts' vocabulary and a dataset's counts, as the study's first launch found them: every
        # later launch, worker and resumed run makes the same requests (core/traffic.py).
        self.executor.traffic.load = lambda: self.study.user_attrs.get(record.TRAFFIC)
        self.executor.traffic.save = lambda state: keep_state(self.study, self.cfg.study.storage, state)
        self._stop = StopRequests()
        self._no_reference: str | None = None  # why this run checks no answers (the defaults gave none)
        # Called in order at every event: the order matters at the end (files written, then MLflow closes).
        self.callbacks: list[StudyCallback] = list(callbacks(self)) if callbacks else []
        self.advisors: list[Advisor] = list(advisors(self)) if advisors else []
        self._ask_user = ask
        self._refused: set[tuple[str, Any]] = set()  # proposals refused (said once) or taken, this run

    # --- the study --------------------------------------------------------------------------------------

    def run(self, n_trials: int, timeout_s: float | None = None) -> optuna.Study:
        """Run up to `n_trials` more trials (or until `timeout_s`); returns the study.

        Raises KeyboardInterrupt after a Ctrl-C or SIGTERM, once the engine is stopped and the trial is
        recorded; the interrupted configuration is queued again, so rerunning resumes where it stopped.
        """
        progress = self._progress_factory(n_trials)
        self.study.sampler = sized_sampler(self.cfg, self.study, n_trials)  # its start-up fits the budget
        recovered = recover_stale_trials(self.study)
        if recovered:
            progress.note(f"trial(s) {', '.join(f'#{n}' for n in recovered)} of a killed run: failed and queued again")
        reaped = self.launcher.reap(self.labels)
        if reaped:
            progress.note(f"removed {len(reaped)} engine(s) left by an interrupted run: {', '.join(reaped)}")
        # Workers starting at once: one queues the baseline, and all continue one MLflow parent run.
        with locks.exclusive(self.cfg.study.storage):
            self._emit("study_started", self.study)
            self._enqueue_first_trials()
        progress.note(f"workload: {self.cfg.workload.describe()}; {shape_line(self.executor.facts)}; "
                      f"load: {self.cfg.load.describe()}")
        deadline = time.monotonic() + timeout_s if timeout_s else None
        self._stop = self.executor.stop = StopRequests(on_first=lambda name: progress.note(
            f"{name}: finishing the measurement under way, then stopping (again to stop at once)"))
        decision: stopping.StopDecision | None = None
        with self._stop:
            try:
                for index in range(1, n_trials + 1):
                    if self._stop.requested:
                        break
                    if deadline and time.monotonic() >= deadline:
                        progress.note(f"time budget of {timeout_s:g} s spent after {index - 1} trial(s)")
                        break
                    self._recover_dead_workers(progress)
                    if (cap := self.cfg.stop.max_trials) and self._trials_in_study() >= cap:
                        message = f"the study holds its {cap} trials (stop.max_trials)"
                        progress.note(f"stopping: {message}")
                        self.study.set_user_attr("stop_reason", message)
                        break
                    advising.advise(self, progress, trials_left=n_trials - index + 1)
                    if not self._run_trial(index, progress):
                        message = "every configuration of the search space was measured" + (
                            " or is being measured by another worker" if self._running_trials() else "")
                        progress.note(f"stopping: {message}")
                        self.study.set_user_attr(record.STOP_REASON, message)
                        break
                    if decision := self._stop_decision():
                        progress.note(f"stopping: {decision.message}")
                        self.study.set_user_attr("stop_reason", decision.message)
                        break
                broken_host = bool(decision and decision.reason == "start-failures")  # nothing would start
                if not self._stop.requested and self.cfg.confirm.top_k and not broken_host:
                    self._recover_dead_workers(progress)  # a dead worker's trial is not "still running"
                    if others := self._running_trials():
                        progress.note(f"trial(s) {', '.join(f'#{n}' for n in others)} still run on other "
                                      "worker(s): the last worker to finish confirms the best")
                    else:
                        confirm.run(self, progress)
            except KeyboardInterrupt:
                self._emit("study_aborted")
                raise
        # The parent run stays open while other workers still add trials.
        status = "KILLED" if self._stop.requested else None if self._running_trials() else "FINISHED"
        self._emit("study_finished", status, self._summary_metrics())
        if self._stop.requested:
            raise KeyboardInterrupt
        return self.study

    def _emit(self, event: str, *args: Any) -> None:
        for callback in self.callbacks:
            getattr(callback, event)(*args)

    def _recover_dead_workers(self, progress: Progress) -> None:
        """Between trials: fail and queue again the trials of workers that died, remove their engines
        (a container does not die with its worker) and close their MLflow runs."""
        gone = recover_stale_trials(self.study)
        if gone:
            progress.note(f"trial(s) {', '.join(f'#{n}' for n in gone)}: the worker is gone; failed and queued again")
            self.launcher.reap(self.labels)
            self._emit("trials_recovered")

    def _trials_in_study(self) -> int:
        """Trials run or running, by every worker; one that was interrupted and queued again counts once, and
        a re-proposal answered without a launch not at all."""
        return sum(1 for t in map(record.view, self.study.get_trials(deepcopy=False))
                   if t.state != "WAITING" and t.failure_class != "interrupted" and t.counted)

    def _running_trials(self) -> list[int]:
        """Trials other workers are running now (this worker runs none between its trials)."""
        return [t.number for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]

    def _stop_decision(self) -> stopping.StopDecision | None:
        launched = sorted((t for t in map(record.view, self.study.get_trials(deepcopy=False))
                           if t.counted and t.state in ("COMPLETE", "FAIL", "PRUNED")), key=lambda t: t.number)
        endings = [(t.failure_class, t.failure_reason) for t in launched if t.failure_class != "interrupted"]
        if stuck := stopping.same_start_failure(endings, self.cfg.stop.same_start_failures):
            return stuck
        # Convergence counts trials that measured a config for the first time: a failure measured
        # nothing, a retry or a re-proposal nothing new.
        finished = [
            record.view(t)
            for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
        ]
        points = [t.values for t in sorted(finished, key=lambda t: t.number) if t.first_measurement]
        noise = self.noise()
        if self.cfg.objective.multi:  # no target (config.cross_check); patience is on the front's hypervolume
            return stopping.decide_front(points, self.cfg.objective.all_directions,
                                         patience=self.cfg.stop.patience, noise=noise)
        return stopping.decide([p[0] if p else None for p in points], self.cfg.objective.direction,
                               target=self.cfg.stop.target, patience=self.cfg.stop.patience, noise=noise)

    def noise(self) -> float:
        """The relative noise of a measurement: the spread of each config's repeated values (its trial's and
        the confirmation's, as the winner rule reads them), never below `stop.min_improvement`."""
        repeats = {c.number: [c.first, *c.measured] for c in study_candidates(self.study)}
        return max(self.cfg.stop.min_improvement, stopping.relative_noise(repeats) or 0.0)

    def _enqueue_first_trials(self) -> None:
        trials = self.study.get_trials(deepcopy=False)
        if self.cfg.study.baseline and not any(t.user_attrs.get("baseline") for t in trials):
            # skip_if_exists: a second tuner starting on the same study at once must not queue it twice
            self.study.enqueue_trial(
                {},
                user_attrs={
                    record.BASELINE: True,
                    record.PROPOSED_BY: "baseline",
                    record.REASON: "the engine's defaults: what every gain is measured against",
                },
                skip_if_exists=True,
            )
        for params in self.cfg.enqueue:
            self.study.enqueue_trial(
                dict(params),
                user_attrs={
                    record.ENQUEUED: True,
                    record.PROPOSED_BY: "experiment",
                    record.REASON: "listed under enqueue",
                },
                skip_if_exists=True,
            )

    # --- the quality gate's reference -------------------------------------------------------------------

    def _quality_settings(self) -> quality.Settings | None:
        q, w = self.cfg.quality, self.cfg.workload
        if q is None:
            return None
        return quality.Settings(prompts=q.prompts, max_tokens=q.max_tokens, endpoint=w.endpoint,
                                concurrency=q.concurrency)

    def _reference(self) -> quality.Answers | None:
        """The defaults' answers stored in the study."""
        return self._answers(self.study.user_attrs.get(record.QUALITY_REFERENCE))

    def _answers(self, stored: Any) -> quality.Answers | None:
        """Answers stored as JSON, if they were asked as this experiment asks."""
        if not stored:
            return None
        try:
            reference = quality.Answers.from_json(stored)
        except (KeyError, TypeError, ValueError):  # written by another version: asked again
            return None
        return reference if reference.settings == self._quality_settings() else None

    def _gate(self, baseline: bool) -> quality.Gate | None:
        """The check a trial's launch makes: the baseline answers for the reference (when none is
        stored), every other config is judged against it."""
        settings, reference = self._quality_settings(), self._reference()
        if settings is None or self.cfg.quality is None:
            return None
        if baseline:
            return quality.Gate(settings, self.cfg.quality) if reference is None else None
        return quality.Gate(settings, self.cfg.quality, reference) if reference is not None else None

    def _store_reference(self, answers: quality.Answers) -> None:
        if self._reference() is None:  # workers racing here store equal answers (both from the defaults)
            self.study.set_user_attr(record.QUALITY_REFERENCE, answers.to_json())
            self._emit("reference_answered", answers.to_json())

    def _ensure_reference(self, number: int, progress: Progress) -> None:
        """Before a candidate is judged: the reference. The baseline trial answers it when it runs first;
        while another worker's baseline runs, its answers are awaited; otherwise (no baseline trial, a
        resumed study, a baseline that gave none) the defaults are launched to answer the prompt set only,
        up to REFERENCE_TRIES times."""
        if self._quality_settings() is None or self._no_reference or self._reference() is not None:
            return
        self._await_baseline_answers(number, progress)
        if self._reference() is not None or self._no_reference or self.executor.stop.requested:
            return
        result = None
        for attempt in range(1, REFERENCE_TRIES + 1):
            progress.phase("the engine's defaults answer the quality prompts (the reference)")
            label = f"quality-reference-{number:04d}-{attempt}"
            result = self.executor.run({}, trial=None, trial_dir=self.workdir / label, progress=progress,
                                       timings={}, label=label, gate=self._gate(baseline=True), measure_levels=False)
            self.redact.file(self.workdir / label / "server.log")
            if result.answers is not None:
                self._store_reference(result.answers)
                return
            if result.failure_class == "interrupted":
                return
        assert result is not None
        self._no_reference = f"the defaults gave no reference answers ({result.failure_class}: {result.reason})"
        progress.note(f"quality: {self._no_reference}: no config's answers are checked in this run")

    def _await_baseline_answers(self, number: int, progress: Progress) -> None:
        """The answers a baseline trial gave before its load levels (record.EARLY_ANSWERS), waited for
        while one runs that has not answered yet, rather than launch the defaults once more to answer the
        same prompts (on a GPU cluster: one more model load, beside it). A baseline whose worker died is
        failed meanwhile, which ends the wait; its answers, if it gave them, still count."""
        said = False
        while not self.executor.stop.requested:
            baselines = [t for t in self.study.get_trials(deepcopy=False)
                         if t.user_attrs.get(record.BASELINE) and t.number != number]
            early = [t.user_attrs[record.EARLY_ANSWERS] for t in baselines if record.EARLY_ANSWERS in t.user_attrs]
            if answers := next(filter(None, map(self._answers, early)), None):
                self._store_reference(answers)
                return
            running = [t for t in baselines if t.state == TrialState.RUNNING]
            gave_none = [e[record.NO_ANSWERS] for t in running
                         if isinstance(e := t.user_attrs.get(record.EARLY_ANSWERS), dict) and record.NO_ANSWERS in e]
            if gave_none:  # the defaults, launched once more, would most likely give none either
                self._no_reference = f"the defaults gave no reference answers ({gave_none[0]})"
                progress.note(f"quality: {self._no_reference}: no config's answers are checked in this run")
                return
            running = [t for t in running if record.EARLY_ANSWERS not in t.user_attrs]  # not answered yet
            if not running:
                return
            if not said:
                progress.phase(f"waiting for trial #{running[0].number} (the defaults) to answer the quality "
                               "prompts (the reference)")
                said = True
            time.sleep(REFERENCE_POLL_S)
            self._recover_dead_workers(progress)

    # --- one trial --------------------------------------------------------------------------------------

    def _run_trial(self, index: int, progress: Progress) -> bool:
        """Ask for a configuration not measured yet and measure it; False when the space holds none."""
        t0 = time.perf_counter()
        asked = asking.ask_new(self, progress)
        if asked is None:
            return False
        trial, params = asked
        baseline = bool(trial.user_attrs.get(record.BASELINE))
        config = self.engine.describe(params)
        who = trial.user_attrs.get(record.PROPOSED_BY) or "sampler"
        why = trial.user_attrs.get(record.REASON)
        progress.trial_started(index, trial.number, ("baseline: engine defaults" if baseline else
                               "config: " + (config or "(defaults)")) + ("" if baseline else f" · by {who}"
                                                                         + (f": {why}" if why else "")))
        trial_dir = self.workdir / f"trial-{trial.number:04d}"
        self._emit("trial_started", trial.number, {"autotuner.baseline": str(baseline).lower(),
                                                   "autotuner.proposed_by": who, "autotuner.reason": why or ""})
        timings: dict[str, float] = {}
        stop_now = False

        def on_level(step: int, metrics: dict[str, float]) -> None:
            self._emit("level_measured", trial.number, step, metrics)

        with Heartbeat(self.study, trial):
            advising.learn_bans(self, progress)
            if not baseline:
                self._ensure_reference(trial.number, progress)
            try:
                result = self.executor.run(params, trial=trial, trial_dir=trial_dir, progress=progress,
                                           timings=timings, label=f"trial-{trial.number:04d}", on_level=on_level,
                                           gate=self._gate(baseline))
            except KeyboardInterrupt:  # a second Ctrl-C: the engine is already stopped
                stop_now = True
                result = TrialResult("FAIL", failure_class="interrupted", reason="interrupted at once by the user",
                                     records=self.executor.records)
            self._finish(trial, params, result, trial_dir, timings, t0, progress)
        if baseline:
            self._say_slo_misses(result.metrics(), progress)
        if result.failure_class == "interrupted":
            self._requeue(trial, params, "retry", "interrupted: measured again")
        elif result.transient and trial.user_attrs.get(record.RETRY_OF) is None:
            progress.note(f"    {result.failure_class} may be the machine, not the config: measuring it once more")
            self._requeue(trial, params, "retry", f"{result.failure_class} in trial #{trial.number}: once more")
        if stop_now:
            raise KeyboardInterrupt
        return True

    def _requeue(self, trial: optuna.Trial, params: dict[str, Any], who: str, why: str) -> None:
        attrs = {k: trial.user_attrs[k] for k in (record.BASELINE, record.ENQUEUED) if k in trial.user_attrs}
        self.study.enqueue_trial(params, user_attrs={**attrs, record.RETRY_OF: trial.number,
                                                     record.PROPOSED_BY: who, record.REASON: why})

    def _finish(self, trial: optuna.Trial, params: dict[str, Any], result: TrialResult,
                trial_dir: Path, timings: dict[str, float], t0: float, progress: Progress) -> None:
        timings["total_s"] = time.perf_counter() - t0
        result.reason, result.log_tail = self.redact.text(result.reason), self.redact.text(result.log_tail) or ""
        command = self.redact.text(result.command) or ""
        records = result.records
        self.redact.file(trial_dir / "server.log")
        level_metrics = result.metrics()
        attrs = {"state": result.state, "command": command, "timings": timings, "levels": level_metrics,
                 record.SCORED_LEVEL: scored_index(level_metrics, self.cfg.objective) if result.values else None,
                 "max_load_meeting_slo": self._max_load(level_metrics),
                 "engine_version": self.engine_version, "engine_args": " ".join(self.engine.tuning_args(params)),
                 "launch_tags": {**records.image_tags(), **result.launch_tags},
                 record.QUALITY: self._quality_attrs(result)}
        if result.answers is not None and result.quality is None and self.cfg.quality is not None:
            self._store_reference(result.answers)  # the baseline's answers: the reference
        # Set even when empty: a retried trial starts with a copy of the failed one's attributes.
        attrs.update(failure_class=result.failure_class, failure_reason=result.reason if result.failure_class else None,
                     log_tail=result.log_tail[-4000:] or None, **{record.TRANSIENT: result.transient or None})
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        if result.state == "FAIL" and result.failure_class != "interrupted":
            trial.set_constraint(FAILURE_CONSTRAINT, 1.0)  # the sampler learns where configs fail
        if result.state == "COMPLETE":
            self.study.tell(trial, result.values)
        else:
            self.study.tell(trial, state=TrialState.PRUNED if result.state == "PRUNED" else TrialState.FAIL)

        trial_dir.mkdir(parents=True, exist_ok=True)
        bench = {
            "state": result.state,
            "value": result.value,
            "values": result.values,
            "levels": [r.to_json() for r in result.levels],
        }
        (trial_dir / "bench.json").write_text(json.dumps(bench, indent=2))
        if command:
            (trial_dir / "command.txt").write_text(command + "\n")
        for name, text in result.launch_artifacts.items():
            (trial_dir / name).write_text(self.redact.text(text) or "")
        extra = records.artifacts(trial_dir, self.engine.tuning_args(params), command,
                                        self.experiment_text)
        for name, content in extra.items():  # requests.jsonl is written there already
            if isinstance(content, str):
                (trial_dir / name).write_text(self.redact.text(content) or "")
        if result.log_tail:
            (trial_dir / "failure.txt").write_text(f"{result.failure_class}: {result.reason}\n\n{result.log_tail}\n")
        self._emit("trial_finished", self.study._storage.get_trial(trial._trial_id),
                   records.series(self.engine.server_metrics))
        progress.trial_finished(result.state, result.value,
                                f"{result.failure_class}: {result.reason}" if result.failure_class else result.reason,
                                self._best_so_far())
        if self.cfg.objective.multi and result.values:
            progress.note(
                "    "
                + ", ".join(f"{n} {v:,.1f}" for n, v in zip(self.cfg.objective.names, result.values, strict=False))
                + f" · Pareto front: {len(self.study.best_trials)} trial(s)"
            )
        if result.log_tail and result.failure_class != "infeasible":
            last = [line for line in result.log_tail.splitlines() if line.strip()][-3:]
            for line in last:
                progress.note(f"    | {line[:200]}")

    # --- helpers ----------------------------------------------------------------------------------------

    @staticmethod
    def _quality_attrs(result: TrialResult) -> dict[str, float] | None:
        """The gate's numbers, and how fast this launch answered (a failed config's 'what it would have been')."""
        if result.answers is None:
            return None
        speed = {"quality_tok_per_s": result.answers.tok_per_s}
        return {**result.quality.metrics(), **speed} if result.quality is not None else speed

    def _say_slo_misses(self, level_metrics: list[dict[str, float]], progress: Progress) -> None:
        """The loads at which the defaults break the SLO, said after the baseline: every config is judged
        there by a limit this machine may not allow (`init`'s SLO is a guess), and a study that tunes only the
        loads below it should not do so silently. A load search probes past the SLO on purpose: not said."""
        kind = self.cfg.load.kind
        if self.cfg.load.search is not None:
            return
        missed = [(m[kind], broken) for m in level_metrics
                  if kind in m and m.get("completed") and (broken := slo_violations(m, self.cfg.objective.slo))]
        for load, broken in missed:
            progress.note(f"    the defaults miss the SLO at {level_text({kind: load})}: {'; '.join(broken)}")
        if missed:
            progress.note("    a config counts at a load only where it meets the SLO; if your users accept more, "
                          "raise its limit in objective.slo, under a new study name")

    def _max_load(self, level_metrics: list[dict[str, float]]) -> float | None:
        """The highest load among the measured levels that met the SLO (None without an SLO: nothing to meet)."""
        if not self.cfg.objective.slo:
            return None
        return highest_passing(level_metrics, self.cfg.load.kind, lambda m: meets(m, self.cfg.objective))

    def launch_spec(self, params: dict[str, Any], port: int) -> LaunchSpec:
        """The launch of `params` as the trials ran it (the one builder, `autotuner.core.launch`)."""
        return self.executor.launch_spec(params, port)

    def _engine_cache(self) -> Path:
        """The study's engine cache, beside its results: one folder per engine version and device, so that
        no build or GPU reads another's compiled kernels."""
        device = self.host.get("gpu_names") or self.host.get("cpu_model") or "cpu"
        key = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{self.engine.name}-{self.engine_version}-{device}").strip("-")
        return (self.workdir / "engine-cache" / key[:120]).resolve()

    def _engine_version(self) -> str:
        if not self.binary:
            return "unknown"
        try:
            out = subprocess.run(self.engine.version_argv(self.binary), capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return "unknown"
        return self.engine.parse_version(out.stdout + out.stderr)

    def _summary_metrics(self) -> dict[str, float]:
        """The parent run's summary: trial counts and the winner by the one rule (`winner.decide`)."""
        trials = self.study.get_trials(deepcopy=False)
        counts = {
            s.name.lower(): sum(t.state == s for t in trials)
            for s in (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)
        }
        metrics: dict[str, float] = {f"trials_{k}": v for k, v in counts.items()}
        if not self.cfg.objective.multi:
            v = study_verdict(self.study)  # the one rule, as in the report and best.json
            if v.winner is not None and v.value is not None:
                metrics[f"best_{self.cfg.objective.metric}"] = v.value
                metrics["best_trial"] = v.winner.number
                metrics["best_confirmed"] = float(v.confirmed)
            if v.gain is not None:
                metrics["gain_over_defaults"] = v.gain
            if v.gain_range is not None:
                metrics["gain_over_defaults_low"], metrics["gain_over_defaults_high"] = v.gain_range
            if v.gain_low is not None:
                metrics["gain_over_defaults_paired_low"] = v.gain_low
            if v.contender is not None and v.contender_gain is not None:  # the defaults kept: what the best measured
                metrics["contender_trial"] = v.contender.number
                metrics["contender_gain_over_defaults"] = v.contender_gain
        else:
            best = best_trial(self.study)
            if best is not None:
                metrics[f"best_{self.cfg.objective.metric}"] = cast(float, primary_value(best))  # completed: has values
                metrics["best_trial"] = best.number
            metrics["pareto_front_size"] = len(self.study.best_trials)
        return metrics

    def _best_so_far(self) -> tuple[int, float] | None:
        """The winner by the one rule (provisional until confirmed), for the progress line."""
        if self.cfg.objective.multi:
            best = best_trial(self.study)
            return (best.number, primary_value(best)) if best else None  # type: ignore[return-value]  # a completed trial: has values
        v = study_verdict(self.study)
        return (v.winner.number, v.value) if v.winner is not None and v.value is not None else None

