"""What a study found, written like an engineer's status report at the end of a night: the machine,
what was tried and how it ended, the best against the baseline and the target, what limits the best
configurations and where throughput stops growing, and what the tuner would do with more trials.

`summarize` is pure over the study's trials (plus the study's user attributes the tuner wrote: the host
fingerprint and the settings); `to_markdown`, `to_json` and `render` only turn a `StudySummary` into
text; `write_best` is the only part that writes files. The reasoning itself (binding limit, plateau,
convergence) lives in `diagnosis.py`.
"""

from __future__ import annotations

import json
import math
import statistics
import warnings
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState
from rich.console import Console
from rich.table import Table

from autotuner import diagnosis
from autotuner.files import write_atomically
from autotuner.engines._base import Engine

LATENCY_COLUMNS = ("ttft_ms_p99", "tpot_ms_p99", "e2e_ms_p99")
LOW_IMPORTANCE = 0.05
MIN_TRIALS_FOR_EDGES = 10  # fewer complete trials cannot tell a range's edge from noise


@dataclass
class TrialRow:
    number: int
    value: float
    params: dict[str, Any]
    baseline: bool
    metrics: dict[str, float]  # the best load level's metrics
    levels: list[dict[str, float]] = field(default_factory=list)
    spread: float | None = None  # coefficient of variation of the objective within the measurement
    repeats: list[float] = field(default_factory=list)  # values of every complete trial with these params
    limit: str = "unknown"
    limit_why: str = ""
    plateau: str | None = None
    command: str = ""
    values: list[float] = field(default_factory=list)  # every objective metric, at the scored level

    @property
    def median(self) -> float:
        """What the configuration is judged by: the median of all its measurements (just one: that one)."""
        return statistics.median(self.repeats) if len(self.repeats) > 1 else self.value


@dataclass
class StudySummary:
    study_name: str
    metric: str
    direction: str
    counts: dict[str, int]
    failure_classes: dict[str, int]
    top: list[TrialRow] = field(default_factory=list)
    baseline_value: float | None = None
    best: TrialRow | None = None
    baseline: TrialRow | None = None
    baseline_failure: str | None = None  # why the baseline has no value: "FAIL slo-violated: ..."
    n_trials: int = 0
    failure_examples: dict[str, str] = field(default_factory=dict)  # class -> one reason
    environment: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    target: float | None = None
    importances: dict[str, float] = field(default_factory=dict)
    convergence: str | None = None
    trials_since_gain: int | None = None
    trends: list[str] = field(default_factory=list)
    edges: dict[str, str] = field(default_factory=dict)  # param -> "high"/"low" when the best is at its edge
    study_limit: str = "unknown"
    study_limit_why: str = ""
    next_steps: list[str] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)
    best_files: list[str] = field(default_factory=list)
    stop_reason: str | None = None
    metrics: list[str] = field(default_factory=list)  # every objective metric (several: a Pareto front)
    directions: list[str] = field(default_factory=list)
    front: list[TrialRow] = field(default_factory=list)  # the Pareto front, best first metric first

    @property
    def top_two_within_noise(self) -> bool:
        """The best two were measured more than once and their ranges overlap: the order is not settled."""
        if len(self.top) < 2 or len(self.top[0].repeats) < 2 or len(self.top[1].repeats) < 2:
            return False
        a, b = self.top[0].repeats, self.top[1].repeats
        return min(a) <= max(b) and min(b) <= max(a)

    @property
    def gain(self) -> float | None:
        """Relative improvement of the best over the baseline (0.25 = 25% better)."""
        if self.best is None or not self.baseline_value:
            return None
        ratio = self.best.median / self.baseline_value
        return ratio - 1 if self.direction == "maximize" else 1 - ratio

    @property
    def target_gap(self) -> float | None:
        """How far the best is from the target (negative: short of it; >= 0: met)."""
        if self.best is None or not self.target:
            return None
        ratio = self.best.median / self.target
        return ratio - 1 if self.direction == "maximize" else 1 - ratio


