"""How many confirmation launches make the winner stable on this machine: measured, not assumed.

Runs the real `autotuner run` (the code path users run: driver, baseline, confirmation round) on the
quickstart model with a few configurations queued by hand, then a confirmation round that launches
every one of them and the baseline `--repeats` times, interleaved. From those launches:

- the noise: each config's spread over its launches (coefficient of variation, and max/min - 1);
- for each budget (top-k candidates, r launches each): how often `winner.decide` on r launches drawn
  with replacement from the R measured (a bootstrap of what r fresh launches would give) names the
  same winner as all R do (the reference), over many draws; the candidates are the top-k by their
  trial's single value, as the driver picks them, plus the baseline.

    .venv/bin/python benchmarks/confirmation_budget.py [--repeats 6] [--draws 2000] [--keep DIR]
    .venv/bin/python benchmarks/confirmation_budget.py --analyze DIR   # a kept run, analysed again

It measures and prints; it never asserts. On a shared 2-core machine the load generator shares the
cores with the server: expect run-to-run noise of several percent.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import optuna

from autotuner.core import record
from autotuner.core.winner import Candidate, decide
from autotuner.util import paths

REPO = Path(__file__).resolve().parent.parent
BASE = dict(batch_size=512, ubatch_size=512, cont_batching=True, flash_attn="auto", cache_type_k="f16",
            cache_type_v="f16", ctx_size=8192, kv_unified=True)
CONFIGS = [  # close pairs on purpose: the hard case for a confirmation round
    {"parallel": 16, "threads": 2, **BASE},
    {"parallel": 8, "threads": 2, **BASE},
    {"parallel": 16, "threads": 1, **BASE},
]


def run_study(folder: Path, repeats: int, model: Path) -> optuna.Study:
    enqueue = "".join(f"  - {json.dumps(c)}\n" for c in CONFIGS)
    exp = (REPO / "experiments" / "quickstart.yaml").read_text()
    exp = (exp.replace("../models/quickstart.gguf", str(model.resolve()))
           .replace("../search_spaces/llamacpp.yaml", str(REPO / "search_spaces" / "llamacpp.yaml"))
           .replace("top_k: 2", f"top_k: {len(CONFIGS)}").replace("repeats: 3", f"repeats: {repeats}")
           .replace("pruner: ceiling", "pruner: none"))
    (folder / "exp.yaml").write_text(exp + "enqueue:\n" + enqueue)
    subprocess.run([sys.executable, "-m", "autotuner.cli", "run", "--experiment", "exp.yaml",
                    "--trials", str(len(CONFIGS) + 1)], cwd=folder, check=True,
                   env={**os.environ, "PYTHONPATH": str(REPO)})
    return optuna.load_study(study_name="quickstart", storage=f"sqlite:///{folder}/autotuner.db")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=6, help="launches of each config in the round (R)")
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--model", type=Path, default=REPO / "models" / "quickstart.gguf")
    ap.add_argument("--keep", type=Path, help="keep the study here (default: a temporary folder)")
    ap.add_argument("--analyze", type=Path, help="analyse the study kept in this folder; measure nothing")
    args = ap.parse_args()
    if not args.analyze and (paths.llama_server_binary() is None or not args.model.exists()):
        raise SystemExit("needs llama-server and the model: run scripts/setup.sh first")
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.analyze or args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        study = (optuna.load_study(study_name="quickstart", storage=f"sqlite:///{folder}/autotuner.db")
                 if args.analyze else run_study(folder, args.repeats, args.model))
        args.repeats = max(len(v) for v in record.confirmation(study.user_attrs).values())
        trials = {t.number: record.view(t) for t in study.get_trials(deepcopy=False)}
        rounds = record.confirmation(study.user_attrs)

    print(f"\nNoise: {args.repeats} launches of each config, interleaved in one round (output tok/s)")
    print(f"{'trial':>5} {'config':<28} {'first':>8} {'median':>8} {'min':>8} {'max':>8} {'cv':>6} {'max/min':>8}")
    cvs, spans = [], []
    for n, values in sorted(rounds.items()):
        t, ok = trials[n], [v for v in values if v is not None]
        name = "baseline (engine defaults)" if t.baseline else f"-np {t.params['parallel']} -t {t.params['threads']}"
        cv = statistics.stdev(ok) / statistics.mean(ok) if len(ok) > 1 else 0.0
        cvs.append(cv)
        spans.append(max(ok) / min(ok) - 1)
        print(f"{n:>5} {name:<28} {t.value or 0:>8.1f} {statistics.median(ok):>8.1f} {min(ok):>8.1f} "
              f"{max(ok):>8.1f} {cv:>6.1%} {spans[-1]:>8.1%}" + ("  (a launch failed)" if None in values else ""))
    print(f"median cv {statistics.median(cvs):.1%}, median max/min {statistics.median(spans):.1%}")

    full = [Candidate(n, trials[n].value or 0.0, trials[n].baseline, tuple(v)) for n, v in rounds.items()]
    reference = decide(full, "maximize")
    print(f"\nReference (all {args.repeats} launches): winner #{reference.winner.number}, "
          f"gain {reference.gain:+.1%} over the defaults" if reference.gain is not None else "")
    rng = random.Random(0)
    by_first = sorted((c for c in full if not c.baseline), key=lambda c: -c.first)
    print(f"\nSame winner as the reference, share of {args.draws} draws (gain: median [5th-95th percentile])")
    print(f"{'top-k':>5} {'r':>3} {'launches':>8} {'same winner':>12} {'gain':>26}")
    for k, r in itertools.product(range(1, len(by_first) + 1), range(1, args.repeats + 1)):
        hits, gains = 0, []
        for _ in range(args.draws):
            pool = by_first[:k] + [c for c in full if c.baseline]
            drawn = [Candidate(c.number, c.first, c.baseline, tuple(rng.choices(list(c.confirmations), k=r)))
                     for c in pool]
            v = decide(drawn, "maximize")
            hits += v.winner is not None and v.winner.number == reference.winner.number
            if v.gain is not None:
                gains.append(v.gain)
        gains.sort()
        g = (f"{statistics.median(gains):+.1%} [{gains[len(gains) // 20]:+.1%}, {gains[-len(gains) // 20 - 1]:+.1%}]"
             if gains else "-")
        print(f"{k:>5} {r:>3} {(k + 1) * r:>8} {hits / args.draws:>12.1%} {g:>26}")


if __name__ == "__main__":
    main()
