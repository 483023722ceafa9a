"""The composition root: the one place that knows every part and wires a study together.

`make_driver` hands the study driver what records the study (the study's files, then MLflow) and who
proposes configs (the experiment's advisors); `make_tuner` first finds the engine, its binary or image,
the launcher and, on GPUs, checks the machine. `cli.py` parses the command line and calls these; tests
and benchmarks that run whole studies call `make_driver` as users' runs do.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from autotuner import report
from autotuner.advisors import Advisor
from autotuner.advisors.earlier_studies import EarlierStudies
from autotuner.advisors.engine_knowledge import EngineKnowledge
from autotuner.advisors.llm import LlmAdvisor
from autotuner.advisors.neighbours import Neighbours
from autotuner.advisors.performance_model import performance_model
from autotuner.config import ConfigError, Experiment
from autotuner.core import preflight, record
from autotuner.core.callbacks import StudyCallback
from autotuner.core.driver import AskUser, StudyDriver
from autotuner.core.executor import TrialExecutor
from autotuner.core.progress import Progress
from autotuner.core.study import confirmed_winner
from autotuner.engines._base import Engine
from autotuner.launchers import make_launcher
from autotuner.launchers._base import Launcher
from autotuner.node import host
from autotuner.node.pool import Leases, node_pool
from autotuner.tracking import MlflowStudyLog, MlflowTracker
from autotuner.tracking.artifacts import StudyArtifacts, settings
from autotuner.util.logfile import route_library_logs

if TYPE_CHECKING:
    from autotuner.launchers.docker import DockerLauncher

Say = Callable[[str], None]  # one line for the user (the terminal's stderr)
# The GPU preflight on every node of a Ray cluster at once; a node whose GPUs another job holds waits this long.
GPU_CHECK_TIMEOUT_S = 1800.0
KERNEL_STAGE_TIMEOUT_S = 12 * 3600.0  # every MoE shard's tuning on one node, one job at a time


def make_driver(experiment: Experiment, *, engine: Engine, launcher: Launcher, tracker: MlflowTracker,
                results_dir: Path = Path("results"), binary: str | None = None,
                progress: Callable[[int | None], Progress] | None = None, engine_version: str | None = None,
                pool: Leases | None = None, advice: str = "auto", ask: AskUser | None = None,
                executor: Callable[..., TrialExecutor] = TrialExecutor) -> StudyDriver:
    """A study driver recording into `tracker` and the study's folder, advised as `advice` says (auto:
    the experiment's advisors; ask: the same, each proposal put to `ask`; off: none)."""
    metric = experiment.config.objective.metric
    make_progress = progress or (lambda total: Progress(total, metric))

    def progress_with_warnings(total: int | None) -> Progress:
        shown = make_progress(total)
        tracker.warn = shown.note  # a tracking outage is said on the study's own progress lines
        return shown

    return StudyDriver(experiment, engine=engine, launcher=launcher, results_dir=results_dir, binary=binary,
                       progress=progress_with_warnings, engine_version=engine_version, pool=pool,
                       ask=ask if advice == "ask" else None,
                       callbacks=lambda driver: recorders(driver, tracker),
                       advisors=None if advice == "off" else advisors, executor=executor)


