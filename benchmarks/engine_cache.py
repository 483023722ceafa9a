"""Start-to-ready of vLLM's CPU build with torch.compile on: the first launch of a config (an empty engine
cache) against the second (the cache the first one filled), through the trial executor users run.

Each repeat gets a fresh study (and so an empty engine cache), then launches the same config twice in a row
(first: cold, second: warm); a third launch with `engine_cache: false` is what every launch cost before
(it still finds whatever vLLM keeps in the user's home, so it is pointed at an empty HOME of its own).
The experiment is experiments/vllm-cpu.yaml without `--enforce-eager` (its default keeps torch.compile
off because a cold compile cost 30-80 s per trial here). Prints each launch and the medians with ranges.

    .venv/bin/python benchmarks/engine_cache.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rich.console import Console  # noqa: E402  # after the path insert above

from autotuner.compose import make_driver  # noqa: E402
from autotuner.config import load_experiment  # noqa: E402
from autotuner.core.driver import StudyDriver  # noqa: E402
from autotuner.core.progress import Progress  # noqa: E402
from autotuner.engines._base import get_engine  # noqa: E402
from autotuner.launchers.process import ProcessLauncher  # noqa: E402
from autotuner.tracking import MlflowTracker  # noqa: E402
from autotuner.util import paths  # noqa: E402

VLLM_PYTHON = paths.vllm_python()  # found before the runs point HOME elsewhere


def driver_for(folder: Path, engine_cache: bool) -> StudyDriver:
    text = (REPO / "experiments" / "vllm-cpu.yaml").read_text()
    text = (text.replace("../models/llama-38m", str(REPO / "models" / "llama-38m"))
            .replace("../search_spaces/vllm-cpu.yaml", str(REPO / "search_spaces" / "vllm-cpu.yaml"))
            .replace("sqlite:///autotuner.db", f"sqlite:///{folder}/study.db")
            .replace('engine_args: ["--enforce-eager", ', "engine_args: ["))
    text = text.replace("startup_timeout_s: 180", "startup_timeout_s: 900")  # a cold compile on a busy box
    (folder / "exp.yaml").write_text(text + f"engine_cache: {str(engine_cache).lower()}\nquality: off\n")
    return make_driver(load_experiment(folder / "exp.yaml"), engine=get_engine("vllm"),
                       launcher=ProcessLauncher(folder / "procs"), tracker=MlflowTracker(root=folder / "mlruns"),
                       results_dir=folder / "results", binary=str(VLLM_PYTHON),
                       progress=lambda total: Progress(total, "output_tok_per_s", Console(file=io.StringIO())))


def ready_s(driver: StudyDriver, folder: Path, label: str) -> float:
    """One launch of the engine's defaults, started, answered ready, stopped: its start-to-ready seconds."""
    timings: dict[str, float] = {}
    result = driver.executor.run({}, trial=None, trial_dir=folder / label, progress=driver._progress_factory(1),
                                 timings=timings, label=label, measure_levels=False)
    if result.state != "COMPLETE":
        raise SystemExit(f"{label}: {result.failure_class}: {result.reason}")
    return timings["ready_s"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if VLLM_PYTHON is None:
        raise SystemExit("vLLM's CPU build is not installed: run scripts/setup-vllm.sh")
    cold, warm, off = [], [], []
    with tempfile.TemporaryDirectory(prefix="engine-cache-") as tmp:
        for r in range(args.repeats):
            folder = Path(tmp) / f"r{r}"
            folder.mkdir()
            os.environ["HOME"] = str(folder / "home")  # nothing vLLM kept in a home folder (the study's cache: fresh)
            driver = driver_for(folder, engine_cache=True)
            cold.append(ready_s(driver, folder, "cold"))
            warm.append(ready_s(driver, folder, "warm"))
            os.environ["HOME"] = str(folder / "home-off")
            (folder / "off").mkdir()
            off.append(ready_s(driver_for(folder / "off", engine_cache=False), folder / "off", "off"))
            cached = sum(1 for f in (folder / "results").rglob("engine-cache/**/*") if f.is_file())
            print(f"repeat {r + 1}: first launch {cold[-1]:.1f} s, second {warm[-1]:.1f} s, "
                  f"without the cache {off[-1]:.1f} s ({cached} cached files)", flush=True)

    def show(name: str, xs: list[float]) -> str:
        return f"{name} {statistics.median(xs):.1f} s [{min(xs):.1f}, {max(xs):.1f}]"

    print(", ".join([show("first launch", cold), show("second launch", warm), show("cache off", off)]))
    print(f"second / first: {statistics.median(warm) / statistics.median(cold):.2f} (median of each)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
