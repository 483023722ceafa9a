"""The kernel stage, run: each tuning job of `kernels.plan` once, inside the engine's image (or as a
process), through the same launcher the trials use; then every trial of that MoE shard reads the results.

Idempotent and resumable: a job's folder gets `done.json` only once its tuner wrote configs, and a job
with one is never run again (another study, a rerun after Ctrl-C). A job that fails or times out is
said, with its log's last lines, and the study goes on with the engine's default configs (the trials'
`autotuner.moe_config` tag shows which they loaded). Never runs the real tuner in a dry run: `describe`
prints the commands only.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from autotuner.config import Experiment, KernelsConfig
from autotuner.engines._base import Engine
from autotuner.launchers._base import Launcher, env_words, gpu_env, launch_context, tail
from autotuner.launchers.docker_command import container_context, container_gpus, docker_run_argv, mounts
from autotuner.stages import kernels
from autotuner.util.files import write_atomically
from autotuner.util.locks import file_lock, file_lock_if_free

POLL_S = 5.0
LOCK_FILE = "tuning.lock"
LOG_LINES = 20


@dataclass
class StageResult:
    tuned: list[kernels.TuningJob] = field(default_factory=list)
    cached: list[kernels.TuningJob] = field(default_factory=list)
    failed: list[tuple[kernels.TuningJob, str]] = field(default_factory=list)


def prepare(exp: Experiment, engine: Engine, echo: Callable[[str], None], *, gpus: Sequence[int],
            run_jobs: bool = True) -> tuple[Experiment, StageResult]:
    """Before a study: resolve the cache key, run the jobs on `gpus` (the study's) unless `run_jobs` is
    False (a --parallel worker, whose parent ran them), and return the experiment its trials run (the key
    filled in; in a container the kernel cache mounted read-only)."""
    from autotuner.launchers import make_launcher

    exp = resolve(exp, engine_version=probe_version(exp, engine), gpu=gpus[0] if gpus else 0)
    kernels.cache_root(exp).mkdir(parents=True, exist_ok=True)  # a docker volume's host folder must exist
    result = StageResult()
    if run_jobs:
        result = run(exp, engine, make_launcher(kernels.with_cache_mount(exp, writable=True), progress=echo), echo,
                     gpus=gpus)
    return kernels.with_cache_mount(exp), result


NodeKey = tuple[str, str | None]  # a node's kernel cache key: its GPU's name and the engine version
KEY_TAGS = ("autotuner.kernel_gpu", "autotuner.kernel_engine_version")  # the key a launch read, as its tags


def on_node(exp: Experiment, gpus: list[int], say: Callable[[str], None] | None = None) -> tuple[list[str], NodeKey]:
    """A Ray node's stage (run there as a task holding all its `gpus`): the jobs tuned for this node's GPU
    into this node's kernel cache (a cache shared by nodes: each job once, the others reuse it); the lines
    it said (to `say` too, as it says them), and the key it tuned under (the node's trials read the cache
    by it)."""
    from autotuner.engines._base import get_engine

    lines: list[str] = []

    def keep(line: str) -> None:
        lines.append(line)
        if say is not None:
            say(line)

    resolved, _ = prepare(exp, get_engine(exp.config.engine, exp.space.env_params), keep, gpus=gpus)
    k = resolved.config.kernels or KernelsConfig()
    return lines, (k.gpu or "unknown-gpu", k.engine_version)


def for_node(exp: Experiment, engine: Engine, gpus: Sequence[int], key: NodeKey | None) -> Experiment:
    """A trial's experiment on a Ray node: the cache key the stage tuned under on this node (`key`; None:
    the node joined after the stage, so resolved here as the stage would), its kernel cache mounted."""
    if key is not None:
        return kernels.with_cache_mount(resolve(exp, engine_version=key[1], name=key[0]))
    return kernels.with_cache_mount(resolve(exp, engine_version=probe_version(exp, engine), gpu=gpus[0] if gpus else 0))


def key_tags(exp: Experiment) -> dict[str, str]:
    """A launch's kernel cache key as its launch tags (a Ray node's trials: the key of that node)."""
    version, gpu = kernels.cache_key(exp)
    return {KEY_TAGS[0]: gpu, KEY_TAGS[1]: version} if exp.config.kernels is not None else {}


def as_launched(exp: Experiment, tags: dict[str, str]) -> Experiment:
    """`exp` as a trial with these launch tags ran it: the kernel cache key its node tuned under (where the
    experiment leaves it unset) and the cache mounted, so the winner's command reads the kernels it read."""
    if exp.config.kernels is None or KEY_TAGS[0] not in tags:
        return exp
    return kernels.with_cache_mount(resolve(exp, engine_version=tags.get(KEY_TAGS[1]), name=tags[KEY_TAGS[0]]))


