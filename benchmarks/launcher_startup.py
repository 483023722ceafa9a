"""What a container costs per trial: start-to-ready and stop of the same llama-server as a local process
and as a Docker container (the locally built image, the model bind-mounted), median of N launches.

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

from autotuner import paths
from autotuner.config import DockerConfig
from autotuner.engines._base import LaunchContext
from autotuner.engines.llamacpp import LlamaCppEngine
from autotuner.launchers._base import free_port
from autotuner.launchers.docker import DockerLauncher
from autotuner.launchers.process import ProcessLauncher

REPO = Path(__file__).resolve().parent.parent


def measure(launcher, binary: str | None, model: Path, repeats: int, tmp: Path) -> tuple[list[float], ...]:
    engine = LlamaCppEngine()
    started, ready, stop = [], [], []
    for i in range(repeats):
        host = LaunchContext(model_path=model, served_model_name="m", port=free_port(), binary=binary)
        spec = engine.build({"threads": 2}, launcher.context(host))
        t = time.perf_counter()
        handle = launcher.start(spec, tmp / f"{i}.log", {"autotuner.study": "launcher-startup-benchmark"})
        started.append(time.perf_counter() - t)
        try:
            launcher.wait_ready(handle, 120)
            ready.append(time.perf_counter() - t)
        finally:
            t = time.perf_counter()
            launcher.stop(handle)
            stop.append(time.perf_counter() - t)
    return started, ready, stop


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
        rows = {"process": measure(ProcessLauncher(Path(tmp) / "state"), str(binary), model, args.repeats, Path(tmp)),
                "docker": measure(docker, None, model, args.repeats, Path(tmp))}
    print(f"model {model.name}, {args.repeats} launches each, median (min-max) in ms")
    for name, columns in rows.items():
        print(f"  {name:8s}" + "".join(f"   {label} {statistics.median(v) * 1e3:5.0f} ({min(v) * 1e3:.0f}-{max(v) * 1e3:.0f})"
                                       for label, v in zip(("start() returned", "ready", "stop"), columns)))


if __name__ == "__main__":
    main()