def recorders(driver: StudyDriver, tracker: MlflowTracker) -> list[StudyCallback]:
    """The study's files, then its MLflow parent run (in that order: at the end the files are written
    before MLflow copies them and closes)."""
    cfg = driver.cfg
    environment = {"engine": driver.engine.name, "engine_version": driver.engine_version,
                   "launcher": cfg.launcher, "host": driver.host}
    tags = {"autotuner.engine": driver.engine.name, "autotuner.engine_version": driver.engine_version,
            "autotuner.launcher": cfg.launcher, "autotuner.host": platform.node(),
            "autotuner.cpu": platform.processor() or platform.machine(), **host.tags(driver.host)}
    params = {"experiment": str(driver.exp.source), "engine": cfg.engine, "model": str(driver.exp.model_path),
              "search_space": json.dumps(driver.exp.space.model_dump(mode="json", exclude_defaults=True)),
              "objective": cfg.objective.describe(), "sampler": cfg.study.sampler, "pruner": cfg.study.pruner,
              "storage": cfg.study.storage, "load": cfg.load.describe(),
              "workload": json.dumps(cfg.workload.model_dump(mode="json"))}
    return [
        StudyArtifacts(driver.study, driver.exp, driver.engine, tracker, driver.workdir, binary=driver.binary,
                       engine_version=driver.engine_version, environment=environment, redactor=driver.redact),
        MlflowStudyLog(tracker, study_name=cfg.study_name, tags=tags,
                       params={k: driver.redact.text(str(v)) for k, v in params.items()}, workdir=driver.workdir,
                       metric=cfg.objective.metric, direction=cfg.objective.direction),
    ]


def advisors(driver: StudyDriver) -> list[Advisor]:
    """The experiment's advisors (`advisors:`), in its order."""
    made: list[Advisor] = []
    for entry in driver.cfg.advisors:
        if entry == "engine":
            made.append(EngineKnowledge(driver.engine))
        elif entry == "earlier-studies":
            made.append(EarlierStudies(driver.cfg.study.storage, driver.cfg.study_name, driver.engine.name,
                                       driver.host, settings(driver.exp), confirmed_winner))
        elif entry == "neighbours":
            made.append(Neighbours())
        elif entry == "performance-model":
            made.append(performance_model(driver.exp, driver.engine, driver.engine_version,
                                          driver.host.get("gpu_names")))
        else:
            made.append(LlmAdvisor(entry.llm, driver.engine.name, driver.engine.describe,
                                   status=lambda: status(driver)))
    return made


def status(driver: StudyDriver) -> dict[str, Any]:
    """The status report's conclusions so far (report.json), for an advisor that reads them."""
    summary = report.summarize(driver.study, driver.cfg.objective.metric, top_k=10, importances=False)
    return report.to_json(summary)


# --- a tuner for `autotuner run` ------------------------------------------------------------------------

def make_tuner(exp: Experiment, tracking_uri: str | None, results: Path, *, say: Say, pool: Leases | None = None,
               worker: str | None = None, advice: str = "auto", ask: AskUser | None = None,
               quiet: bool = True) -> StudyDriver:
    """The driver `autotuner run` runs: the engine checked, its binary found (or its image's version read),
    the GPUs checked before the first trial, kernels tuned once. Raises ConfigError (exit 2) before it
    creates any folder or file when an input is wrong. `quiet`: the libraries' logs go to the study's
    autotuner.log, not the terminal."""
    cfg = exp.config
    engine = preflight.check(exp)
    if tracking_uri:
        preflight.check_tracking(tracking_uri, "--tracking-uri")
    else:
        preflight.check_tracking(cfg.tracking.uri, f"{exp.source}: field 'tracking.uri'")
    binary = None
    if cfg.launcher == "process":  # in a container the engine is the image's
        binary, hint = engine.find_binary()
        if binary is None:
            raise ConfigError(hint)
    if quiet:  # the inputs are good: from here on the study's folder may be written
        route_library_logs(results / cfg.study_name)
    launcher = make_launcher(exp, progress=say)
    executor: Callable[..., TrialExecutor] = TrialExecutor
    if cfg.executor == "ray":
        from autotuner.executors import ray as on_ray

        cluster = on_ray.connect(cfg.ray.address)
        if worker is None:
            say(f"Ray cluster: {len(cluster)} node(s): " + "; ".join(n.describe() for n in cluster))
        executor = on_ray.RayTrialExecutor
    elif cfg.hardware.gpus > 0 and worker is None:  # --parallel workers: their parent checked already
        gpu_preflight(exp, launcher, str(binary) if binary else None, pool, say)
    if cfg.kernels is not None and cfg.executor != "ray":  # after the preflight, once; workers find it done
        # (on a Ray cluster each GPU node tunes for its own GPU: check_cluster)
        from autotuner.stages import kernel_stage

        exp, _ = kernel_stage.prepare(exp, engine, say, gpus=preflight_gpus(exp, pool), run_jobs=worker is None)
        launcher = make_launcher(exp, progress=say)  # with the tuned kernels
    engine_version = None
    if cfg.launcher == "docker":  # the engine that runs is the image's, not a host binary
        engine_version = cast("DockerLauncher", launcher).engine_version(engine, {"autotuner.study": cfg.study_name})
    driver = make_driver(exp, engine=engine, launcher=launcher, tracker=MlflowTracker(tracking_uri or cfg.tracking.uri),
                         results_dir=results, binary=str(binary) if binary else None, engine_version=engine_version,
                         pool=None if cfg.executor == "ray" else pool, advice=advice, ask=ask, executor=executor,
                         progress=lambda total: Progress(total, cfg.objective.metric, worker=worker))
    if cfg.executor == "ray":
        def remember(node: str) -> None:  # the report names the node the confirmation ran on
            driver.study.set_user_attr(record.CONFIRMATION_NODE, node)

        cast("on_ray.RayTrialExecutor", driver.executor).on_pin = remember
        if worker is None:
            check_cluster(driver, say)
    return driver


