"""The kernel stage through the Docker launcher, on a real dockerd: each tuning job runs in a container of
the experiment's image with the kernel cache mounted writable, in the job's folder, through the same
`sh -c` line a GPU machine runs (Ray installed only where missing; SGLang's file moved under the image's
Triton version); the trials then get the cache read-only and the variable that points at their shard.

No GPU and no engine image here: the image is this machine's Python (with `sh`, `mkdir` and `mv`), built
locally, and the tuners are stand-ins given by `kernels.script`, which write what the real ones write
(one `E=..,N=..,device_name=..json` per job) where the real ones write it. Ray and Triton are stand-in
modules on PYTHONPATH, so nothing is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from autotuner.config import DockerConfig, KernelsConfig, load_experiment
from autotuner.core.launch import planned
from autotuner.engines._base import get_engine
from autotuner.stages import kernel_stage, kernels

pytestmark = [pytest.mark.docker]

REPO = Path(__file__).resolve().parents[2]
IMAGE = f"autotuner/kernel-stage-python:{sys.version_info.major}.{sys.version_info.minor}"

STAND_IN_VLLM = """\
import argparse, json, os
p = argparse.ArgumentParser()
p.add_argument("--model"); p.add_argument("--tp-size", type=int); p.add_argument("--dtype")
p.add_argument("--enable-expert-parallel", action="store_true"); p.add_argument("--save-dir")
p.add_argument("--batch-size", type=int, nargs="+"); p.add_argument("--tune", action="store_true")
a = p.parse_args()
import ray  # as benchmark_moe.py does, at the top in the real one
E = 256 // a.tp_size if a.enable_expert_parallel else 256
with open(os.path.join(a.save_dir, f"E={E},N=1536,device_name=G.json"), "w") as f:
    json.dump({str(b): {"BLOCK_SIZE_M": 16} for b in a.batch_size or [1]}, f)
"""
STAND_IN_SGLANG = """\
import argparse, json
p = argparse.ArgumentParser()
p.add_argument("--model"); p.add_argument("--tp-size", type=int); p.add_argument("--ep-size", type=int)
p.add_argument("--dtype"); p.add_argument("--batch-sizes", type=int, nargs="+"); p.add_argument("--tune", action="store_true")
a = p.parse_args()
with open(f"E={256 // a.ep_size},N=1536,device_name=G.json", "w") as f:  # its working folder, as the real one
    json.dump({"1": {"BLOCK_SIZE_M": 16}}, f)
