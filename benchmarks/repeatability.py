"""Does one config, launched fresh again and again, read the same? The spread of a trial's value over
fresh launches, through the driver users run: a study of the engine defaults and one tuned config
(`enqueue`), whose confirmation round launches both `--launches` times, interleaved (A, defaults, A,
defaults, ...). Printed per config: the values, their median, and the spread (lowest and highest over
the median). Target: every launch within +-5% of the median.

Measured twice on each workload, beside each other: without and with the per-level warm-up
(`workload.level_warmup`), on the quickstart's synthetic workload and on the shipped trace.

    python benchmarks/repeatability.py                   # ~15-25 minutes on 2 cores
    python benchmarks/repeatability.py --workloads quickstart --launches 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from autotuner.config import load_experiment  # noqa: E402
from autotuner.core.driver import StudyDriver  # noqa: E402
from autotuner.core.progress import Progress  # noqa: E402
from autotuner.core.record import confirmation  # noqa: E402
from autotuner.engines._base import get_engine  # noqa: E402
from autotuner.launchers.process import ProcessLauncher  # noqa: E402
from autotuner.tracking import MlflowTracker  # noqa: E402
from autotuner.util.paths import llama_server_binary  # noqa: E402
from autotuner.workloads.samples import write as write_samples  # noqa: E402

TARGET = 0.05
TUNED = {"parallel": 16, "threads": 2, "batch_size": 512, "ubatch_size": 512, "cont_batching": True,
         "ctx_size": 16384, "kv_unified": True}
WORKLOADS = {
    "quickstart": "experiments/quickstart.yaml",
    "trace": "experiments/quickstart-trace.yaml",
}


def spread(values: list[float]) -> str:
    m = statistics.median(values)
    return (f"median {m:,.1f}, {min(values) / m - 1:+.1%} to {max(values) / m - 1:+.1%} "
            f"({'within' if max(abs(v / m - 1) for v in values) <= TARGET else 'OUTSIDE'} +-{TARGET:.0%})")


def run(name: str, level_warmup: bool, launches: int, tmp: Path) -> dict[str, list[float]]:
    source = REPO / WORKLOADS[name]
    cfg = yaml.safe_load(source.read_text())
    folder = tmp / f"{name}-{'warm' if level_warmup else 'cold'}"
    folder.mkdir()
    write_samples(folder / "workloads")
    cfg.update(name=f"repeat-{name}", advisors=[], enqueue=[TUNED], stop={"patience": None},
               confirm={"top_k": 1, "repeats": launches}, study={"storage": f"sqlite:///{folder}/s.db", "seed": 0})
    cfg["model"]["path"] = str(REPO / "models" / "quickstart.gguf")
    cfg["search_space"] = str(REPO / "search_spaces" / "llamacpp-traffic.yaml")
    cfg["workload"]["level_warmup"] = level_warmup
    if "trace" in cfg["workload"]:
        cfg["workload"]["trace"]["path"] = str(folder / "workloads" / "trace.jsonl")
    (folder / "exp.yaml").write_text(yaml.safe_dump(cfg))
    driver = StudyDriver(load_experiment(folder / "exp.yaml"), engine=get_engine("llamacpp"),
                         launcher=ProcessLauncher(folder / "procs"), tracker=MlflowTracker(root=folder / "mlruns"),
                         results_dir=folder / "results", binary=str(llama_server_binary()),
                         progress=lambda total: Progress(total, "output_tok_per_s"))
    study = driver.run(2)
    measured = confirmation(study.user_attrs)
    names = {t.number: "defaults" if t.user_attrs.get("baseline") else "tuned" for t in study.trials}
    return {names[n]: [v for v in values if v is not None] for n, values in measured.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--launches", type=int, default=5)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="repeatability-"))
    rows = []
    for name in args.workloads:
        for warm in (False, True):
            for config, values in run(name, warm, args.launches, tmp).items():
                rows.append((name, "per-level warm-up" if warm else "first level only", config, values))
    print(f"\n{args.launches} fresh launches of each config, interleaved, through the driver's confirmation round:")
    for name, how, config, values in rows:
        print(f"  {name:<10} {how:<18} {config:<8} {', '.join(f'{v:,.1f}' for v in values)}: {spread(values)}")


if __name__ == "__main__":
    main()
