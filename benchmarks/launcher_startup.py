"""What a container costs per trial: start-to-ready and stop of the same llama-server as a local process
and as a Docker container (the locally built image, the model bind-mounted); launches alternate between
the two so that both see the same background load; median (min-max) of N launches each.

`start()` returned is the launcher's own cost (spawn; for a container: create, start, read the published
port); ready is `start()` until /health answers 200 (what the tuner records as `time_ready_s`); stop is
`stop()` until the server is gone (for a container: stopped and removed, log stream closed).

    eval "$(scripts/start-dockerd.sh)"; scripts/build-engine-image.sh
    .venv/bin/python benchmarks/launcher_startup.py [--repeats 5] [--model models/quickstart.gguf]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from autotuner.config import DockerConfig
from autotuner.engines._base import LaunchContext
from autotuner.engines.llamacpp import LlamaCppEngine
from autotuner.launchers._base import free_port
from autotuner.launchers.docker import DockerLauncher
from autotuner.launchers.process import ProcessLauncher
from autotuner.util import paths

REPO = Path(__file__).resolve().parent.parent


def launch_once(launcher, binary: str | None, model: Path, log: Path) -> tuple[float, float, float]:
    """(start() returned, ready, stop) in seconds for one launch of llama-server with `launcher`."""
    host = LaunchContext(model_path=model, served_model_name="m", port=free_port(), binary=binary)
    spec = LlamaCppEngine().build({"threads": 2}, launcher.context(host))
    t = time.perf_counter()
    handle = launcher.start(spec, log, {"autotuner.study": "launcher-startup-benchmark"})
    started = time.perf_counter() - t
    try:
        launcher.wait_ready(handle, 120)
        ready = time.perf_counter() - t
    finally:
        t = time.perf_counter()
        launcher.stop(handle)
    return started, ready, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--model", type=Path, default=REPO / "models" / "quickstart.gguf")
    ap.add_argument("--image", default=f"autotuner/llama-server:{paths.LLAMA_CPP_PYTHON_VERSION}")
    args = ap.parse_args()
    binary = paths.llama_server_binary()
    if binary is None or not args.model.exists():
        raise SystemExit("needs llama-server and the model: run scripts/setup.sh first")
    model = args.model.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        docker = DockerLauncher(DockerConfig(image=args.image), model_path=model)
        docker.prepare()
        launchers = {"process": (ProcessLauncher(Path(tmp) / "state"), str(binary)), "docker": (docker, None)}
        rows: dict[str, list[tuple[float, float, float]]] = {name: [] for name in launchers}
        for i in range(args.repeats):  # alternated, so that both see the same background load
            for name, (launcher, bin_) in launchers.items():
                rows[name].append(launch_once(launcher, bin_, model, Path(tmp) / f"{name}-{i}.log"))
    print(f"model {model.name}, {args.repeats} launches each, median (min-max) in ms")
    for name, launches in rows.items():
        columns = list(zip(*launches, strict=False))
        cells = (f"   {label} {statistics.median(v) * 1e3:5.0f} ({min(v) * 1e3:.0f}-{max(v) * 1e3:.0f})"
                 for label, v in zip(("start() returned", "ready", "stop"), columns, strict=False))
        print(f"  {name:8s}" + "".join(cells))


if __name__ == "__main__":
    main()
