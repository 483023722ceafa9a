"""One trial: lease -> launch -> wait ready -> warm up -> quality -> measure each load level -> classify.

`TrialExecutor.run` turns one configuration into a `TrialResult` and never raises for anything the
configuration or the server did: every way a launch can end is classified (`infeasible`,
`exited-at-start`, `startup-timeout`, `port-taken`, `oom`, `bad-flag`, `crashed-mid-run`, `client-errors`,
`quality`, `slo-violated`, `interrupted`, ...) with the reason and the server's last log lines. The engine
is stopped and the pool's lease released whatever happens, Ctrl-C included.

It knows nothing of the study around it: it never asks, tells, tracks or decides which config runs
next (that is `driver.py`). What it hands Optuna is only each level's ceiling (`pruning.py`), through
the `trial` it is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import optuna

from autotuner import quality
from autotuner.bench.client import RequestRecord
from autotuner.bench.gpu_telemetry import GpuTelemetrySampler
from autotuner.bench.metrics import (
    DROPPED_BEFORE,
    GOODPUT,
    LevelResult,
    dropped_only,
    goodput,
    session_metrics,
    usage_note,
)
from autotuner.bench.runner import run_level, run_sessions
from autotuner.bench.server_metrics import ServerMetricsSampler, server_summary
from autotuner.bench.spread import spread_metrics
from autotuner.config import Experiment
from autotuner.config.feasibility import feasibility_context
from autotuner.config.space import SearchSpace
from autotuner.core import bans, launch, pruning, record, timeouts
from autotuner.core.load_search import level_text, make_plan
from autotuner.core.objective import SloViolated, meets, slo_within, trial_values
from autotuner.core.progress import Progress
from autotuner.core.traffic import Traffic
from autotuner.core.trial_records import TrialRecords
from autotuner.engines._base import Engine, LaunchContext, LaunchSpec
from autotuner.launchers._base import Handle, Launcher, LaunchError, PortTaken, free_port, launch_context
from autotuner.node.pool import Leases, PoolTooSmall
from autotuner.stages import moe_log
from autotuner.util.interrupts import StopRequests
from autotuner.workloads.plan import LevelPlan
from autotuner.workloads.sessions import SessionPlan

LOG_TAIL_LINES = 30
# May be the machine, not the config: measured once more (port-taken: on a fresh port; gpus-busy: a launch
# spread over a Ray cluster's nodes found GPUs it needs held by others).
TRANSIENT_FAILURES = frozenset({"startup-timeout", "client-errors", "port-taken", "gpus-busy"})
SLO_NOISE = 0.10  # an SLO missed by less than this (relative) may be the machine: measured once more
OnLevel = Callable[[int, dict[str, float]], None]


@dataclass
class TrialResult:
    state: str  # COMPLETE, FAIL or PRUNED
    values: list[float] | None = None  # one per objective metric (objective.names)
    levels: list[LevelResult] = field(default_factory=list)
    failure_class: str | None = None
    reason: str | None = None
    log_tail: str = ""
    transient: bool = False  # a failure the machine may have caused (measured once more before it is final)
    launch_tags: dict[str, str] = field(default_factory=dict)
    launch_artifacts: dict[str, str] = field(default_factory=dict)  # file name -> text
    level_metrics: list[dict[str, float]] = field(default_factory=list)  # the full per-level metrics
    command: str = ""  # the launch as a pasteable command line ("" when nothing was launched)
    records: TrialRecords = field(default_factory=TrialRecords)  # requests, /metrics samples, the spec
    answers: quality.Answers | None = None  # the launch's answers to the quality prompts (when asked)
    quality: quality.Score | None = None  # those answers against the reference's

    @property
    def value(self) -> float | None:
        """The first objective's value (the only one in a single-objective study)."""
        return self.values[0] if self.values else None

    def metrics(self) -> list[dict[str, float]]:
        """Per level: the load generator's metrics, their spread and the engine's own /metrics."""
        return self.level_metrics or [r.metrics() for r in self.levels]


class _Failed(Exception):
    def __init__(self, failure_class: str, reason: str, log_tail: str = ""):
        super().__init__(reason)
        self.failure_class, self.reason, self.log_tail = failure_class, reason, log_tail


