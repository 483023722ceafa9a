"""What a study found, written like an engineer's status report at the end of a night: the machine,
what was tried and how it ended, the best against the baseline and the target, what limits the best
configurations and where throughput stops growing, and what the tuner would do with more trials.

`summarize` is pure over the study's trials (plus the study's user attributes the tuner wrote: the host
fingerprint and the settings); `verdict`, `next_steps` and `to_json` only turn a `StudySummary` into
words and data (markdown.py and console.py into report.md and the terminal view); `write_best` is the
only part that writes files. The reasoning itself lives in `bench/limits.py` (the binding limit) and
`diagnosis.py` (plateau, convergence, trends).
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

from autotuner.bench.limits import Limit, binding_limit
from autotuner.core import record, winner
from autotuner.core.study import verdict as study_verdict
from autotuner.engines._base import Engine
from autotuner.report import diagnosis
from autotuner.util.files import write_atomically

LATENCY_COLUMNS = ("ttft_ms_p99", "tpot_ms_p99", "e2e_ms_p99")
LOW_IMPORTANCE = 0.05
MIN_TRIALS_FOR_EDGES = 10  # fewer complete trials cannot tell a range's edge from noise


@dataclass
class TrialRow:
    number: int
    value: float  # the trial's own (first) measurement
    params: dict[str, Any]
    baseline: bool
    metrics: dict[str, float]  # the scored load level's metrics
    levels: list[dict[str, float]] = field(default_factory=list)
    spread: float | None = None  # coefficient of variation of the objective within the measurement
    repeats: list[float] = field(default_factory=list)  # the confirmation round's measurements that succeeded
    flaky: bool = False  # a confirmation launch of this config failed: it cannot win
    limit: str = "unknown"
    limit_why: str = ""
    plateau: str | None = None
    command: str = ""
    values: list[float] = field(default_factory=list)  # every objective metric, at the scored level
    quality: dict[str, float] = field(default_factory=dict)  # the quality gate's numbers (quality.Score)
    launch_tags: dict[str, str] = field(default_factory=dict)  # where and how it ran (record.TrialView)

    @property
    def median(self) -> float:
        """What the configuration is judged by (`winner`): its confirmation median, else its one value."""
        return statistics.median(self.repeats) if self.repeats else self.value


@dataclass
class WrongAnswers:
    """A config the quality gate failed: how fast it answered, and how its answers differed."""

    number: int
    params: dict[str, Any]
    reason: str
    speed_ratio: float | None  # its answering speed over the defaults' (same prompts, same way)


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
    confirmation_node: str | None = None  # on a Ray cluster: where the confirmation's launches ran
    directions: list[str] = field(default_factory=list)
    front: list[TrialRow] = field(default_factory=list)  # the Pareto front, best first metric first
    confirmed: bool = False  # the winner was chosen from the confirmation round (else: provisional)
    gain: float | None = None  # relative improvement of the winner over the baseline (winner.decide)
    gain_range: tuple[float, float] | None = None
    gain_low: float | None = None  # the lowest same-round gain: above zero, the gain is beyond the noise
    contender: TrialRow | None = None  # the best tuned config, when its gain was within noise (defaults kept)
    contender_gain: float | None = None
    contender_range: tuple[float, float] | None = None
    tied: list[int] = field(default_factory=list)  # configs within noise of the winner
    flaky: list[int] = field(default_factory=list)  # trials whose config failed a confirmation launch
    wrong: list[WrongAnswers] = field(default_factory=list)  # failed the quality gate, fastest first
    spent: dict[str, dict[str, int]] = field(default_factory=dict)  # proposer -> launches by how they ended

    @property
    def top_two_within_noise(self) -> bool:
        """The best two were measured more than once and their ranges overlap: the order is not settled."""
        if len(self.top) < 2 or len(self.top[0].repeats) < 2 or len(self.top[1].repeats) < 2:
            return False
        a, b = self.top[0].repeats, self.top[1].repeats
        return min(a) <= max(b) and min(b) <= max(a)

    @property
    def target_gap(self) -> float | None:
        """How far the best is from the target (negative: short of it; >= 0: met)."""
        if self.best is None or not self.target:
            return None
        ratio = self.best.median / self.target
        return ratio - 1 if self.direction == "maximize" else 1 - ratio


def _finite(v: Any, default: float) -> float:
    return default if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def _key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=str)


def _row(t: record.TrialView, c: winner.Candidate, metric: str, direction: str) -> TrialRow:
    best = t.scored_metrics(metric, direction)
    spread = best.get(f"{metric}_cv")
    limit = binding_limit(best) if best else Limit("unknown", "no level measured")
    plateau = diagnosis.load_plateau(t.levels, metric) if direction == "maximize" else None
    return TrialRow(
        number=t.number, value=float(c.first), values=list(t.values or [c.first]), params=dict(t.params),
        baseline=t.baseline, metrics=dict(best), levels=list(t.levels),
        spread=None if spread is None or (isinstance(spread, float) and math.isnan(spread)) else float(spread),
        repeats=c.measured, flaky=c.flaky, limit=limit.kind, limit_why=limit.why,
        plateau=plateau.text if plateau else None, command=t.command, quality=dict(t.quality),
        launch_tags=dict(t.launch_tags),
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
    views = {t.number: record.view(t) for t in trials}
    # Only trials that measured their config: a re-proposal answered without a launch is no measurement.
    complete = [t for t in trials if t.state == TrialState.COMPLETE and t.values and views[t.number].counted]
    v = study_verdict(study)  # the one rule that names the winner (winner.decide)
    rows = [_row(views[c.number], c, metric, direction) for c in v.ranking]
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
        top=rows[:top_k], baseline_value=v.baseline_value,
        best=next((r for r in rows if v.winner is not None and r.number == v.winner.number), None),
        baseline=baseline, n_trials=len(trials), failure_examples=examples,
        baseline_failure=None if baseline or not unmeasured else _ending(unmeasured[-1]),
        environment=dict(attrs.get("environment") or {}), settings=dict(attrs.get("settings") or {}),
        target=target if target is not None else attrs.get("target"), stop_reason=attrs.get("stop_reason"),
        confirmation_node=attrs.get(record.CONFIRMATION_NODE),
        metrics=list(study.metric_names or [metric]), directions=directions,
        confirmed=v.confirmed, gain=v.gain, gain_range=v.gain_range, flaky=list(v.flaky), gain_low=v.gain_low,
        contender=next((r for r in rows if v.contender is not None and r.number == v.contender.number), None),
        contender_gain=v.contender_gain, contender_range=v.contender_range, tied=list(v.tied),
    )
    for view in views.values():
        if view.counted and view.state in ("COMPLETE", "FAIL", "PRUNED"):
            who = s.spent.setdefault(view.proposed_by or "sampler", {"launches": 0, "complete": 0, "fail": 0,
                                                                     "pruned": 0})
            who["launches"] += 1
            who[view.state.lower()] += 1
    wrong = [views[t.number] for t in fails if views[t.number].failure_class == "quality"]
    s.wrong = sorted((WrongAnswers(w.number, dict(w.params), w.failure_reason or "",
                                   w.quality.get("quality_speed_ratio")) for w in wrong),
                     key=lambda w: -(w.speed_ratio or 0.0))
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
    elif s.study_limit == "power":
        steps.append("The top trials are power-bound (at the GPUs' power limit, clocks held back): raise the "
                     "power limit if the board allows it (nvidia-smi -pl), or do less work per token "
                     "(quantized weights or KV cache); more concurrency only shares the same watts.")
    elif s.study_limit == "communication":
        steps.append("The top trials are communication-bound (PCIe busy, SMs waiting): try fewer GPUs per "
                     "replica with more replicas (data parallel), pipeline instead of tensor parallel across "
                     "PCIe, or the engine's all-reduce and NCCL settings.")
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
        if gap < max(0.05, 2 * noise) and not s.confirmed:
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
    if row.repeats:
        parts.append(f"n={len(row.repeats)}: {min(row.repeats):,.0f}–{max(row.repeats):,.0f}")
    if row.flaky:
        parts.append("flaky")
    return ", ".join(parts) or "-"


def config_text(row: TrialRow | WrongAnswers, engine: Engine | None) -> str:
    if isinstance(row, TrialRow) and row.baseline:
        return "engine defaults (baseline)"
    if engine is not None:
        try:
            return " ".join(engine.tuning_args(row.params)) or "(defaults)"
        except (KeyError, ValueError):
            pass
    return " ".join(f"{k}={v}" for k, v in row.params.items())


def quality_text(row: TrialRow) -> str:
    """The quality column: the reference itself, or how the config's answers compare with it."""
    if row.baseline:
        return "reference"
    q = row.quality
    if "quality_token_agreement" not in q:
        return "-"
    text = f"{q['quality_token_agreement']:.2f}"
    if "quality_logprob_delta" in q:
        text += f", Δlp {q['quality_logprob_delta']:.3f}"
    return text