def _best_level(trial: FrozenTrial, metric: str, direction: str) -> dict[str, float]:
    levels = trial.user_attrs.get("levels") or []
    if not levels:
        return {}
    if trial.values:  # the level the trial was scored by (under an SLO not always the fastest)
        return min(levels, key=lambda m: abs(_finite(m.get(metric), math.inf) - trial.values[0]))
    pick = max if direction == "maximize" else min
    return pick(levels, key=lambda m: _finite(m.get(metric), -math.inf if direction == "maximize" else math.inf))


def _finite(v: Any, default: float) -> float:
    return default if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=str)


def _row(t: FrozenTrial, metric: str, direction: str, repeats: dict[str, list[float]]) -> TrialRow:
    best = _best_level(t, metric, direction)
    spread = best.get(f"{metric}_cv")
    limit = diagnosis.binding_limit(best) if best else diagnosis.Limit("unknown", "no level measured")
    plateau = diagnosis.load_plateau(t.user_attrs.get("levels") or [], metric) if direction == "maximize" else None
    return TrialRow(
        number=t.number, value=float(t.values[0]), values=[float(v) for v in t.values], params=dict(t.params), baseline=bool(t.user_attrs.get("baseline")),
        metrics=dict(best), levels=list(t.user_attrs.get("levels") or []),
        spread=None if spread is None or (isinstance(spread, float) and math.isnan(spread)) else float(spread),
        repeats=repeats.get(_key(dict(t.params)), []), limit=limit.kind, limit_why=limit.why,
        plateau=plateau.text if plateau else None, command=t.user_attrs.get("command", ""),
    )


