"""What a study found: the top trials, outcomes by class, the gain over the baseline, and the winner
as a command a user can paste.

`summarize` is pure over the study's trials; `render` and `write_best` are the only parts that print
or write.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState
from rich.console import Console
from rich.table import Table

from autotuner.engines._base import Engine, LaunchContext

EXPORT_PORT = 8080  # the winner's command listens here, not on the tuner's throw-away port


@dataclass
class TrialRow:
    number: int
    value: float
    params: dict[str, Any]
    baseline: bool
    metrics: dict[str, float]


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

    @property
    def gain(self) -> float | None:
        """Relative improvement of the best over the baseline (0.25 = 25% better)."""
        if self.best is None or not self.baseline_value:
            return None
        ratio = self.best.value / self.baseline_value
        return ratio - 1 if self.direction == "maximize" else 1 - ratio


def _best_level(trial: FrozenTrial, metric: str, direction: str) -> dict[str, float]:
    levels = trial.user_attrs.get("levels") or []
    if not levels:
        return {}
    pick = max if direction == "maximize" else min
    return pick(levels, key=lambda m: m.get(metric, 0.0))


def summarize(study: optuna.Study, metric: str, top_k: int = 5) -> StudySummary:
    trials = study.get_trials(deepcopy=False)
    direction = "maximize" if study.direction == optuna.study.StudyDirection.MAXIMIZE else "minimize"
    complete = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
    complete.sort(key=lambda t: t.value, reverse=direction == "maximize")
    rows = [TrialRow(t.number, t.value, dict(t.params), bool(t.user_attrs.get("baseline")),
                     _best_level(t, metric, direction)) for t in complete]
    baseline = next((r for r in rows if r.baseline), None)
    return StudySummary(
        study_name=study.study_name, metric=metric, direction=direction,
        counts=dict(Counter(t.state.name for t in trials)),
        failure_classes=dict(Counter(t.user_attrs.get("failure_class", "unknown")
                                     for t in trials if t.state == TrialState.FAIL)),
        top=rows[:top_k], baseline_value=baseline.value if baseline else None,
        best=rows[0] if rows else None,
    )


def best_command(engine: Engine, row: TrialRow, ctx: LaunchContext) -> str:
    """The winner as a ready-to-run command line."""
    return engine.build(row.params, ctx).command_line()


def export_context(ctx: LaunchContext) -> LaunchContext:
    return replace(ctx, port=EXPORT_PORT)


def render(summary: StudySummary, engine: Engine, command: str | None, console: Console) -> None:
    m = summary.metric
    table = Table(title=f"Best trials of study '{summary.study_name}' ({summary.direction} {m})")
    table.add_column("trial", justify="right")
    table.add_column(m, justify="right")
    for col in ("ttft_ms_p99", "tpot_ms_p50", "e2e_ms_p99"):
        table.add_column(col, justify="right")
    table.add_column("config", overflow="fold")
    for row in summary.top:
        config = "engine defaults (baseline)" if row.baseline else engine.describe(row.params)
        table.add_row(str(row.number), f"{row.value:,.1f}",
                      *(f"{row.metrics[c]:,.1f}" if c in row.metrics else "-" for c in ("ttft_ms_p99", "tpot_ms_p50", "e2e_ms_p99")),
                      config)
    console.print(table)
    counts = ", ".join(f"{n} {s.lower()}" for s, n in sorted(summary.counts.items()))
    fails = ", ".join(f"{n} {c}" for c, n in sorted(summary.failure_classes.items()))
    console.print(f"Trials: {counts}" + (f" (failures: {fails})" if fails else ""), soft_wrap=True)
    if summary.best is None:
        console.print("[red]No trial completed: nothing to recommend yet.[/]")
        return
    if summary.baseline_value is not None and summary.gain is not None:
        console.print(f"Best: trial #{summary.best.number} at {summary.best.value:,.1f} {m}, "
                      f"baseline {summary.baseline_value:,.1f}: [bold]{summary.gain:+.1%}[/] over the engine defaults",
                      soft_wrap=True)
    else:
        console.print(f"Best: trial #{summary.best.number} at {summary.best.value:,.1f} {m} (no baseline measured)",
                      soft_wrap=True)
    if command:
        console.print("Run the best configuration with:")
        console.print(command, markup=False, highlight=False, soft_wrap=True)


def write_best(summary: StudySummary, command: str | None, folder: Path) -> Path | None:
    """Write best.json and best-command.sh under `folder`; return the JSON's path."""
    if summary.best is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "best.json"
    data = {"study": summary.study_name, "metric": summary.metric, "best": asdict(summary.best),
            "baseline_value": summary.baseline_value, "gain": summary.gain, "command": command}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(path)
    if command:
        (folder / "best-command.sh").write_text(f"#!/bin/sh\nexec {command}\n")
    return path