def verdict_line(s: StudySummary) -> str:
    if s.best is None:
        return "No trial completed: nothing to recommend yet."
    if len(s.front) == 1:
        return f"Pareto front: one configuration, trial #{s.best.number}, is the best at once in {_objectives(s)}."
    if s.front:
        return (f"Pareto front: {len(s.front)} configurations trade {_objectives(s)}; none is better in every "
                f"metric than another. Best {s.metric}: trial #{s.best.number} at {s.best.median:,.1f}.")
    b = s.best
    if b.baseline and s.contender is not None:
        c = s.contender
        text = (f"Keep the engine defaults (trial #{b.number}, {b.median:,.1f} {s.metric}{_measured_as(s, b)}): the "
                f"best tuned configuration, trial #{c.number}, measured {c.median:,.1f}")
        if s.contender_gain is not None:
            text += f", {s.contender_gain:+.1%}"
            if s.contender_range is not None:
                text += f" (range {s.contender_range[0]:+.1%} to {s.contender_range[1]:+.1%})"
        text += ", but did not beat them in every interleaved round: a gain within the noise"
    elif b.baseline:
        text = (f"The engine defaults are the best configuration measured (trial #{b.number}, {b.median:,.1f} "
                f"{s.metric}{_measured_as(s, b)}): no tuned configuration beat them")
    else:
        text = f"Best: trial #{b.number} at {b.median:,.1f} {s.metric}{_measured_as(s, b)}"
        if b.spread is not None:
            text += f" (its rate moved ±{b.spread:.0%} over time within one measurement)"
        if s.baseline_value is not None and s.gain is not None:
            text += f", baseline {s.baseline_value:,.1f}: {s.gain:+.1%} over the engine defaults"
            if s.gain_range is not None:
                text += f" (range {s.gain_range[0]:+.1%} to {s.gain_range[1]:+.1%})"
        elif s.baseline_failure:
            text += f" (the baseline has no value: {s.baseline_failure})"
        elif s.baseline is not None and s.baseline.flaky:
            text += f" (the baseline, trial #{s.baseline.number}, failed a confirmation launch: no gain to state)"
        else:
            text += " (no baseline measured)"
        if s.confirmed and s.gain_low is not None and s.gain_low > 0:
            text += f"; it beat them in every interleaved round (by {s.gain_low:+.1%} at least)"
        if quality_text(b) != "-":
            text += f"; its answers match the defaults' (token agreement {quality_text(b)})"
        if s.tied:
            text += ("; within noise of it (not beaten in every round): "
                     + ", ".join(f"trial #{n}" for n in s.tied) + ", as good a choice")
    if s.flaky:
        text += "; flaky (a confirmation launch failed, cannot win): " + ", ".join(f"#{n}" for n in s.flaky)
    if s.target:
        gap = s.target_gap or 0.0
        text += f"; target {s.target:,.1f}: " + ("met" if gap >= 0 else f"not met ({-gap:.0%} short)")
    return text + "."