class TrialExecutor:
    """Runs one launch of one configuration of an experiment (see the module docstring)."""

    def __init__(self, experiment: Experiment, *, engine: Engine, launcher: Launcher, binary: str | None,
                 secrets: dict[str, str], pool: Leases | None = None):
        self.exp = experiment
        self.cfg = experiment.config
        self.engine = engine
        self.launcher = launcher
        self.binary = binary
        self.secrets = secrets
        self.pool = pool  # the node's GPUs or cores, shared with other workers; None: the launch sees all
        self.space = SearchSpace(experiment.space)
        self.traffic = traffic_of(experiment, engine)
        self.facts = feasibility_context(experiment, self.traffic.source)  # workload, GPUs, the model's shape
        self.labels = {"autotuner.study": self.cfg.study_name}
        self.stop = StopRequests()  # the driver's, shared: Ctrl-C reaches the measurement under way
        self.records = TrialRecords()
        self.bans: list[bans.Ban] = []  # values this engine version refused in earlier trials (the driver's)
        self._rate: float | None = None
        self._output_len = 1.0  # a level's mean output tokens (the traffic's, once a launch has prepared it)
        self.cache_dir: Path | None = None  # the study's engine cache (the driver's), None: every launch starts cold
        self.answers: quality.Answers | None = None
        self.score: quality.Score | None = None
        self.on_level: OnLevel = lambda step, metrics: None
        self.gpu_telemetry = GpuTelemetrySampler((), enabled=False)

    def run(self, params: dict[str, Any], *, trial: optuna.Trial | None, trial_dir: Path, progress: Progress,
            timings: dict[str, float], label: str, on_level: OnLevel = lambda step, metrics: None,
            gate: quality.Gate | None = None, measure_levels: bool = True) -> TrialResult:
        """Launch `params`, wait until ready, check its answers (with a `gate`), measure; the engine is
        stopped on every way out, exceptions included. `trial` gets each level's ceiling (and may be
        pruned); None: a confirmation launch. `on_level(step, metrics)` sees each level as it is measured
        (tracking charts it). measure_levels=False: no load level (a launch that only answers the prompt set)."""
        handle: Handle | None = None
        units: tuple[int, ...] = ()
        command = ""
        self.records = TrialRecords()  # per launch: a confirmation must not score the previous launch's levels
        self.answers, self.score = None, None
        self.on_level = on_level
        try:
            broken = self.infeasible(params, banned=trial is not None)  # a confirmation re-runs what ran
            if broken:
                raise _Failed("infeasible", "; ".join(broken))
            units = self._lease(params, label, progress)
            spec = self.launch_spec(params, free_port(), units)
            command = spec.command_line()
            self.records.spec = spec
            progress.phase("launching")
            t = time.perf_counter()
            labels = {**self.labels, "autotuner.trial": label}
            try:  # a failed start (image, ports) is the trial's failure, not the study's
                handle = self.launcher.start(spec, trial_dir / "server.log", labels)
                self.launcher.wait_ready(handle, self.cfg.startup_timeout_s)
            except LaunchError as e:
                cls, line = self.engine.classify_failure(e.log_tail, getattr(e, "exit_code", None))
                if isinstance(e, PortTaken):  # known for sure, whatever the log then says
                    cls = None
                raise _Failed(cls or e.failure_class, f"{e}: {line}" if line else str(e), e.log_tail) from None
            timings["ready_s"] = time.perf_counter() - t
            self._check_stop("before warming up")
            measuring = self._measure(handle, trial, progress, timings, gate, measure_levels)
            result = asyncio.run(self._cancellable(measuring))
        except _Failed as f:
            result = TrialResult("FAIL", failure_class=f.failure_class, reason=f.reason, log_tail=f.log_tail,
                                 transient=f.failure_class in TRANSIENT_FAILURES)
        except Exception as e:  # a bug of ours or a library's: this trial's failure, never the study's end
            trace = traceback.format_exc()
            trial_dir.mkdir(parents=True, exist_ok=True)
            (trial_dir / "error.log").write_text(trace)
            result = TrialResult("FAIL", failure_class="internal", reason=f"{type(e).__name__}: {e}",
                                 log_tail=trace[-4000:])
        finally:
            try:
                if handle is not None:  # whatever happened: an engine never outlives its trial
                    t = time.perf_counter()
                    self.launcher.stop(handle)
                    timings["stop_s"] = time.perf_counter() - t
            finally:
                if units and self.pool is not None:  # even when stopping failed: the lease is not kept
                    self.pool.release(units)
        if handle is not None:  # what identifies the launch: image, container, the docker run line
            result.launch_tags, result.launch_artifacts = dict(handle.tags), dict(handle.artifacts)
            result.launch_tags.update(moe_log.tags_from_file(handle.log_path))  # the MoE kernel config it loaded
        result.command, result.records = command, self.records
        result.answers, result.quality = self.answers, self.score
        return result

    async def _cancellable(self, measurement: Any) -> TrialResult:
        """Run the measurement as a task a second Ctrl-C can cancel (see interrupts.StopRequests)."""
        self.stop.task = asyncio.current_task()
        try:
            return await measurement
        except asyncio.CancelledError:
            if self.stop.at_once:
                raise KeyboardInterrupt from None
            raise
        finally:
            self.stop.task = None

    def _timeout(self, level: dict[str, Any]) -> float:
        """One request's timeout at `level` (core.timeouts): the experiment's, or from the load and rate."""
        w = self.cfg.workload
        (load_key, load), = level.items()
        return timeouts.request_timeout(w.request_timeout_s, load_key=load_key, load=float(load),
                                        num_prompts=self.traffic.count, output_len=self._output_len,
                                        tok_per_s=self._rate, slo=self.cfg.objective.slo, duration_s=w.duration_s)

    def _check_stop(self, when: str) -> None:
        if self.stop.requested:
            raise _Failed("interrupted", f"stopped by {self.stop.requested} {when}")

    async def _measure(self, handle: Handle, trial: optuna.Trial | None, progress: Progress,
                       timings: dict[str, float], gate: quality.Gate | None, measure_levels: bool) -> TrialResult:
        model = handle.spec.served_model_name
        self._rate = None  # the output rate this launch has shown: what the next level's timeout follows
        unprepared = self.traffic.vocab is None
        for note in await self.traffic.prepare(handle.base_url, model, self.cfg.load.max_steps):
            progress.note(f"    workload: {note}")
        if unprepared and self.traffic.counted:  # a dataset's lengths, now in the model's tokens: the rules see them
            self.facts = feasibility_context(self.exp, self.traffic.source)
        self._output_len = self.traffic.mean_output_len()
        warmup = self.traffic.warmup(model)
        if warmup is not None:
            progress.phase(f"warming up ({len(warmup)} requests)")
            t = time.perf_counter()
            first = self.cfg.load.levels()[0]
            # a trace's speed-up is a schedule: the warm-up sends its few requests at once instead
            load = {"max_concurrency": len(warmup)} if "speedup" in first else first
            if isinstance(warmup, SessionPlan):
                warm, _ = await run_sessions(handle.base_url, model, warmup, timeout_s=self._timeout(first), **load)
            else:
                warm, _ = await run_level(handle.base_url, model, warmup, timeout_s=self._timeout(first), **load)
            self._rate = warm.output_tok_per_s if warm.completed else None
            timings["warmup_s"] = time.perf_counter() - t
            self._check_stop("after warming up")
        if gate is not None:  # before the levels: a config that answers wrongly costs no load level
            no_answers = await self._check_answers(handle, gate, progress, timings)
            if gate.reference is None and trial is not None:  # the defaults answering: see record.EARLY_ANSWERS
                early = self.answers.to_json() if self.answers is not None else {record.NO_ANSWERS: no_answers}
                with contextlib.suppress(Exception):  # a courtesy to the other workers: never this trial's failure
                    trial.set_user_attr(record.EARLY_ANSWERS, early)
            self._check_stop("after checking its answers")
        if not measure_levels:
            return TrialResult("COMPLETE")
        sampler = ServerMetricsSampler(handle.base_url, self.engine.server_metrics)
        sampler.start()
        # NVML next to /metrics, for the power and communication diagnoses; none on a CPU experiment.
        self.gpu_telemetry = GpuTelemetrySampler(handle.spec.gpu_ids, enabled=self.cfg.hardware.gpus > 0)
        self.gpu_telemetry.start()
        try:
            return await self._measure_levels(handle, trial, progress, timings, sampler)
        finally:
            self.gpu_telemetry.stop()
            await sampler.stop()
            timings["server_metrics_cpu_s"] = sampler.poll_cpu_s
            self.records.add_samples(sampler)

    async def _check_answers(self, handle: Handle, gate: quality.Gate, progress: Progress,
                             timings: dict[str, float]) -> str | None:
        """Ask the quality prompts; against a reference, fail as `quality` below the bar (quality.py).
        Without one (the defaults answering for it): why they gave no answers, if they gave none."""
        progress.phase(f"checking answers ({gate.settings.prompts} prompts, greedy)")
        t = time.perf_counter()
        try:
            self.answers = await quality.collect(handle.base_url, handle.spec.served_model_name, gate.settings,
                                                 self.cfg.workload.request_timeout_s or timeouts.MIN_S)
        except quality.AnswerError as e:
            if gate.reference is None:  # the defaults answering for the reference: no reference, still measured
                progress.note(f"    quality: the defaults gave no answers to the prompt set ({e})")
                return str(e)
            raise _Failed("client-errors", f"no answer to the quality prompts: {e}",
                          self.launcher.logs(handle, LOG_TAIL_LINES)) from None
        timings["quality_s"] = time.perf_counter() - t
        if gate.reference is None:
            return None
        self.score = quality.compare(gate.reference, self.answers)
        if why := quality.judge(self.score, gate.bar):
            raise _Failed("quality", why)
        progress.note(f"    answers as the defaults': {quality.describe(self.score)}")
        return None

    async def _measure_levels(self, handle: Handle, trial: optuna.Trial | None,
                              progress: Progress, timings: dict[str, float],
                              sampler: ServerMetricsSampler) -> TrialResult:
        w = self.cfg.workload
        objective = self.cfg.objective
        search = self.cfg.load.search is not None
        plan = make_plan(self.cfg.load, lambda m: meets(m, objective))
        results: list[LevelResult] = []
        t = time.perf_counter()
        step, level = 0, plan.next_level([])
        load_key = self.cfg.load.kind
        max_load = self.cfg.load.max_load
        scaling = self._measured_scaling(trial, load_key, max_load)
        while level is not None:
            of = f" [{step + 1}/{plan.total}]" if plan.total > 1 else ""
            within = f" or {w.duration_s:g} s" if w.duration_s else ""
            progress.phase(f"measuring {level_text(level)}{of} ({self.traffic.count} {self.traffic.unit}{within})")
            timeout_s = self._timeout(level)
            model = handle.spec.served_model_name
            await self._warm_level(handle, step, level, timeout_s, progress)
            requests = self.traffic.level(step, model)
            result, records = await self._run_level(handle, requests, level, timeout_s, sampler)
            # A dropped connection may be a passing fault: only a level that drops requests again ends the
            # sweep, else one request could cut a trial's value (a probe's failures end only that probe).
            dropped = 0 if search or self.stop.requested else dropped_only(records, objective.max_error_rate)
            if dropped and not self.launcher.is_running(handle):
                dropped = 0  # no second measurement of a dead server (the crash check below says so)
            if dropped:
                progress.phase(f"the server dropped {dropped} of {len(records)} requests at {level_text(level)} "
                               "and is still up: measuring it once more")
                sampler.forget_level()
                self.gpu_telemetry.forget_level()
                requests = self.traffic.level(step, model, again=True)
                result, records = await self._run_level(handle, requests, level, timeout_s, sampler)
            self._rate = result.output_tok_per_s if result.completed else self._rate
            self.records.add_level(step, records)
            results.append(result)
            metrics = {**level, **result.metrics(), **spread_metrics(records), "request_timeout_s": timeout_s,
                       GOODPUT: goodput(records, result.duration_s, objective.slo),
                       **server_summary(sampler.level_samples(step), self.engine.server_metrics),
                       **self.gpu_telemetry.level_metrics(step), **({DROPPED_BEFORE: dropped} if dropped else {}),
                       **(session_metrics(records) if isinstance(requests, SessionPlan)
                          else prompt_token_metrics(requests, result))}
            if note := usage_note(result):
                progress.note(f"    warning at {level_text(level)}: {note}")
            if client := result.client_note():
                progress.note(f"    warning at {level_text(level)}: {client}; the level does not count")
            self.records.level_metrics.append(metrics)
            self.on_level(step, metrics)
            timings["measure_s"] = time.perf_counter() - t
            if not self.launcher.is_running(handle):
                raise _Failed("crashed-mid-run", f"server died while measuring {level_text(level)}",
                              self.launcher.logs(handle, LOG_TAIL_LINES))
            following = plan.next_level(self.records.level_metrics)
            # A search probes past capacity on purpose: failed requests there fail the probe, not the trial.
            if not search and metrics["error_rate"] > objective.max_error_rate:
                sample = "; ".join(list(result.error_samples)[:3])
                why = f"{metrics['error_rate']:.0%} of requests failed at {level_text(level)}: {sample}"
                if not any(meets(m, objective) for m in self.records.level_metrics[:-1]):
                    raise _Failed("client-errors", why, self.launcher.logs(handle, LOG_TAIL_LINES))
                # More load only fails more: the lower levels that met the SLO decide the value.
                progress.phase(f"{why[:200]}; the lower levels that met the SLO count")
                following = None
            # Optuna takes intermediate values (and prunes) in single-objective studies only. Each step
            # reports the trial's ceiling (pruning.py): the same quantity as its value, never a lower load's.
            bound = pruning.ceiling(self.records.level_metrics, metric=objective.metric,
                                    direction=objective.direction, load_key=load_key, max_load=max_load,
                                    passes=lambda m: meets(m, objective), last_level=following is None,
                                    scaling=scaling)
            if trial is not None and not objective.multi and bound is not None:
                trial.report(bound, step)
                if following is not None and trial.should_prune():
                    return TrialResult("PRUNED", levels=results, reason=f"pruned after {level_text(level)}: "
                                       f"it can reach at most {bound:,.1f} {objective.metric}",
                                       level_metrics=list(self.records.level_metrics))
            if self.stop.requested and following is not None:
                return TrialResult("FAIL", levels=results, failure_class="interrupted",
                                   reason=f"stopped by {self.stop.requested} after {level_text(level)}",
                                   level_metrics=list(self.records.level_metrics))
            step, level = step + 1, following
        if plan.done and (search or len(results) < plan.total):
            progress.phase(plan.done)
        level_metrics = list(self.records.level_metrics)
        try:
            values = trial_values(level_metrics, objective)
        except SloViolated as e:
            # Within the noise of a limit, one more launch may pass: measured once more before it is final.
            near = any(slo_within(m, objective.slo, SLO_NOISE) for m in level_metrics)
            return TrialResult("FAIL", levels=results, failure_class="slo-violated", reason=str(e),
                               level_metrics=level_metrics, transient=near)
        return TrialResult("COMPLETE", values=values, levels=results, level_metrics=level_metrics)

    async def _warm_level(self, handle: Handle, step: int, level: dict[str, Any], timeout_s: float,
                          progress: Progress) -> None:
        """A concurrency level after the first is warmed at its own concurrency (the trial's warm-up ran at
        the first's): the batch sizes it brings pay their first-use costs before anything counts."""
        concurrency = int(level.get("max_concurrency") or 0)
        if not self.cfg.workload.level_warmup or step == 0 or concurrency < 1:
            return
        warm = self.traffic.level_warmup(step, min(concurrency, self.traffic.count), handle.spec.served_model_name)
        if warm is None:
            return
        progress.phase(f"warming up {level_text(level)} ({len(warm)} requests)")
        await run_level(handle.base_url, handle.spec.served_model_name, warm, max_concurrency=concurrency,
                        timeout_s=timeout_s)

    async def _run_level(self, handle: Handle, requests: LevelPlan | SessionPlan, level: dict[str, Any],
                         timeout_s: float, sampler: ServerMetricsSampler) -> tuple[LevelResult, list[RequestRecord]]:
        sampler.mark()
        self.gpu_telemetry.mark()
        load = self.cfg.load
        if isinstance(requests, SessionPlan):
            return await run_sessions(handle.base_url, handle.spec.served_model_name, requests, timeout_s=timeout_s,
                                      **level)
        return await run_level(handle.base_url, handle.spec.served_model_name, requests, timeout_s=timeout_s,
                               duration_s=self.cfg.workload.duration_s, arrival=load.arrival,
                               burstiness=load.burstiness, seed=self.cfg.workload.seed, workers=load.workers, **level)

    def _measured_scaling(self, trial: optuna.Trial | None, load_key: str, max_load: float) -> dict[float, float]:
        """How steeply the study's finished trials grew with load (pruning.measured_scaling), for the
        ceiling pruner only: Optuna's pruners compare ceilings across trials, which must be bounded alike."""
        if trial is None or self.cfg.study.pruner != "ceiling":
            return {}
        finished = trial.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,
                                                                  optuna.trial.TrialState.PRUNED,
                                                                  optuna.trial.TrialState.FAIL))
        return pruning.measured_scaling([t.user_attrs.get(record.LEVELS) or [] for t in finished],
                                        metric=self.cfg.objective.metric, load_key=load_key, max_load=max_load)

    def infeasible(self, params: dict[str, Any], *, banned: bool = True) -> list[str]:
        """The rules `params` breaks: the space's, the engine's, and (`banned`) values this build refused."""
        return (self.space.broken_constraints(params) + self.engine.infeasible(params, self.facts)
                + (bans.broken(params, self.bans) if banned else []))

    def launch_spec(self, params: dict[str, Any], port: int, units: tuple[int, ...] = ()) -> LaunchSpec:
        """The engine's launch of `params` (autotuner.core.launch, as the launcher sees it), with the secrets'
        values and the pool's `units`: GPU ids or CPU cores."""
        spec = launch.launch_spec(self.exp, self.engine, params, port=port, binary=self.binary,
                                  view=self.launcher.context, secrets=self.secrets)
        if units and self.pool is not None:
            spec = replace(spec, gpu_ids=units) if self.pool.pool.kind == "gpu" else replace(spec, cpu_ids=units)
        if self.cache_dir is not None and (caches := self.engine.cache_env()):
            spec = replace(spec, cache_dir=str(self.cache_dir), cache_env=caches)
        return spec

    def _lease(self, params: dict[str, Any], label: str, progress: Progress) -> tuple[int, ...]:
        """Wait for the pool to hand this launch the GPUs (or cores) its config needs; () without a pool."""
        if self.pool is None:
            return ()
        pool = self.pool.pool
        need = pool.need(self.engine.gpus_needed(params, self.cfg.engine_args), self.engine.cpus_needed(params))
        try:
            units = self.pool.acquire(need, f"{self.cfg.study_name}/{label}", progress.phase,
                                      stop=lambda: bool(self.stop.requested))
        except PoolTooSmall as e:
            raise _Failed("infeasible", str(e)) from None
        except InterruptedError as e:
            raise _Failed("interrupted", str(e)) from None
        progress.phase(f"on {pool.describe(units)}")
        return units

    def launch_context(self, port: int) -> LaunchContext:
        return launch_context(self.exp, port=port, binary=self.binary)


def traffic_of(experiment: Experiment, engine: Engine) -> Traffic:
    """The experiment's traffic for this engine (its workload file is read here, once per process)."""
    w = experiment.config.workload
    base = experiment.source.parent
    return Traffic(w, w.source(base, experiment.config.load.max_steps), w.count(base), engine.tokenize)


def prompt_token_metrics(requests: LevelPlan, result: LevelResult) -> dict[str, float]:
    """The prompt tokens a level asked for beside those the server counted (usage): how exact it was."""
    asked = requests.requested_input_tokens
    if asked is None or not result.completed or result.usage_missing:
        return {}
    # only completed requests are counted by the server: compare like with like when some failed
    share = result.completed / max(len(requests), 1)
    return {"requested_input_tokens": float(asked),
            "prompt_tokens_measured_ratio": result.input_tokens / (asked * share),
            "prompt_tokens_exact": float(requests.exact)}
