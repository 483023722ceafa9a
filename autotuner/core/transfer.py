"""Does a winner still win on traffic it was not tuned on? The transfer table.

A study's winner was chosen on one workload. `measure` launches it and the engine defaults on another
experiment's workload, load and objective, interleaved (winner, defaults, winner, defaults, ...) so
drift hits both alike, as the confirmation round does; `TransferRow` says what each measured and
whether the winner beat the defaults in every round there (the verdict's noise rule, winner.paired_low).
A config that cannot hold the other workload (its context, its lengths) is infeasible there, and the
row says so instead of launching it.

It decides nothing about the study it came from, and writes only the launches' own folders.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotuner.config import ConfigError, Experiment, load_experiment
from autotuner.core.executor import TrialExecutor
from autotuner.core.progress import Progress
from autotuner.core.winner import paired_low, pairing_range
from autotuner.util import secrets
from autotuner.util.files import write_atomically


@dataclass
class TransferRow:
    experiment: str
    workload: str
    metric: str
    direction: str
    winner: list[float | None] = field(default_factory=list)  # one per round; None: the launch failed
    defaults: list[float | None] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def _sign(self) -> float:
        return 1.0 if self.direction == "maximize" else -1.0

    @property
    def paired(self) -> tuple[list[float], list[float]]:
        both = [(w, d) for w, d in zip(self.winner, self.defaults, strict=False) if w is not None and d is not None]
        return [w for w, _ in both], [d for _, d in both]

    @property
    def gain(self) -> float | None:
        w, d = self.paired
        if not w:
            return None
        ratio = statistics.median(w) / statistics.median(d) if statistics.median(d) else None
        return None if ratio is None else (ratio - 1) * self._sign()

    @property
    def verdict(self) -> str:
        w, d = self.paired
        if not w:
            return "not measured: " + ("; ".join(dict.fromkeys(self.failures)) or "no round completed")
        low = paired_low(w, d, self._sign())
        if low is not None and low > 0:
            return "the tuned config wins in every round"
        lose = paired_low(d, w, self._sign())
        if lose is not None and lose > 0:
            return "the defaults win in every round: the tuned config does not carry over"
        return "within the noise: neither wins every round"

    def to_json(self) -> dict[str, Any]:
        w, d = self.paired
        return {"experiment": self.experiment, "workload": self.workload, "metric": self.metric,
                "winner": self.winner, "defaults": self.defaults, "gain": self.gain,
                "gain_range": pairing_range(w, d, self._sign()) if w else None, "verdict": self.verdict,
                "failures": self.failures}


def measure(executor: TrialExecutor, params: Mapping[str, Any], *, repeats: int, workdir: Path,
            progress: Progress, describe: str) -> TransferRow:
    """`params` and the defaults on `executor`'s experiment, `repeats` rounds each, interleaved."""
    cfg = executor.cfg
    row = TransferRow(cfg.name, describe, cfg.objective.metric, cfg.objective.direction)
    for k in range(1, repeats + 1):
        for label, config, values in (("winner", dict(params), row.winner), ("defaults", {}, row.defaults)):
            progress.confirming(0, f"{label} on {cfg.name}, round {k} of {repeats}", 2 * k - (label == "winner"),
                                2 * repeats)
            result = executor.run(config, trial=None, trial_dir=workdir / f"{label}-{k}",
                                  progress=progress, timings={}, label=f"transfer-{label}-{k}")
            values.append(result.value if result.state == "COMPLETE" else None)
            if result.state != "COMPLETE":
                row.failures.append(f"{label}: {result.failure_class}: {result.reason}")
            if result.failure_class == "infeasible":
                return row  # the same rule refuses it every round
    return row


def table_lines(rows: Sequence[TransferRow], fmt: Callable[[float | None], str] = lambda v: "-" if v is None
                else f"{v:,.1f}") -> list[str]:
    """A Markdown table: per experiment, the winner's and the defaults' median, the gain and the verdict."""
    out = ["| experiment | workload | metric | tuned (median) | defaults (median) | gain (range) | verdict |",
           "|---|---|---|---:|---:|---|---|"]
    for r in rows:
        w, d = r.paired
        rng = pairing_range(w, d, r._sign()) if w else None
        gain = "-" if r.gain is None else f"{r.gain:+.1%}" + (f" ({rng[0]:+.1%} to {rng[1]:+.1%})" if rng else "")
        out.append(f"| {r.experiment} | {r.workload} | {r.metric} | {fmt(statistics.median(w) if w else None)} | "
                   f"{fmt(statistics.median(d) if d else None)} | {gain} | {r.verdict} |")
    return out


def run(source: Experiment, targets: Sequence[Path], number: int, params: Mapping[str, Any], *, repeats: int,
        workdir: Path) -> tuple[list[str], Path]:
    """Trial `number`'s `params` (of `source`'s study) and the defaults on each target experiment: the
    table's lines and the transfer.json written. Raises ConfigError for a target of another engine or model."""
    from autotuner.core import preflight
    from autotuner.launchers import make_launcher

    executors = []
    for path in targets:  # every target checked before anything is launched
        target = load_experiment(path)
        if (target.config.engine, target.model_path) != (source.config.engine, source.model_path):
            raise ConfigError(f"{path}: the winner is a {source.config.engine} config of {source.model_path}; this "
                              f"experiment runs {target.config.engine} on {target.model_path}")
        engine = preflight.check(target)
        binary = None
        if target.config.launcher == "process":
            binary, hint = engine.find_binary()
            if binary is None:
                raise ConfigError(hint)
        executors.append(TrialExecutor(target, engine=engine, launcher=make_launcher(target), binary=binary,
                                       secrets=secrets.collect(target.config.secret_env)))
    rows = [measure(executor, params, repeats=repeats, workdir=workdir / f"transfer-{k + 1}",
                    progress=Progress(None, executor.cfg.objective.metric),
                    describe=executor.cfg.workload.describe().split(";")[0])
            for k, executor in enumerate(executors)]
    lines = [f"Trial #{number} of study '{source.config.study_name}' (tuned on: "
             f"{source.config.workload.describe().split(';')[0]}) beside the engine defaults, {repeats} interleaved "
             "round(s) on each workload:", "", *table_lines(rows)]
    workdir.mkdir(parents=True, exist_ok=True)
    written = workdir / "transfer.json"
    write_atomically(written, json.dumps({"trial": number, "params": dict(params),
                                          "rows": [r.to_json() for r in rows]}, indent=2))
    return lines, written
