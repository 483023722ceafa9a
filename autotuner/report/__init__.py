"""What a study found, written like an engineer's status report at the end of a night: the machine,
what was tried and how it ended, the best against the baseline and the target, what limits the best
configurations and where throughput stops growing, and what the tuner would do with more trials.

summary.py: `summarize` (pure over the study's trials and the attributes the tuner wrote), the verdict
(`verdict_line`) and next steps in words, `to_json`, and `write_best` (the only part that writes files);
markdown.py: report.md; console.py: the end-of-run view. The reasoning lives in bench/limits.py (the
binding limit) and diagnosis.py (plateau, convergence).
"""

from autotuner.report.console import WIDTH, render
from autotuner.report.markdown import _packing_text, to_markdown
from autotuner.report.summary import (
    StudySummary,
    TrialRow,
    WrongAnswers,
    config_text,
    front_lines,
    next_steps,
    pareto_rows,
    quality_text,
    summarize,
    to_json,
    verdict_line,
    write_best,
)

__all__ = [
    "WIDTH",
    "StudySummary",
    "TrialRow",
    "WrongAnswers",
    "_packing_text",
    "config_text",
    "front_lines",
    "next_steps",
    "pareto_rows",
    "quality_text",
    "render",
    "summarize",
    "to_json",
    "to_markdown",
    "verdict_line",
    "write_best",
]
