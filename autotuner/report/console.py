"""The short end-of-run view on a terminal: the top table (or the Pareto front), outcomes, the verdict
and the winner's command."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from autotuner.engines._base import Engine
from autotuner.report.summary import (
    LATENCY_COLUMNS,
    StudySummary,
    _fmt,
    _spread_text,
    config_text,
    front_lines,
    quality_text,
    verdict_line,
)

WIDTH = 120  # what the view fits: numbers in the table, each config on a line of its own below it


def render(summary: StudySummary, engine: Engine, command: str | None, console: Console) -> None:
    """The short end-of-run view: the top table (several objectives: the Pareto front), outcomes, the
    verdict and the winner's command (the front's commands). Fits `WIDTH` columns: the table holds the
    numbers and each config follows on its own line; the binding limits are in report.md."""
    if summary.front:
        _render_front(summary, engine, console)
        return
    m = summary.metric
    table = _table(f"Best trials of study '{summary.study_name}' ({summary.direction} {m})",
                   ["trial", m, "range", *LATENCY_COLUMNS, "quality"])
    for row in summary.top:
        table.add_row(f"#{row.number}", f"{row.median:,.1f}", _spread_text(row),
                      *(_fmt(row.metrics.get(c)) for c in LATENCY_COLUMNS), quality_text(row))
    console.print(table)
    _config_lines([(row.number, config_text(row, engine)) for row in summary.top], console)
    _render_outcomes(summary, console)
    if summary.best is None:
        console.print("[red]No trial completed: nothing to recommend yet.[/]")
        return
    if summary.top_two_within_noise and not summary.best.baseline:  # the defaults kept: the verdict says why
        console.print(f"The top two (#{summary.top[0].number} and #{summary.top[1].number}) are within measurement "
                      "noise of each other: either is a sound choice.", soft_wrap=True, markup=False)
    console.print(verdict_line(summary), soft_wrap=True, markup=False, highlight=False)
    if command:
        console.print("Run the best configuration with:")
        console.print(command, markup=False, highlight=False, soft_wrap=True)


def _table(title: str, header: list[str]) -> Table:
    """Numbers right-aligned under a plain rule; a cell wraps at its spaces when the terminal is narrow."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for name in header:
        table.add_column(name, justify="right")
    return table


def _config_lines(configs: list[tuple[int, str]], console: Console) -> None:
    for number, config in configs:
        console.print(f"  #{number}  {config}", markup=False, highlight=False)


def _render_front(summary: StudySummary, engine: Engine, console: Console) -> None:
    header, rows = front_lines(summary, engine)
    table = _table(f"Pareto front of study '{summary.study_name}'", header[:-1])
    for cells in rows:
        table.add_row(*cells[:-1])
    console.print(table)
    _render_outcomes(summary, console)
    console.print(verdict_line(summary), soft_wrap=True, markup=False, highlight=False)
    for row in summary.front:
        values = ", ".join(f"{m} {_fmt(v)}" for m, v in zip(summary.metrics, row.values, strict=False))
        console.print(f"#{row.number} ({values}):", markup=False, highlight=False, soft_wrap=True)
        console.print(row.command or config_text(row, engine), markup=False, highlight=False, soft_wrap=True)


def _render_outcomes(summary: StudySummary, console: Console) -> None:
    counts = ", ".join(f"{n} {s.lower()}" for s, n in sorted(summary.counts.items()))
    fails = ", ".join(f"{n} {c}" for c, n in sorted(summary.failure_classes.items()))
    console.print(f"Trials: {counts}" + (f" (failures: {fails})" if fails else ""), soft_wrap=True)
    if summary.spent:
        console.print("Proposed by: " + ", ".join(f"{who} {n['launches']}" for who, n in sorted(
            summary.spent.items(), key=lambda kv: -kv[1]["launches"])), soft_wrap=True, markup=False)
    if summary.stop_reason:
        console.print(f"Stopped early: {summary.stop_reason}", soft_wrap=True, markup=False)
    if summary.wrong:
        console.print("Failed the quality gate: " + ", ".join(
            f"#{w.number}" + (f" ({w.speed_ratio:.2f}x the defaults' answering speed)" if w.speed_ratio else "")
            for w in summary.wrong), soft_wrap=True, markup=False)
