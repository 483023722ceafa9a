"""Does one config, launched fresh again and again, read the same? The spread of a trial's value over
fresh launches, through the driver users run: a study of the engine defaults and one tuned config
(`enqueue`), whose confirmation round launches both `--launches` times, interleaved (A, defaults, A,
defaults, ...). Printed per config: the values, their median, and the spread (lowest and highest over
the median). Target: every launch within +-5% of the median.

From the same launches, two definitions side by side: the whole level's throughput (`output_tok_per_s`,
as `vllm bench serve` divides) and the steady window's (`output_tok_per_s_steady`, the drain left out),
each at the level that scores best by it. And the first launch of the run (the study's trial, before the
round) beside the round's median: is the first launch disadvantaged?

Measured twice on each workload, beside each other: without and with the per-level warm-up
(`workload.level_warmup`), on the quickstart's synthetic workload and on the shipped trace.

    python benchmarks/repeatability.py                   # ~20-30 minutes on 2 cores
    python benchmarks/repeatability.py --workloads quickstart --launches 3 --warmups on
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

from autotuner.compose import make_driver  # noqa: E402
from autotuner.config import load_experiment  # noqa: E402
from autotuner.core.progress import Progress  # noqa: E402
from autotuner.engines._base import get_engine  # noqa: E402
from autotuner.launchers.process import ProcessLauncher  # noqa: E402
from autotuner.tracking import MlflowTracker  # noqa: E402
from autotuner.util.paths import llama_server_binary  # noqa: E402
from autotuner.workloads.samples import write as write_samples  # noqa: E402

TARGET = 0.05
# One tuned config per workload, from studies of each (a config tuned for one traffic shape can fail on
# another: 16 slots give the trace's 500-token prompts a TTFT past a minute).
TUNED = {
    "quickstart": {"parallel": 16, "threads": 2, "batch_size": 512, "ubatch_size": 512, "cont_batching": True,
                   "ctx_size": 16384, "kv_unified": True},
    "trace": {"parallel": 3, "ctx_size": 8192, "kv_unified": False, "cache_reuse": 256},
}
WORKLOADS = {
    "quickstart": "experiments/quickstart.yaml",
    "trace": "experiments/quickstart-trace.yaml",
}


def spread(values: list[float]) -> str:
    m = statistics.median(values)
    return (f"median {m:,.1f}, {min(values) / m - 1:+.1%} to {max(values) / m - 1:+.1%} "
            f"({'within' if max(abs(v / m - 1) for v in values) <= TARGET else 'OUTSIDE'} +-{TARGET:.0%})")


METRICS = ("output_tok_per_s", "output_tok_per_s_steady")


def best(levels: list[dict[str, float]], metric: str) -> float | None:
    values = [m[metric] for m in levels if m.get(metric) == m.get(metric) and metric in m]  # NaN: no steady state
    return max(values) if values else None


def run(name: str, level_warmup: bool, launches: int, tmp: Path) -> dict[str, dict[str, list[float]]]:
    """{config: {"first " + metric or metric: values}}: the trial's reading and the round's launches."""
    source = REPO / WORKLOADS[name]
    cfg = yaml.safe_load(source.read_text())
    folder = tmp / f"{name}-{'warm' if level_warmup else 'cold'}"
    folder.mkdir()
    write_samples(folder / "workloads")
    cfg.update(name=f"repeat-{name}", advisors=[], enqueue=[TUNED[name]], stop={"patience": None},
               confirm={"top_k": 1, "repeats": launches}, study={"storage": f"sqlite:///{folder}/s.db", "seed": 0})
    cfg["model"]["path"] = str(REPO / "models" / "quickstart.gguf")
    cfg["search_space"] = str(REPO / "search_spaces" / "llamacpp-traffic.yaml")
    cfg["workload"]["level_warmup"] = level_warmup
    # The question is whether a launch reads the same, not whether it meets an SLO: a launch that misses
    # one still measured its throughput, and the round needs both configs complete.
    cfg["objective"].pop("slo", None)
    if "trace" in cfg["workload"]:
        cfg["workload"]["trace"]["path"] = str(folder / "workloads" / "trace.jsonl")
    (folder / "exp.yaml").write_text(yaml.safe_dump(cfg))
    driver = make_driver(load_experiment(folder / "exp.yaml"), engine=get_engine("llamacpp"),
                         launcher=ProcessLauncher(folder / "procs"), tracker=MlflowTracker(root=folder / "mlruns"),
                         results_dir=folder / "results", binary=str(llama_server_binary()),
                         progress=lambda total: Progress(total, "output_tok_per_s"))
    seen: dict[str, dict[str, list[float]]] = {"defaults": {}, "tuned": {}}
    launch = driver.executor.run

    def recorded(params: dict, **kwargs):  # the real launch; this only keeps what it measured
        result = launch(params, **kwargs)
        config = "tuned" if params else "defaults"
        first = "" if kwargs.get("trial") is None else "first "
        for metric in METRICS:
            if result.state == "COMPLETE" and (value := best(result.level_metrics, metric)) is not None:
                seen[config].setdefault(first + metric, []).append(value)
        return result

    driver.executor.run = recorded  # type: ignore[method-assign]
    driver.run(2)
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--launches", type=int, default=5)
    parser.add_argument("--warmups", choices=["both", "on", "off"], default="both")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="repeatability-"))
    warmups = {"both": (False, True), "on": (True,), "off": (False,)}[args.warmups]
    rows = []
    for name in args.workloads:
        for warm in warmups:
            for config, measured in run(name, warm, args.launches, tmp).items():
                rows.append((name, "per-level warm-up" if warm else "first level only", config, measured))
                print(rows[-1], flush=True)
    print(f"\n{args.launches} fresh launches of each config, interleaved, through the driver's confirmation round "
          "(each value: the launch's best level by that metric):")
    for name, how, config, measured in rows:
        for metric in METRICS:
            values = measured.get(metric, [])
            if values:
                print(f"  {name:<10} {how:<18} {config:<8} {metric:<24} {', '.join(f'{v:,.1f}' for v in values)}: "
                      f"{spread(values)}")
        for metric in METRICS:
            first, values = measured.get("first " + metric), measured.get(metric)
            if first and values:
                print(f"  {name:<10} {how:<18} {config:<8} first launch {metric:<24} {first[0]:,.1f} = "
                      f"{first[0] / statistics.median(values) - 1:+.1%} vs the round's median")


if __name__ == "__main__":
    main()