def check_cluster(driver: StudyDriver, say: Say) -> None:
    """Before the first trial on a Ray cluster: every node reaches the study, the model and the engine, and
    some node holds the defaults' launch (ConfigError, exit 2, naming each node's problem)."""
    from autotuner.executors import placement, ray_nodes
    from autotuner.executors import ray as on_ray

    executor = cast("on_ray.RayTrialExecutor", driver.executor)
    want = executor.need_of({})
    if why := placement.unplaceable(want, executor.nodes, executor.spread_refused):
        raise ConfigError(f"{driver.exp.source}: the Ray cluster cannot run the engine's defaults: {why}")
    if problems := ray_nodes.check_nodes(driver.exp, driver.binary):
        raise ConfigError("the Ray cluster cannot run this study's trials:\n  " + "\n  ".join(problems))
    if driver.cfg.hardware.gpus > 0:
        check_cluster_gpus(driver, say)
    if driver.cfg.kernels is not None:
        tune_cluster_kernels(driver, say)
    say(f"every node reaches the study's storage, the model and the engine; a launch of the defaults needs "
        f"{want.describe()}")


def check_cluster_gpus(driver: StudyDriver, say: Say) -> None:
    """The GPU preflight on each node that declares GPUs, side by side, each holding all of its node's GPUs:
    a node whose GPUs fail (a driver, CUDA or fabric fault) stops the study here, named with the fix."""
    from autotuner.executors import ray as on_ray
    from autotuner.executors import ray_nodes
    from autotuner.node.gpu_preflight import failure_text
    from autotuner.stages import gpu_check

    exp = on_ray.on_cluster(driver.exp)
    say(f"GPU preflight on each node with GPUs ({gpu_check.where(exp).replace('this host', 'the node')}) ...")
    failures = []
    for run in ray_nodes.on_each_node(gpu_check.on_node, exp, driver.binary, with_gpus=True,
                                   timeout_s=GPU_CHECK_TIMEOUT_S):
        at = f"node {run.node.describe()}"
        if run.timed_out:  # its GPUs held by another job, or its image still pulling: not a fault of its own
            say(f"  {at}: the GPU preflight did not end in {GPU_CHECK_TIMEOUT_S:g} s (its GPUs held by another "
                "job, or the engine's image still being pulled there): that node's GPUs are not checked")
            continue
        if run.error is not None:
            failures.append(f"{at}: the GPU preflight did not run: {run.error}")
            continue
        where, verdict = run.value
        if verdict.problems:
            failures.append(failure_text(verdict, f"{at}, {where}"))
            continue
        for fact in verdict.facts:
            say(f"  {at}: {fact}")
    if failures:
        raise ConfigError("\n".join(failures))


