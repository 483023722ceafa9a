"""The tuner's own cost per trial, measured on a real study against the real llama-server.

Overhead is everything in a trial's wall time except the engine's start (spawn until /health answers),
the warmup, the measurement and the engine's stop: asking Optuna, building argv, MLflow logging,
telling the study, progress output. Printed per trial, in milliseconds and as a share of the trial.

    .venv/bin/python benchmarks/tuner_overhead.py [--trials 6] [--model models/quickstart.gguf]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from autotuner.compose import make_driver  # noqa: E402
from autotuner.config import load_experiment
from autotuner.core.progress import Progress
from autotuner.engines._base import get_engine
from autotuner.launchers.process import ProcessLauncher
from autotuner.tracking import MlflowTracker
from autotuner.util import paths

REPO = Path(__file__).resolve().parent.parent
ENGINE_PHASES = ("ready_s", "warmup_s", "measure_s", "stop_s")  # engine start, warmup, measurement, stop


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=6)
    ap.add_argument("--model", type=Path, default=REPO / "models" / "quickstart.gguf")
    ap.add_argument("--num-prompts", type=int, default=32)
    args = ap.parse_args()
    binary = paths.llama_server_binary()
    if binary is None or not args.model.exists():
        raise SystemExit("needs llama-server and the model: run scripts/setup.sh first")

    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        exp_file = tmp_path / "exp.yaml"
        exp_file.write_text(
            (REPO / "experiments" / "quickstart.yaml").read_text()
            .replace("../models/quickstart.gguf", str(args.model.resolve()))
            .replace("../search_spaces/llamacpp.yaml", str(REPO / "search_spaces" / "llamacpp.yaml"))
            .replace("num_prompts: 32", f"num_prompts: {args.num_prompts}")
            .replace("top_k: 2", "top_k: 0")
            .replace("sqlite:///autotuner.db", f"sqlite:///{tmp_path}/study.db"))
        exp = load_experiment(exp_file)
        t = time.perf_counter()
        tuner = make_driver(exp, engine=get_engine("llamacpp"), launcher=ProcessLauncher(tmp_path / "procs"),
                      tracker=MlflowTracker(root=tmp_path / "mlruns"), results_dir=tmp_path / "results",
                      binary=str(binary), progress=lambda n: Progress(n, "output_tok_per_s"))
        setup_s = time.perf_counter() - t
        study = tuner.run(args.trials)

    print(f"\nTuner overhead per trial ({args.model.name}, {args.num_prompts} requests per trial)")
    print(f"{'trial':>5} {'state':>8} {'total s':>8} {'engine s':>9} {'overhead ms':>12} {'share':>7}")
    shares, overheads = [], []
    for trial in study.get_trials():
        timings = trial.user_attrs.get("timings", {})
        total = timings.get("total_s", 0.0)
        engine = sum(timings.get(k, 0.0) for k in ENGINE_PHASES)
        overhead = total - engine
        share = overhead / total if total else 0.0
        if trial.state.name == "COMPLETE":
            shares.append(share)
            overheads.append(overhead)
        print(
            f"{trial.number:>5} {trial.state.name:>8} {total:>8.2f} {engine:>9.2f} "
            f"{overhead * 1000:>12.1f} {share:>7.2%}"
        )
    if shares:
        print(f"\nmedian overhead {statistics.median(overheads) * 1000:.1f} ms per trial = "
              f"{statistics.median(shares):.2%} of a trial (target: under 1%)")
    print(f"one-off start-up (study, MLflow store, engine version): {setup_s:.2f} s")


if __name__ == "__main__":
    main()