"""


@pytest.fixture(scope="module")
def python_image(docker_client) -> str:
    """This machine's Python, its standard library and the shared libraries they load, with sh, mkdir and
    mv: an image made with `docker import` (no registry), skipped when it exists."""
    try:
        docker_client.images.get(IMAGE)
        return IMAGE
    except Exception:  # docker.errors.ImageNotFound
        pass
    exe = Path(os.path.realpath(sys.executable))
    stdlib = Path(sys.base_prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    binaries = [exe, *(Path(shutil.which(t) or "") for t in ("sh", "mkdir", "mv"))]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copytree(stdlib, root / stdlib.relative_to("/"), symlinks=True,
                        ignore=shutil.ignore_patterns("site-packages", "test", "idlelib", "tkinter", "__pycache__"))
        libs: set[str] = set()
        for binary in [*binaries, *(stdlib / "lib-dynload").glob("*.so")]:
            out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
            for line in out.splitlines():
                parts = line.split()
                libs.update(p for p in parts if p.startswith("/") and "(" not in p)
        for path in [*map(str, binaries), *libs]:
            target = root / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(os.path.realpath(path), target)
        (root / "usr/local/bin").mkdir(parents=True, exist_ok=True)
        (root / "usr/local/bin/python3").symlink_to(exe)
        (root / "tmp").mkdir(mode=0o1777, exist_ok=True)
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(["docker", "import", "-c", "ENV PATH=/usr/local/bin:/usr/bin:/bin", "-", IMAGE],
                       stdin=tar.stdout, check=True, capture_output=True)
        tar.wait()
    return IMAGE


def experiment(tmp_path: Path, name: str, image: str):
    """The shipped GLM-5 experiment (vLLM or SGLang) in `image`, tuning into tmp_path/kc with a stand-in
    tuner kept in the cache (mounted in the job's container) and stand-in modules beside it."""
    cache = tmp_path / "kc"
    (cache / "site" / "ray").mkdir(parents=True)
    (cache / "site" / "ray" / "__init__.py").write_text("")
    (cache / "site" / "triton").mkdir()
    (cache / "site" / "triton" / "__init__.py").write_text('__version__ = "3.5.1"\n')
    script = "vllm.py" if "sglang" not in name else "sglang.py"
    (cache / script).write_text(STAND_IN_VLLM if script == "vllm.py" else STAND_IN_SGLANG)
    model = tmp_path / "GLM-5"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["GlmMoeDsaForCausalLM"], "n_routed_experts": 256, '
                                       '"num_attention_heads": 64, "num_key_value_heads": 64, "num_hidden_layers": 78}')
    exp = load_experiment(REPO / "experiments" / name)
    config = exp.config.model_copy(update={
        "docker": DockerConfig(image=image), "env": {"PYTHONPATH": f"{kernels.KERNELS_MOUNT}/site"},
        "kernels": KernelsConfig(gpu="G", engine_version="1.0", cache_dir=cache, batch_sizes=[1, 64],
                                 script=f"{kernels.KERNELS_MOUNT}/{script}")})
    return exp.model_copy(update={"config": config, "model_path": model})


@pytest.mark.parametrize("name, first_file", [
    ("glm5-nvfp4-8x-rtx-pro-6000.yaml", "E=256,N=1536,device_name=G.json"),
    ("glm5-nvfp4-8x-rtx-pro-6000-sglang.yaml", "configs/triton_3_5_1/E=256,N=1536,device_name=G.json"),
])
def test_each_job_runs_once_in_a_container_and_the_trials_read_its_results(docker_client, python_image, tmp_path,
                                                                         monkeypatch, name, first_file):
    monkeypatch.setattr(kernel_stage, "POLL_S", 0.2)  # a real tuner runs for minutes: 5 s between looks
    exp = experiment(tmp_path, name, python_image)
    engine = get_engine(exp.config.engine)
    lines: list[str] = []
    before = {c.id for c in docker_client.containers.list(all=True)}
    trial_exp, result = kernel_stage.prepare(exp, engine, lines.append, gpus=[])
    assert not result.failed, lines
    assert result.tuned and not result.cached
    first = sorted(result.tuned, key=lambda j: (j.moe_ranks, j.ep_size))[0]
    folder = tmp_path / "kc" / str(first.key)
    assert kernels.tuned_files(folder) == [first_file]  # written by the container, into the host's cache
    assert (folder / kernels.DONE_FILE).is_file() and (folder / "tuner.log").is_file()
    assert {c.id for c in docker_client.containers.list(all=True)} == before  # every job's container gone

    # The trials: the cache read-only, and the variable of their shard pointing at its folder in the mount.
    params = {"parallel_layout": "TP8"} if engine.name == "vllm" else {"tp_size": 8}
    line = planned(trial_exp, engine, params, port=8000, binary=None).command
    assert f"{tmp_path / 'kc'}:{kernels.KERNELS_MOUNT}:ro" in line
    job = kernels.job_for(trial_exp, engine, params)
    assert job is not None and f"{kernels.TUNERS[engine.name].config_env}={kernels.KERNELS_MOUNT}/{job.key}" in line

    again = kernel_stage.run(kernels.with_cache_mount(trial_exp, writable=True), engine,
                             _launcher(trial_exp), lines.append)
    assert not again.tuned and len(again.cached) == len(result.tuned)  # tuned once: a rerun starts nothing


def _launcher(exp):
    from autotuner.launchers import make_launcher

    return make_launcher(kernels.with_cache_mount(exp, writable=True))