def _measured_as(s: StudySummary, row: TrialRow) -> str:
    """How the value was measured: a confirmed median, or a single (provisional) measurement."""
    if s.confirmed and row.repeats:
        return (f", median of {len(row.repeats)} confirmation launches, "
                f"{min(row.repeats):,.1f}–{max(row.repeats):,.1f}")
    return ", a single measurement (provisional: not confirmed)"


def _objectives(s: StudySummary) -> str:
    return " against ".join(f"{m} ({'higher' if d == 'maximize' else 'lower'} is better)"
                            for m, d in zip(s.metrics, s.directions, strict=False))


def front_lines(s: StudySummary, engine: Engine | None) -> tuple[list[str], list[list[str]]]:
    """The front as a table: header and rows of text (trial, each metric, config)."""
    header = ["trial", *s.metrics, "config"]
    rows = [[f"#{r.number}", *(_fmt(v) for v in r.values), config_text(r, engine)] for r in s.front]
    return header, rows


def to_json(s: StudySummary, command: str | None = None) -> dict[str, Any]:
    data = asdict(s)
    # What each configuration is judged by (the winner rule), beside its first value.
    for key in ("best", "baseline", "contender"):
        if data.get(key) is not None:
            data[key]["median"] = getattr(s, key).median
            # one number for a configuration in every output: its median (the trial's first stays beside it)
            data[key]["first_value"], data[key]["value"] = getattr(s, key).value, getattr(s, key).median
    for row, obj in zip(data["top"], s.top, strict=True):
        row["median"], row["first_value"], row["value"] = obj.median, obj.value, obj.median
    data.update(target_gap=s.target_gap, verdict=verdict_line(s), command=command)
    return _clean(data)


def _clean(obj: Any) -> Any:
    if isinstance(obj, float) and (math.isnan(obj) or math.isinf(obj)):
        return None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def write_best(summary: StudySummary, command: str | None, folder: Path,
               extra: dict[str, str] | None = None) -> Path | None:
    """Write best.json, best-command.sh and `extra` files (name -> text) under `folder`; return the JSON's path."""
    if summary.best is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "best.json"
    # `value` is the number every output states for the winner (its confirmation median, else its one
    # measurement); the trial's own first measurement stays as `first_value`.
    best = {**asdict(summary.best), "first_value": summary.best.value, "value": summary.best.median,
            "median": summary.best.median}
    data = _clean({"study": summary.study_name, "metric": summary.metric, "best": best,
                   "baseline_value": summary.baseline_value, "gain": summary.gain,
                   "gain_range": summary.gain_range, "gain_low": summary.gain_low, "confirmed": summary.confirmed,
                   "flaky": summary.flaky, "tied": summary.tied,
                   "verdict": verdict_line(summary), "command": command})
    if summary.front:  # several objectives: the answer is the front; "best" is its best on the first metric
        data["front"] = _clean([{"trial": r.number, "values": dict(zip(summary.metrics, r.values, strict=False)),
                                 "params": r.params, "baseline": r.baseline, "command": r.command}
                                for r in summary.front])
    write_atomically(path, json.dumps(data, indent=2))
    if command:
        write_atomically(folder / "best-command.sh", f"#!/bin/sh\nexec {command}\n")
    for name, text in (extra or {}).items():
        write_atomically(folder / name, text)
    return path