def _importances(study: optuna.Study, complete: list[FrozenTrial]) -> dict[str, float]:
    varied = {n for t in complete for n in t.params if len({repr(u.params.get(n)) for u in complete}) > 1}
    if len(complete) < 3 or not varied:
        return {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # Several objectives: importances for the first (the one that picks each trial's level).
            first = None if len(study.directions) == 1 else (lambda t: t.values[0])
            return {k: float(v) for k, v in optuna.importance.get_param_importances(study, target=first).items()}
    except (ValueError, RuntimeError, ImportError):  # too few or too alike trials, missing sklearn
        return {}


def _ending(t: optuna.trial.FrozenTrial) -> str:
    cls, reason = t.user_attrs.get("failure_class"), t.user_attrs.get("failure_reason")
    return f"trial #{t.number} {t.state.name}" + (f" {cls}: {reason}" if cls else "")


def summarize(study: optuna.Study, metric: str, top_k: int = 5, *, target: float | None = None,
              bounds: dict[str, tuple[float, float]] | None = None, importances: bool = True) -> StudySummary:
    """Everything the report says, from the study's trials. `bounds`: numeric params' search ranges."""
    trials = study.get_trials(deepcopy=False)
    directions = ["maximize" if d == optuna.study.StudyDirection.MAXIMIZE else "minimize" for d in study.directions]
    direction = directions[0]
    maximize = direction == "maximize"
    # A reused result repeats another trial's measurement: it is not a new measurement of its own.
    complete = [t for t in trials if t.state == TrialState.COMPLETE and t.values
                and t.user_attrs.get("reused_from") is None]
    repeats: dict[str, list[float]] = {}
    for t in complete:
        repeats.setdefault(_key(dict(t.params)), []).append(float(t.values[0]))
    for number, values in (study.user_attrs.get("confirmation") or {}).items():  # the tuner's re-launches
        repeats.setdefault(_key(dict(trials[int(number)].params)), []).extend(v for v in values if v is not None)
    # The winner is the best median: a configuration measured again is judged by all its measurements.
    ordered = sorted(complete, key=lambda t: _median(repeats.get(_key(dict(t.params))) or [t.values[0]]),
                     reverse=maximize)
    seen: set[str] = set()
    ordered = [t for t in ordered if not (_key(dict(t.params)) in seen or seen.add(_key(dict(t.params))))]
    rows = [_row(t, metric, direction, repeats) for t in ordered]
    baseline = next((r for r in rows if r.baseline), None)
    fails = [t for t in trials if t.state == TrialState.FAIL]
    unmeasured = [t for t in trials if t.user_attrs.get("baseline") and t.state in (TrialState.FAIL, TrialState.PRUNED)]
    examples: dict[str, str] = {}
    for t in fails:
        examples.setdefault(t.user_attrs.get("failure_class", "unknown"), t.user_attrs.get("failure_reason", ""))
    attrs = dict(study.user_attrs)
    s = StudySummary(
        study_name=study.study_name, metric=metric, direction=direction,
        counts=dict(Counter(t.state.name for t in trials)),
        failure_classes=dict(Counter(t.user_attrs.get("failure_class", "unknown") for t in fails)),
        top=rows[:top_k], baseline_value=baseline.median if baseline else None, best=rows[0] if rows else None,
        baseline=baseline, n_trials=len(trials), failure_examples=examples,
        baseline_failure=None if baseline or not unmeasured else _ending(unmeasured[-1]),
        environment=dict(attrs.get("environment") or {}), settings=dict(attrs.get("settings") or {}),
        target=target if target is not None else attrs.get("target"), stop_reason=attrs.get("stop_reason"),
        metrics=list(study.metric_names or [metric]), directions=directions,
    )
    if len(directions) > 1:
        s.front = pareto_rows(study, rows)
    if importances:
        s.importances = _importances(study, complete)
    conv = diagnosis.convergence([(t.number, float(t.values[0])) for t in sorted(complete, key=lambda t: t.number)],
                                 maximize)
    if conv:
        s.convergence, s.trials_since_gain = conv.text, conv.trials_since
    for trend in diagnosis.param_trends([(dict(t.params), float(t.values[0])) for t in complete], maximize, bounds):
        s.trends.append(trend.text)
        if trend.at_edge and len(complete) >= MIN_TRIALS_FOR_EDGES:
            s.edges[trend.param] = trend.at_edge
    if s.best is not None and s.best.limit != "unknown":
        # What binds the winner is what the next step must move; the others say how common it is.
        s.study_limit = s.best.limit
        same = sum(r.limit == s.best.limit for r in s.top)
        others = Counter(r.limit for r in s.top if r.limit not in (s.best.limit, "unknown"))
        s.study_limit_why = (f"#{s.best.number}: {s.best.limit_why}; {same} of the top {len(s.top)} trials alike"
                             + "".join(f", {n} {k}" for k, n in others.most_common()))
    s.next_steps = next_steps(s)
    return s


def pareto_rows(study: optuna.Study, rows: list[TrialRow]) -> list[TrialRow]:
    """The rows of the study's Pareto front (Optuna's `best_trials`), one per configuration, in the
    order of `rows` (best first metric first). Reused results repeat a member and are not listed."""
    on_front = {_key(dict(t.params)) for t in study.best_trials}
    return [r for r in rows if _key(r.params) in on_front]


# --- what next ----------------------------------------------------------------------------------------

def next_steps(s: StudySummary) -> list[str]:
    """What the tuner would do with more trials, most useful first (pure, from the summary)."""
    steps: list[str] = []
    n_fail = s.counts.get("FAIL", 0)
    if s.best is None:
        if s.failure_classes:
            cls, n = max(s.failure_classes.items(), key=lambda kv: kv[1])
            steps.append(f"Fix what fails before tuning further: {n} trial(s) ended `{cls}` "
                         f"({s.failure_examples.get(cls, '')[:160]}).")
        else:
            steps.append("Run trials: nothing has completed yet.")
        return steps
    if s.target_gap is not None:
        if s.target_gap >= 0:
            steps.append(f"The target ({s.target:,.1f}) is met by #{s.best.number}: stop here, or re-measure "
                         "the winner to confirm it.")
        else:
            steps.append(f"The target ({s.target:,.1f}) is {-s.target_gap:.0%} away: the search space as it is "
                         "may not reach it (see the limits below).")
    if s.trials_since_gain is not None:
        n_complete = s.counts.get("COMPLETE", 0)
        if s.trials_since_gain < max(5, n_complete // 4):
            more = max(10, n_complete)
            when = ("in the last complete trial" if s.trials_since_gain == 0
                    else f"{s.trials_since_gain} complete trial(s) ago")
            steps.append(f"Keep searching: the best still improved {when}; about {more} more trials "
                         "(`autotuner run` resumes the study).")
        else:
            steps.append(f"The search has converged in this space ({s.convergence}): more trials of the same "
                         "space are unlikely to pay; change the space or the load instead.")
    for param, edge in sorted(s.edges.items()):
        way = "upward" if edge == "high" else "downward"
        steps.append(f"Widen `{param}` {way}: the best trials sit at the {edge} edge of its range and still gain.")
    if s.study_limit == "kv-cache":
        steps.append("Give the KV cache room (more GPU memory for it, a quantized KV cache, a shorter maximum "
                     "context) or cap concurrent sequences: the top trials run out of KV cache.")
    elif s.study_limit == "queueing":
        steps.append("Admit more requests at once (more parallel slots / max-num-seqs): requests queue inside "
                     "the server in the top trials.")
    elif s.study_limit == "compute":
        steps.append("The top trials are compute-bound: further gains come from less work per token "
                     "(quantized weights or KV cache, flash attention) or more compute (threads, GPUs), "
                     "not from admitting more requests.")
    if s.best.plateau and "still rises" in s.best.plateau:
        steps.append(f"Measure a higher load level: {s.best.plateau}.")
    if len(s.top) >= 2 and s.best.median:
        second = s.top[1]
        gap = abs(s.best.median - second.median) / abs(s.best.median)
        noise = max([r.spread for r in s.top[:2] if r.spread is not None] or [0.0])
        if gap < max(0.05, 2 * noise):
            steps.append(f"Re-measure the top trials with repeats: #{s.best.number} and #{second.number} are "
                         f"{gap:.1%} apart, within this machine's noise (spread ±{noise:.0%}).")
    if n_fail and s.n_trials and n_fail / s.n_trials >= 0.3:
        cls, n = max(s.failure_classes.items(), key=lambda kv: kv[1])
        steps.append(f"{n_fail} of {s.n_trials} trials failed, mostly `{cls}`: add a constraint to the search "
                     "space so the sampler stops proposing them.")
    low = [p for p, v in s.importances.items() if v < LOW_IMPORTANCE]
    if low and len(s.importances) > 2:
        steps.append(f"Fix the params that barely matter ({', '.join(sorted(low))}: importance below "
                     f"{LOW_IMPORTANCE:.0%}) at the best trial's values to shrink the space.")
    return steps


# --- text -----------------------------------------------------------------------------------------------

def _fmt(v: Any, spec: str = ",.1f") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v, spec)


def _spread_text(row: TrialRow) -> str:
    parts = []
    if row.spread is not None:
        parts.append(f"±{row.spread:.0%}")
    if len(row.repeats) > 1:
        parts.append(f"n={len(row.repeats)}: {min(row.repeats):,.0f}–{max(row.repeats):,.0f}")
    return ", ".join(parts) or "-"


def config_text(row: TrialRow, engine: Engine | None) -> str:
    if row.baseline:
        return "engine defaults (baseline)"
    if engine is not None:
        try:
            return " ".join(engine.tuning_args(row.params)) or "(defaults)"
        except (KeyError, ValueError):
            pass
    return " ".join(f"{k}={v}" for k, v in row.params.items())


def verdict(s: StudySummary) -> str:
    if s.best is None:
        return "No trial completed: nothing to recommend yet."
    if len(s.front) == 1:
        return f"Pareto front: one configuration, trial #{s.best.number}, is the best at once in {_objectives(s)}."
    if s.front:
        return (f"Pareto front: {len(s.front)} configurations trade {_objectives(s)}; none is better in every "
                f"metric than another. Best {s.metric}: trial #{s.best.number} at {s.best.median:,.1f}.")
    b = s.best
    text = f"Best: trial #{b.number} at {b.median:,.1f} {s.metric}"
    if b.spread is not None:
        text += f" (±{b.spread:.0%} within the run)"
    if s.baseline_value is not None and s.gain is not None:
        text += f", baseline {s.baseline_value:,.1f}: {s.gain:+.1%} over the engine defaults"
    elif s.baseline_failure:
        text += f" (the baseline has no value: {s.baseline_failure})"
    else:
        text += " (no baseline measured)"
    if s.target:
        gap = s.target_gap or 0.0
        text += f"; target {s.target:,.1f}: " + ("met" if gap >= 0 else f"not met ({-gap:.0%} short)")
    return text + "."


def _objectives(s: StudySummary) -> str:
    return " against ".join(f"{m} ({'higher' if d == 'maximize' else 'lower'} is better)"
                            for m, d in zip(s.metrics, s.directions))


def front_lines(s: StudySummary, engine: Engine | None) -> tuple[list[str], list[list[str]]]:
    """The front as a table: header and rows of text (trial, each metric, config)."""
    header = ["trial", *s.metrics, "config"]
    rows = [[f"#{r.number}", *(_fmt(v) for v in r.values), config_text(r, engine)] for r in s.front]
    return header, rows


def _front_markdown(s: StudySummary, engine: Engine | None) -> list[str]:
    header, rows = front_lines(s, engine)
    out = [f"## Pareto front ({len(s.front)})", "",
           f"Each trial's metrics are read at one load level: the best level by {s.metric} that meets the SLO.",
           "", "| " + " | ".join(header) + " |", "|---:|" + "---:|" * len(s.metrics) + "---|"]
    out += ["| " + " | ".join(row[:-1]) + f" | `{row[-1]}` |" for row in rows]
    commands = [(r.number, r.command) for r in s.front if r.command]
    if commands:
        out += ["", "```sh"] + [f"# trial #{n}\n{c}" for n, c in commands] + ["```"]
    return out + [""]


def _env_rows(s: StudySummary) -> list[tuple[str, str]]:
    e, st = s.environment, s.settings
    rows = []
    host = e.get("host") or {}
    if host:
        cpu = host.get("cpu_model") or "?"
        rows.append(("CPU", f"{cpu}, {host.get('cpus_usable')} of {host.get('cpu_cores')} cores usable"))
        if host.get("memory_gib"):
            rows.append(("Memory", f"{host['memory_gib']} GiB"))
        if host.get("gpu_count"):
            rows.append(("GPUs", f"{host['gpu_count']} × {host.get('gpu_names')}"))
            rows.append(("Driver / CUDA", f"{host.get('driver_version')} / {host.get('cuda_version')}"))
        else:
            rows.append(("GPUs", "none seen (nvidia-smi / NVML absent or no device)"))
        rows.append(("Host", f"{host.get('hostname')} ({host.get('os')})"))
    if e.get("engine"):
        rows.append(("Engine", f"{e['engine']} {e.get('engine_version', '')} via the {e.get('launcher', '?')} launcher"
                     + (f", image {e['image']}" if e.get("image") else "")))
    for key, label in (("model", "Model"), ("workload", "Workload"), ("load", "Load levels"),
                       ("objective", "Objective"), ("sampler", "Sampler / pruner")):
        if st.get(key):
            rows.append((label, str(st[key])))
    return rows


def to_markdown(s: StudySummary, engine: Engine | None = None, command: str | None = None) -> str:
    """The status report as Markdown (reads as plain text too)."""
    out: list[str] = [f"# Tuning report: study `{s.study_name}`", ""]
    out += ["## Verdict", "", f"- {verdict(s)}"]
    if s.best is not None:
        out.append(f"- Binding limit: **{s.study_limit}**" + (f" ({s.study_limit_why})." if s.study_limit_why else "."))
        if s.best.plateau:
            out.append(f"- Plateau: {s.best.plateau}.")
        if s.convergence:
            out.append(f"- Search: {s.convergence}.")
    out.append("")
    env = _env_rows(s)
    if env:
        out += ["## Environment", "", "| | |", "|---|---|"] + [f"| {k} | {_md(v)} |" for k, v in env] + [""]
        topo = (s.environment.get("host") or {}).get("gpu_topology")
        if topo:
            out += ["GPU topology (`nvidia-smi topo -m`):", "", "```", topo, "```", ""]
    out += ["## What was tried", ""]
    counts = ", ".join(f"{n} {k.lower()}" for k, n in sorted(s.counts.items())) or "none"
    out.append(f"{s.n_trials} trial(s): {counts}.")
    if s.failure_classes:
        out += ["", "| failure class | trials | example |", "|---|---:|---|"]
        for cls, n in sorted(s.failure_classes.items(), key=lambda kv: -kv[1]):
            out.append(f"| {cls} | {n} | {_md(s.failure_examples.get(cls, ''))[:200]} |")
    out.append("")
    if s.front:
        out += _front_markdown(s, engine)
    if s.top:
        m = s.metric
        out += [f"## Top {len(s.top)} ({s.direction} {m})", "",
                f"| trial | {m} | spread | " + " | ".join(LATENCY_COLUMNS) + " | limit | config |",
                "|---:|---:|---|" + "---:|" * len(LATENCY_COLUMNS) + "---|---|"]
        rows = list(s.top)
        if s.baseline is not None and s.baseline not in rows:
            rows.append(s.baseline)
        for r in rows:
            lat = " | ".join(_fmt(r.metrics.get(c)) for c in LATENCY_COLUMNS)
            out.append(f"| #{r.number} | {r.median:,.1f} | {_spread_text(r)} | {lat} | {r.limit} | "
                       f"`{config_text(r, engine)}` |")
        out += ["", "spread: ± is how much the rate moved within the measurement (coefficient of variation "
                "over time windows); n=k gives the range over trials of the same config.", ""]
        out += ["## Limits and plateaus", ""]
        for r in s.top:
            out.append(f"- #{r.number}: {r.limit}: {r.limit_why}" + (f"; {r.plateau}" if r.plateau else ""))
        for t in s.trends:
            out.append(f"- study: {t}")
        if s.convergence:
            out.append(f"- study: {s.convergence}")
        out.append("")
    if s.importances:
        out += ["## Parameter importances", ""]
        out += [f"- {p}: {v:.2f}" for p, v in sorted(s.importances.items(), key=lambda kv: -kv[1])] + [""]
    if s.next_steps:
        out += ["## Next steps", ""] + [f"{i}. {step}" for i, step in enumerate(s.next_steps, 1)] + [""]
    if command:
        out += ["## Run the winner", "", "```sh", command, "```", ""]
    if s.plots or s.best_files:
        out += ["## Files", ""] + [f"- {p}" for p in s.best_files + s.plots] + [""]
    return "\n".join(out)


def _md(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_json(s: StudySummary, command: str | None = None) -> dict[str, Any]:
    data = asdict(s)
    data.update(gain=s.gain, target_gap=s.target_gap, verdict=verdict(s), command=command)
    return _clean(data)


def _clean(obj: Any) -> Any:
    if isinstance(obj, float) and (math.isnan(obj) or math.isinf(obj)):
        return None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def render(summary: StudySummary, engine: Engine, command: str | None, console: Console) -> None:
    """The short end-of-run view: the top table (several objectives: the Pareto front), outcomes, the
    verdict and the winner's command (the front's commands)."""
    if summary.front:
        _render_front(summary, engine, console)
        return
    m = summary.metric
    table = Table(title=f"Best trials of study '{summary.study_name}' ({summary.direction} {m})")
    table.add_column("trial", justify="right")
    table.add_column(m, justify="right")
    table.add_column("spread", justify="right")
    for col in LATENCY_COLUMNS:
        table.add_column(col, justify="right")
    table.add_column("limit")
    table.add_column("config", overflow="fold")
    for row in summary.top:
        table.add_row(str(row.number), f"{row.median:,.1f}", _spread_text(row),
                      *(_fmt(row.metrics.get(c)) for c in LATENCY_COLUMNS), row.limit, config_text(row, engine))
    console.print(table)
    _render_outcomes(summary, console)
    if summary.best is None:
        console.print("[red]No trial completed: nothing to recommend yet.[/]")
        return
    if summary.top_two_within_noise:
        console.print(f"The top two (#{summary.top[0].number} and #{summary.top[1].number}) are within measurement "
                      "noise of each other: either is a sound choice.", soft_wrap=True, markup=False)
    console.print(verdict(summary), soft_wrap=True, markup=False, highlight=False)
    if command:
        console.print("Run the best configuration with:")
        console.print(command, markup=False, highlight=False, soft_wrap=True)


def _render_front(summary: StudySummary, engine: Engine, console: Console) -> None:
    header, rows = front_lines(summary, engine)
    table = Table(title=f"Pareto front of study '{summary.study_name}'")
    for name in header:
        table.add_column(name, justify="left" if name == "config" else "right", overflow="fold")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    _render_outcomes(summary, console)
    console.print(verdict(summary), soft_wrap=True, markup=False, highlight=False)
    for row in summary.front:
        if row.command:
            values = ", ".join(f"{m} {_fmt(v)}" for m, v in zip(summary.metrics, row.values))
            console.print(f"#{row.number} ({values}):", markup=False, highlight=False, soft_wrap=True)
            console.print(row.command, markup=False, highlight=False, soft_wrap=True)


def _render_outcomes(summary: StudySummary, console: Console) -> None:
    counts = ", ".join(f"{n} {s.lower()}" for s, n in sorted(summary.counts.items()))
    fails = ", ".join(f"{n} {c}" for c, n in sorted(summary.failure_classes.items()))
    console.print(f"Trials: {counts}" + (f" (failures: {fails})" if fails else ""), soft_wrap=True)
    if summary.stop_reason:
        console.print(f"Stopped early: {summary.stop_reason}", soft_wrap=True, markup=False)


def write_best(summary: StudySummary, command: str | None, folder: Path,
               extra: dict[str, str] | None = None) -> Path | None:
    """Write best.json, best-command.sh and `extra` files (name -> text) under `folder`; return the JSON's path."""
    if summary.best is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "best.json"
    data = _clean({"study": summary.study_name, "metric": summary.metric, "best": asdict(summary.best),
                   "baseline_value": summary.baseline_value, "gain": summary.gain, "command": command})
    if summary.front:  # several objectives: the answer is the front; "best" is its best on the first metric
        data["front"] = _clean([{"trial": r.number, "values": dict(zip(summary.metrics, r.values)),
                                 "params": r.params, "baseline": r.baseline, "command": r.command}
                                for r in summary.front])
    write_atomically(path, json.dumps(data, indent=2))
    if command:
        write_atomically(folder / "best-command.sh", f"#!/bin/sh\nexec {command}\n")
    for name, text in (extra or {}).items():
        write_atomically(folder / name, text)
    return path