def probe_version(exp: Experiment, engine: Engine) -> str | None:
    """The engine version the trials will run: the image tag's, else the engine's own answer (a short
    container of the image, or the local binary); None when it does not say."""
    k = exp.config.kernels
    if k is not None and k.engine_version:
        return k.engine_version
    if version := kernels.version_from_image(_image(exp)):
        return version
    if exp.config.launcher == "docker":
        from autotuner.launchers import make_launcher

        launcher = make_launcher(exp)
        return launcher.engine_version(engine, {"autotuner.study": exp.config.study_name})  # type: ignore[attr-defined]
    binary = engine.find_binary()[0]
    if binary is None:
        return None
    try:
        out = subprocess.run(engine.version_argv(binary), capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return engine.parse_version(out)


def resolve(exp: Experiment, *, engine_version: str | None = None, gpu: int = 0, name: str | None = None) -> Experiment:
    """`exp` with its kernel cache key filled in: the GPU as nvidia-smi names GPU `gpu` (or `name`) and
    `engine_version` (the image's or binary's, as the tuner probed it), where the kernels section leaves them
    unset."""
    k = exp.config.kernels or KernelsConfig()
    update = {"gpu": k.gpu or name or gpu_name(gpu) or "unknown-gpu",
              "engine_version": k.engine_version or engine_version}
    config = exp.config.model_copy(update={"kernels": k.model_copy(update=update)})
    return exp.model_copy(update={"config": config})


def gpu_name(index: int = 0) -> str | None:
    """The name nvidia-smi gives GPU `index` (the study's first); None without nvidia-smi or that GPU."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", str(index)],
                             capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip() if out else None


def describe(exp: Experiment, engine: Engine, echo: Callable[[str], None], gpus: Sequence[int] = ()) -> kernels.Plan:
    """The stage's plan as comment lines, then each job's command on `gpus` as the launcher would run it."""
    plan = kernels.plan(exp, engine)
    version, gpu = kernels.cache_key(exp)
    echo(f"# kernel stage: {len(plan.jobs)} fused-MoE tuning job(s) for {engine.name} {version} on {gpu}, "
         f"cached under {kernels.cache_root(exp)}")
    if not (exp.model_path / "config.json").is_file():
        echo(f"# no config.json at {exp.model_path}: the model's experts and quantization are unknown here; "
             "the jobs assume an unquantized MoE model")
    for line in plan.uncovered:
        echo(f"# not tuned: {line}")
    tuner = kernels.TUNERS.get(engine.name)
    variable = tuner.config_env if tuner else ""
    if plan.jobs and tuner:
        echo(f"# a trial's server reads its shard's file only where {tuner.used_when}")
    for job in plan.jobs:
        echo(f"# {job.key}: {job.describe()}; once tuned, its trials get {variable}={kernels.job_folder(exp, job)}")
        echo(planned_command(exp, engine, job, gpus))
    return plan


def planned_command(exp: Experiment, engine: Engine, job: kernels.TuningJob, gpus: Sequence[int] = ()) -> str:
    """A job's tuner as the stage would start it on `gpus`: `docker run` in the experiment's image, or the
    argv (the GPUs' variables in front)."""
    docker = exp.config.docker if exp.config.launcher == "docker" else None
    host = launch_context(exp, port=0, binary=None)
    if docker is None:
        spec = kernels.job_spec(exp, engine, job, host, python=_python(engine), gpus=gpus)
        return env_words(gpu_env(gpus)) + spec.command_line()
    writable = kernels.with_cache_mount(exp, writable=True).config.docker
    assert writable is not None  # a docker experiment keeps its section
    mounted = mounts(writable, exp.model_path, exp.source.parent)
    spec = kernels.job_spec(exp, engine, job, container_context(writable, mounted, host), python="python3", gpus=gpus)
    return shlex.join(docker_run_argv(writable, mounted, spec, gpus=container_gpus(spec, writable), host_port=None))


def run(exp: Experiment, engine: Engine, launcher: Launcher, echo: Callable[[str], None],
        gpus: Sequence[int] = ()) -> StageResult:
    """Run every job of the plan that has no results yet, one at a time on `gpus`, through `launcher` (for
    docker: one that mounts the kernel cache writable, `kernels.with_cache_mount(exp, writable=True)`)."""
    plan = _plan(exp, engine, echo)
    result = StageResult()
    # A cache shared by nodes (a Ray cluster's) or studies: a job another one tunes now is left for a second
    # pass, so each tunes a different job meanwhile; by then it is done and reused.
    held = [job for job in plan.jobs if not _job(exp, engine, launcher, echo, gpus, job, result, wait=False)]
    for job in held:
        _job(exp, engine, launcher, echo, gpus, job, result, wait=True)
    return result


def _job(exp: Experiment, engine: Engine, launcher: Launcher, echo: Callable[[str], None], gpus: Sequence[int],
         job: kernels.TuningJob, result: StageResult, *, wait: bool) -> bool:
    """Run one job unless it has results (reused); False when another tunes it now and `wait` is False."""
    folder = kernels.cache_root(exp) / str(job.key)
    if (folder / kernels.DONE_FILE).is_file():  # before any lock: a read-only cache of tuned jobs is reused
        result.cached.append(job)
        echo(f"kernels: {job.key}: tuned before, reused")
        return True
    try:
        with (file_lock(folder / LOCK_FILE) if wait else file_lock_if_free(folder / LOCK_FILE)) as free:
            if free is False:
                return False
            if (folder / kernels.DONE_FILE).is_file():  # tuned by another while this one waited
                result.cached.append(job)
                echo(f"kernels: {job.key}: tuned before, reused")
                return True
            _tune(exp, engine, launcher, echo, gpus, job, folder, result)
    except OSError as e:  # a cache folder this user cannot write: the lock, or the stale files
        stuck = f"cannot write {e.filename or folder} ({e.strerror}): remove it or make it writable"
        result.failed.append((job, stuck))
        echo(f"kernels: {job.key}: failed: {stuck}")
    return True


def _tune(exp: Experiment, engine: Engine, launcher: Launcher, echo: Callable[[str], None], gpus: Sequence[int],
          job: kernels.TuningJob, folder: Path, result: StageResult) -> None:
    try:
        for stale in kernels.tuned_files(folder):  # an unfinished earlier run's: not this run's results
            (folder / stale).unlink()
    except OSError as e:  # a container's root wrote it, say
        stuck = f"cannot remove {e.filename}, left by an unfinished earlier run ({e.strerror}): remove {folder}"
        result.failed.append((job, stuck))
        echo(f"kernels: {job.key}: failed: {stuck}")
        return
    ctx = launcher.context(launch_context(exp, port=0, binary=None))
    python = "python3" if exp.config.launcher == "docker" else _python(engine)
    spec = kernels.job_spec(exp, engine, job, ctx, python=python, gpus=gpus)
    echo(f"kernels: {job.key}: tuning ({job.describe()}); log {folder / 'tuner.log'}")
    why = _run_one(launcher, spec, folder, exp, job)
    if why:
        result.failed.append((job, why))
        echo(f"kernels: {job.key}: failed: {why}; its trials use the engine's default configs")
        return
    files = kernels.tuned_files(folder)
    write_atomically(folder / kernels.DONE_FILE, json.dumps(
        {"job": job.describe(), "command": spec.command_line(), "files": files}, indent=1) + "\n")
    result.tuned.append(job)
    echo(f"kernels: {job.key}: wrote {', '.join(files)}")


def _plan(exp: Experiment, engine: Engine, echo: Callable[[str], None]) -> kernels.Plan:
    plan = kernels.plan(exp, engine)
    for line in plan.uncovered:
        echo(f"kernels: not tuned: {line}")
    if plan.jobs:
        echo(f"kernels: a trial's server reads its shard's file only where {kernels.TUNERS[engine.name].used_when}; "
             "each trial's autotuner.moe_config tag says which it loaded")
    return plan


def _run_one(launcher: Launcher, spec, folder: Path, exp: Experiment, job: kernels.TuningJob) -> str | None:
    """Start one tuner, wait for it to end; why it failed, or None once it wrote configs."""
    k = exp.config.kernels or KernelsConfig()
    labels = {"autotuner.study": exp.config.study_name, "autotuner.trial": f"kernels-{kernels.slug(str(job.key))}"}
    log = folder / "tuner.log"
    handle = launcher.start(spec, log, labels)
    try:
        deadline = time.monotonic() + k.timeout_s
        while launcher.is_running(handle):
            if time.monotonic() > deadline:
                return f"still running after {k.timeout_s:g} s (kernels.timeout_s)"
            time.sleep(POLL_S)
    finally:
        launcher.stop(handle)
    if not kernels.tuned_files(folder):
        last = tail(log, LOG_LINES).strip().splitlines()
        return f"the tuner wrote no config ({last[-1] if last else 'no output'})"
    return None


def _image(exp: Experiment) -> str:
    return exp.config.docker.image if exp.config.launcher == "docker" and exp.config.docker else ""


def _python(engine: Engine) -> str:
    binary = engine.planned_binary() or ""
    return binary if binary.rsplit("/", 1)[-1].startswith("python") else "python3"
