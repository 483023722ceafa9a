"""What the study outputs cost: plots and the report per trial, PNGs at the end, and the engine-metrics
sampler during a measurement (numbers, not a test).

1. Plots and report on synthetic studies of 10, 30 and 100 trials (a llama.cpp-like space): the HTML
   redrawn after each trial (without and with parameter importances), the PNGs drawn at the end
   (kaleido, and Optuna's matplotlib backend), and `report.summarize`.
2. The sampler against the real llama-server: CPU time per /metrics poll, and output tok/s of the same
   load with and without the sampler, alternating A/B runs (medians).

    .venv/bin/python benchmarks/report_overhead.py [--model models/quickstart.gguf] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import subprocess
import tempfile
import time
import warnings
from pathlib import Path

import optuna

from autotuner import report
from autotuner.engines._base import get_engine
from autotuner.report import plots
from autotuner.util import paths

REPO = Path(__file__).resolve().parent.parent


def synthetic_study(n: int) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.simplefilter("ignore")
    rng = random.Random(0)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=0))

    def objective(t: optuna.Trial) -> float:
        p = t.suggest_int("parallel", 1, 32, log=True)
        th = t.suggest_int("threads", 1, 2)
        b = t.suggest_categorical("batch_size", [128, 256, 512, 1024, 2048])
        t.suggest_categorical("ubatch_size", [32, 64, 128, 256, 512])
        t.suggest_categorical("flash_attn", ["on", "off", "auto"])
        t.suggest_categorical("cache_type_k", ["f16", "q8_0"])
        value = 150 * min(p, 16) ** 0.6 * th ** 0.5 * (1.05 if b >= 512 else 1.0) * rng.uniform(0.93, 1.07)
        t.set_user_attr("levels", [{"max_concurrency": 16, "output_tok_per_s": value, "output_tok_per_s_cv": 0.05}])
        return value

    study.optimize(objective, n_trials=n)
    return study


def timed(fn, *args, **kwargs) -> float:
    t = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - t


def plots_and_report() -> None:
    print("plots and report (seconds)")
    print(f"{'trials':>6} {'html':>6} {'html+imp':>9} {'png kaleido':>12} {'png mpl':>8} {'summarize':>10}")
    for n in (10, 30, 100):
        study = synthetic_study(n)
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            html = timed(plots.write_plots, study, folder / "a", importances=False)
            html_imp = timed(plots.write_plots, study, folder / "b", importances=True)
            r = plots.write_plots(study, folder / "c", importances=True, png=True)
            kaleido = r.seconds.get("png", float("nan")) if r.png_backend == "kaleido" else float("nan")
            figs = [p.stem for p in r.files if p.suffix == ".png"]
            mpl = timed(plots._matplotlib_pngs, study, figs, folder / "c")
            summ = timed(report.summarize, study, "output_tok_per_s")
        print(f"{n:>6} {html:>6.2f} {html_imp:>9.2f} {kaleido:>12.2f} {mpl:>8.2f} {summ:>10.2f}")


def sampler_overhead(model: Path, rounds: int) -> None:
    from autotuner.bench.runner import run_level
    from autotuner.bench.server_metrics import ServerMetricsSampler
    from autotuner.launchers._base import free_port
    from autotuner.workloads.synthetic import Workload

    binary = paths.llama_server_binary()
    if binary is None or not model.exists():
        print("sampler: needs llama-server and the model (scripts/setup.sh)")
        return
    port = free_port()
    proc = subprocess.Popen([str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-a", "m",
                             "--metrics", "-np", "16", "-c", "8192"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    workload = Workload(endpoint="completions", num_prompts=48, input_len=64, output_len=64, seed=0)

    async def one(sample: bool) -> tuple[float, float, int]:
        sampler = ServerMetricsSampler(base, get_engine("llamacpp").server_metrics)
        if sample:
            sampler.start()
        result, _ = await run_level(base, "m", workload, max_concurrency=16, timeout_s=120)
        await sampler.stop()
        return result.output_tok_per_s, sampler.poll_cpu_s, sampler.polls

    try:
        import httpx

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        asyncio.run(one(False))  # warm up
        with_s, without, cpu, polls = [], [], 0.0, 0
        for _ in range(rounds):
            tok, c, p = asyncio.run(one(True))
            with_s.append(tok)
            cpu, polls = cpu + c, polls + p
            without.append(asyncio.run(one(False))[0])
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print("sampler (llama-server, 48 requests at concurrency 16, 0.5 s interval)")
    print(
        f"  output tok/s median: with sampler {statistics.median(with_s):,.1f}, "
        f"without {statistics.median(without):,.1f}"
        f" ({statistics.median(with_s) / statistics.median(without) - 1:+.1%}); runs with: "
        f"{', '.join(f'{v:,.0f}' for v in with_s)}; without: {', '.join(f'{v:,.0f}' for v in without)}"
    )
    if polls:
        print(f"  {polls} polls, {cpu / polls * 1000:.2f} ms CPU per poll in the tuner's process")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=REPO / "models" / "quickstart.gguf")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--skip-sampler", action="store_true")
    args = ap.parse_args()
    plots_and_report()
    if not args.skip_sampler:
        sampler_overhead(args.model, args.rounds)


if __name__ == "__main__":
    main()
