"""What a new user gets from the quickstart: the winner and its confirmed gain over the defaults, run after run.

Runs the real `autotuner run --experiment experiments/quickstart.yaml --trials 12` (what
`scripts/quickstart.sh` runs, seed and all) `--runs` times, each in a fresh folder (a new study, MLflow
store and results), one after another, and prints per run: the winner's config, the verdict's gain over
the defaults with its range, whether it was confirmed, the trials and how they ended, the wall time,
and the quality gate's share of the trials' time (its `quality_s` against `total_s`).

    .venv/bin/python benchmarks/quickstart_outcome.py [--runs 5] [--trials 12] [--keep DIR]
    .venv/bin/python benchmarks/quickstart_outcome.py --analyze DIR   # kept runs: the same lines again, plus
                                                                      # each confirmation round's spread

It measures and prints; it never asserts. Measure on a quiet machine: the load generator shares the
2 cores with the server.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import optuna

REPO = Path(__file__).resolve().parent.parent


def one_run(folder: Path, trials: int) -> dict:
    """Run the quickstart in `folder` and read what it concluded."""
    exp = (REPO / "experiments" / "quickstart.yaml").read_text()
    exp = (exp.replace("../models/quickstart.gguf", str(REPO / "models" / "quickstart.gguf"))
           .replace("../search_spaces/llamacpp.yaml", str(REPO / "search_spaces" / "llamacpp.yaml")))
    (folder / "exp.yaml").write_text(exp)
    t = time.perf_counter()
    with (folder / "run.log").open("w") as log:
        subprocess.run([sys.executable, "-m", "autotuner.cli", "run", "--experiment", "exp.yaml", "--trials",
                        str(trials)], cwd=folder, check=True, stdout=log, stderr=subprocess.STDOUT,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    return read_run(folder, time.perf_counter() - t)


def read_run(folder: Path, wall: float | None) -> dict:
    best = json.loads((folder / "results" / "quickstart" / "best.json").read_text())
    study = optuna.load_study(study_name="quickstart", storage=f"sqlite:///{folder}/autotuner.db")
    launched = [t for t in study.trials if t.user_attrs.get("duplicate_of") is None]
    timings = [t.user_attrs.get("timings") or {} for t in launched]
    gate = sum(x.get("quality_s", 0.0) for x in timings) / max(sum(x.get("total_s", 0.0) for x in timings), 1e-9)
    endings = Counter(t.user_attrs.get("failure_class") or t.state.name for t in launched)
    confirmation = study.user_attrs.get("confirmation") or {}
    rounds = {int(n): [v for v in vs if v is not None] for n, vs in confirmation.items()}
    spreads = {n: statistics.pstdev(vs) / statistics.mean(vs) for n, vs in rounds.items() if len(vs) > 1}
    return {"best": best, "wall_s": wall, "gate_share": gate, "endings": endings, "trials": len(launched),
            "spreads": spreads, "rounds": rounds}


def line(i: int, r: dict) -> str:
    b = r["best"]
    gain = b.get("gain")
    low_high = b.get("gain_range") or [None, None]
    params = b["best"].get("params") or {}
    config = "engine defaults" if b["best"].get("baseline") else " ".join(f"{k}={v}" for k, v in params.items())
    text = (f"{gain:+.1%} [{low_high[0]:+.1%}, {low_high[1]:+.1%}]" if gain is not None and low_high[0] is not None
            else "-")
    wall = f"{r['wall_s'] / 60:.1f} min; " if r["wall_s"] else ""
    spread = ", ".join(f"#{n} cv {cv:.0%}" for n, cv in sorted(r["spreads"].items()))
    return (f"run {i}: winner #{b['best']['number']} ({config}); gain {text}; "
            f"{'confirmed' if b.get('confirmed') else 'provisional'}; {r['trials']} launched trials "
            f"({', '.join(f'{n} {k}' for k, n in sorted(r['endings'].items()))}); {wall}"
            f"gate {r['gate_share']:.0%} of trial time; confirmation round spread: {spread or '-'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--trials", type=int, default=12, help="as scripts/quickstart.sh")
    parser.add_argument("--keep", type=Path, help="keep each run's folder under this one")
    parser.add_argument("--analyze", type=Path, help="read the runs kept under this folder instead of running")
    args = parser.parse_args()
    if args.analyze:
        rows = [read_run(f, None) for f in sorted(args.analyze.glob("run-*")) if (f / "autotuner.db").exists()]
        for i, r in enumerate(rows, 1):
            print(line(i, r))
        summary(rows)
        return 0
    if not (REPO / "models" / "quickstart.gguf").exists():
        print("needs models/quickstart.gguf and llama-server: run scripts/setup.sh first", file=sys.stderr)
        return 2
    rows = []
    for i in range(1, args.runs + 1):
        if args.keep:
            folder = args.keep / f"run-{i}"
            folder.mkdir(parents=True, exist_ok=True)
            rows.append(one_run(folder, args.trials))
        else:
            with tempfile.TemporaryDirectory(prefix="quickstart-outcome-") as tmp:
                rows.append(one_run(Path(tmp), args.trials))
        print(line(i, rows[-1]), flush=True)
    summary(rows)
    return 0


def summary(rows: list[dict]) -> None:
    gains = [r["best"].get("gain") for r in rows if r["best"].get("gain") is not None]
    if gains:
        print(f"gain over the defaults: median {statistics.median(gains):+.1%} "
              f"(range {min(gains):+.1%} to {max(gains):+.1%}) over {len(gains)} of {len(rows)} runs; "
              f"gate share median {statistics.median(r['gate_share'] for r in rows):.0%}")
    spreads = [cv for r in rows for cv in r["spreads"].values()]
    if spreads:
        print(f"confirmation launches of one config: cv median {statistics.median(spreads):.1%} "
              f"(range {min(spreads):.1%} to {max(spreads):.1%}) over {len(spreads)} configs")


if __name__ == "__main__":
    sys.exit(main())