def tune_cluster_kernels(driver: StudyDriver, say: Say) -> None:
    """The kernel stage on each node that declares GPUs, side by side, each for its own GPU into its own
    kernel cache (a shared cache: each job tuned once); a node's trials read the cache of their node."""
    from autotuner.executors import ray as on_ray
    from autotuner.executors import ray_nodes
    from autotuner.stages import kernel_stage

    executor = cast("on_ray.RayTrialExecutor", driver.executor)
    timeout_s = KERNEL_STAGE_TIMEOUT_S
    say(f"kernels: the kernel stage on each node with GPUs, side by side (at most {timeout_s / 3600:g} h) ...")
    runs = ray_nodes.on_each_node(kernel_stage.on_node, on_ray.on_cluster(driver.exp), with_gpus=True,
                               timeout_s=timeout_s, on_line=lambda node, line: say(f"  node {node.describe()}: {line}"))
    for run in runs:
        if run.error is not None:
            say(f"  node {run.node.describe()}: kernels: the stage did not end ({run.error}): this node's trials "
                "read what it had tuned by then, else the engine's default configs")
            continue
        _, executor.kernel_keys[run.node.id] = run.value


def ray_workers(driver: StudyDriver, trials: int, parallel: int = 1) -> tuple[int, str]:
    """How many trials a Ray study keeps in flight (executors/placement.py: trials_in_flight), and why;
    `parallel` (--parallel) above 1 decides, and why says what the cluster alone would have run."""
    at_once, why = _ray_at_once(driver, trials)
    if parallel > 1 and parallel != at_once:
        return parallel, f", as --parallel says (it would run {at_once}{why})"
    return (parallel if parallel > 1 else at_once), why


def _ray_at_once(driver: StudyDriver, trials: int) -> tuple[int, str]:
    from autotuner.executors import placement
    from autotuner.executors import ray as on_ray

    executor = cast("on_ray.RayTrialExecutor", driver.executor)
    told = driver.cfg.ray.trials_at_once
    widest = max((n.gpus for n in executor.nodes), default=0)
    if executor.spread_refused is None and driver.cfg.hardware.gpus > widest and not told:
        # A spread launch's engine waits for its GPUs to be free all at once: trials beside it would hold some.
        return 1, (f": configs may spread over nodes (hardware.gpus {driver.cfg.hardware.gpus}, nodes of at most "
                   f"{widest:g} GPU(s)), and a spread launch needs its GPUs free (ray.trials_at_once sets it)")
    return placement.trials_in_flight(executor.need_of({}), executor.nodes, trials, told), ""


def worker_pool(exp: Experiment, parallel: int, gpus: str | None) -> Leases | None:
    """The units (GPUs or CPU sets) that `parallel` workers share, packed by the GPUs' topology."""
    from autotuner.node.host import gpu_topology
    from autotuner.node.pool import with_topology

    pool = node_pool(exp.config, parallel, gpus)
    return Leases(with_topology(pool, gpu_topology() if pool.kind == "gpu" else None)) if pool else None


def preflight_gpus(exp: Experiment, pool: Leases | None) -> list[int]:
    return list(pool.pool.units) if pool is not None else list(range(exp.config.hardware.gpus))


def gpu_preflight(exp: Experiment, launcher: Launcher, binary: str | None, pool: Leases | None,
                  say: Say) -> None:
    """Before the first trial: CUDA, P2P and NUMA in the image (or on the host); a fault stops here (exit 2)."""
    from autotuner.stages import gpu_check

    gpu_check.before_first_trial(exp, launcher, binary, preflight_gpus(exp, pool), say)
