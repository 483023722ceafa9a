"""Trials on a Ray cluster (`executor: ray`, or `autotuner run --ray ADDRESS`).

The study's driver stays where the command runs: it asks Optuna, tells it, tracks and confirms as it
does locally. Only the launch moves: `RayTrialExecutor.run` sends the whole trial (lease -> launch ->
wait ready -> quality -> levels -> stop) to one node as a Ray task that asks for the config's GPUs and
CPUs (`placement.py`), so the engine and its load generator run side by side on the node that holds
those GPUs. The task reports each level to the study itself (the storage every node reaches), so
Optuna prunes as it does locally; its progress lines come back through a queue; its files come back
with its result. A node lost mid-trial is the trial's failure (`node-lost`, measured once more
elsewhere); Ctrl-C cancels the task, whose engine is stopped with it (a killed task's engine dies with
its worker process: PR_SET_PDEATHSIG in launchers/process.py).

Ray is imported only here, and only when a study runs on a cluster (the extra `autotuner[ray]`).
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotuner.config import ConfigError, Experiment
from autotuner.core.executor import OnLevel, TrialExecutor, TrialResult
from autotuner.executors import placement
from autotuner.models.facts import host_footprint
from autotuner.util.extras import MissingExtra, require

if TYPE_CHECKING:
    import optuna

    from autotuner import quality
    from autotuner.core.progress import Progress

NAMESPACE = "autotuner"
POLL_S = 0.5  # how often the driver looks at the task and its progress lines
PENDING_CHECK_S = 30.0  # how often a task not started yet checks that a live node can still hold it
RAYLET_CONNECT_S = 3.0  # a TCP handshake with a node's raylet: the kernel's answer, not the raylet's
PENDING_POLL_S = 2.0  # how often a spread launch looks for its GPUs to be free
MAX_FILE_BYTES = 32 << 20  # a trial's file larger than this comes back cut to its end
NODE_LOST = "node-lost"
NODE_TAG, ADDRESS_TAG = "autotuner.ray_node", "autotuner.ray_node_address"  # where a launch ran (its MLflow run)
NODE_ID_LABEL = "ray.io/node-id"  # the label Ray gives every node: its id (label selectors match it)
# What a node's task returns: the launch's result, its files by name, where it ran, its phases' seconds.
NodeOutcome = tuple[TrialResult, dict[str, bytes], placement.Node, dict[str, float]]


def connect(address: str | None) -> list[placement.Node]:
    """Join the cluster at `address` (None: RAY_ADDRESS, else a cluster started on this machine) as a
    driver; its live nodes. A cluster that does not answer is a ConfigError (exit 2)."""
    try:
        ray = require("ray", "ray", "executor: ray")
    except MissingExtra as e:
        raise ConfigError(str(e)) from None
    if not ray.is_initialized():
        try:
            ray.init(address=address or os.environ.get("RAY_ADDRESS") or "auto", namespace=NAMESPACE,
                     log_to_driver=False, logging_level="WARNING", configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as e:
            where = address or os.environ.get("RAY_ADDRESS") or "auto (a cluster started on this machine)"
            raise ConfigError(f"ray: no Ray cluster answers at {where}: {str(e).splitlines()[0]} "
                              "(scripts/start-ray.sh starts one on this machine)") from None
    return nodes()


def nodes() -> list[placement.Node]:
    import ray

    return [placement.Node(id=n["NodeID"], address=n.get("NodeManagerAddress", "?"),
                           cpus=float(n["Resources"].get("CPU", 0)), gpus=float(n["Resources"].get("GPU", 0)),
                           memory=float(n["Resources"].get("memory", 0)), port=int(n.get("NodeManagerPort") or 0))
            for n in ray.nodes() if n.get("Alive")]


def absolute_storage(url: str) -> str:
    """A SQLite URL relative to this process's folder, made absolute: a task's folder is not ours."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith(prefix + "/") and ":memory:" not in url:
        return prefix + str(Path(url[len(prefix):]).resolve())
    return url


def on_cluster(exp: Experiment) -> Experiment:
    """The experiment as every node reads it: its study storage by an absolute path."""
    cfg = exp.config
    storage = absolute_storage(cfg.study.storage)
    if storage == cfg.study.storage:
        return exp
    study = cfg.study.model_copy(update={"storage": storage})
    return exp.model_copy(update={"config": cfg.model_copy(update={"study": study})})


# --- the driver's side -----------------------------------------------------------------------------------

@dataclass
class _Launch:
    """A task in flight, and what the driver has shown of it."""

    ref: Any
    need: placement.Need
    cancelled: bool = False
    unplaceable: str | None = None  # why no live node can hold it any more (cancelled before it started)
    avoid: frozenset[str] = frozenset()  # node ids its label selector keeps it off


class RayTrialExecutor(TrialExecutor):
    """`TrialExecutor` whose launches run as Ray tasks (see the module docstring). Built by the
    composition root with the cluster joined; the driver uses it as it uses the local one."""

    def __init__(self, experiment: Experiment, **kwargs: Any):
        super().__init__(on_cluster(experiment), **kwargs)
        self.nodes = nodes()
        self.pin: str | None = None  # confirmation: every launch on the node of its first
        self.on_pin: Callable[[str], None] = lambda node: None  # told that node, once
        self.kernel_keys: dict[str, tuple[str, str | None]] = {}  # node id -> its kernel stage's cache key
        self._relay: Any = None
        self._running_on: placement.Node | None = None  # the node the launch in flight said it runs on
        self.footprint = host_footprint(self.exp.model_path)  # what a CPU launch's memory request counts
        self.spread_refused = placement.spread_refused(self.engine, self.cfg)  # None: wide configs spread

    def need_of(self, params: dict[str, Any]) -> placement.Need:
        return placement.config_need(self.engine, self.cfg, params, self.nodes, self.footprint)

    def run(self, params: dict[str, Any], *, trial: optuna.Trial | None, trial_dir: Path, progress: Progress,
            timings: dict[str, float], label: str, on_level: OnLevel = lambda step, metrics: None,
            gate: quality.Gate | None = None, measure_levels: bool = True) -> TrialResult:
        broken = self.infeasible(params, banned=trial is not None)
        if broken:
            return TrialResult("FAIL", failure_class="infeasible", reason="; ".join(broken))
        want = self.need_of(params)
        self.nodes = nodes()
        if why := placement.unplaceable(want, self.nodes, self.spread_refused):
            return TrialResult("FAIL", failure_class="infeasible", reason=f"no node of the Ray cluster fits: {why}")
        lost = self._lost_node(trial)
        over = None if self.spread_refused else self._spread_over(want, lost)
        if over and (problem := self.engine.spread_problem(params, self.cfg.engine_args)):
            return TrialResult("FAIL", failure_class="infeasible", reason=f"no node of the Ray cluster fits: {problem}")
        if self._relay is None:
            self._relay = _queue_here()
        job = TrialJob(experiment=self.exp, params=params, trial_id=getattr(trial, "_trial_id", None), label=label,
                       gate=gate, measure_levels=measure_levels, binary=self.binary, bans=list(self.bans),
                       cache_dir=str(self.cache_dir.resolve()) if self.cache_dir else None, relay=self._relay,
                       kernel_keys=self.kernel_keys, spread=want.gpus if over else 0)
        # A spread launch's task holds no GPU: the engine's own placement group takes them (one the task held
        # would never be free for it).
        options: dict[str, Any] = {"num_cpus": want.cpus, "num_gpus": 0 if over else want.gpus, "max_retries": 0,
                                   "name": f"{self.cfg.study_name}/{label}"}
        if want.memory:
            options["memory"] = want.memory
        avoid: list[str] = []
        if self.pin and trial is None and measure_levels:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(self.pin, soft=False)
        elif over:  # the serving process where the most GPUs are: vLLM puts its first worker beside it
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(over[0].id, soft=False)
            if lost:  # only the serving process is steered: vLLM's placement group puts its workers
                progress.note(f"    its serving process off the node that was lost ({lost.address}), GPUs allowing")
        elif lost and (avoid := placement.avoiding(lost, want, self.nodes)):
            options["label_selector"] = {NODE_ID_LABEL: f"!in({','.join(avoid)})"}
            progress.note(f"    measured off the node that was lost ({lost.address}; {len(avoid)} node id(s) avoided)")
        self._running_on = None
        if over:
            progress.phase(f"waiting for {want.gpus} GPU(s) over the Ray cluster's nodes (the fewest that hold them: "
                           f"{' + '.join(f'{n.gpus:g}' for n in over)}), the serving process on {over[0].address}")
        else:
            progress.phase(f"waiting for {want.describe()} of the Ray cluster")
        # What a spread launch's failure is read against: the GPU nodes that answer now, the groups placed so far.
        answered, groups = (_answering(self.nodes), _group_ids()) if over else (set[str](), set[str]())
        launch = _Launch(_task(options, progress).remote(job), want, avoid=frozenset(avoid))
        t = time.perf_counter()
        outcome = self._wait(launch, progress)
        timings["cluster_s"] = time.perf_counter() - t
        if isinstance(outcome, TrialResult):
            self.records = outcome.records
            return outcome
        result, files, node, node_timings = outcome
        timings.update(node_timings)
        trial_dir.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (trial_dir / name).write_bytes(data)
        result.launch_tags.update({NODE_TAG: node.id, ADDRESS_TAG: node.address})
        if over and result.state == "FAIL" and (gone := _gone(self.nodes, answered, _engine_nodes(groups))):
            _lost_under_spread(result, gone)
        # A measured launch of no trial (confirmation, transfer): the ones after it run on the same node.
        if trial is None and measure_levels and self.pin is None and result.state == "COMPLETE":
            self.pin = node.id
            self.on_pin(node.describe())
            if placement.SPREAD_TAG in result.launch_tags:  # vLLM places the workers of each launch anew
                progress.note(f"    the confirmation's launches all serve from one node: {node.describe()} (their "
                              "workers go where the engine's placement group puts them)")
            else:
                progress.note(f"    the confirmation's launches all run on one node: {node.describe()}")
        for step, metrics in enumerate(result.level_metrics):
            on_level(step, metrics)  # tracking charts each level, as it does for a local trial
        self.records, self.answers, self.score = result.records, result.answers, result.quality
        return result

    def _wait(self, launch: _Launch, progress: Progress) -> TrialResult | NodeOutcome:
        """Show the task's progress until it ends; Ctrl-C (the driver's stop) cancels it."""
        import ray
        from ray import exceptions as rx

        check_at = time.monotonic() + PENDING_CHECK_S
        while True:
            ready, _ = ray.wait([launch.ref], timeout=POLL_S)
            self._show(progress)
            if ready:
                break
            if self.stop.requested and not launch.cancelled:
                progress.phase(f"{self.stop.requested}: stopping the trial's task (its engine stops with it)")
                ray.cancel(launch.ref)
                launch.cancelled = True
            elif self._running_on is None and not launch.cancelled and time.monotonic() > check_at:
                # Not started: the nodes that could hold it may have died since (it would wait forever).
                check_at = time.monotonic() + PENDING_CHECK_S
                live = [n for n in nodes() if n.id not in launch.avoid]
                if why := placement.unplaceable(launch.need, live, self.spread_refused):
                    launch.unplaceable = why
                    ray.cancel(launch.ref)
                    launch.cancelled = True
        try:
            return ray.get(launch.ref)
        except rx.TaskCancelledError:
            if launch.unplaceable:  # the machine, not the config: measured once more if a node comes back
                return TrialResult("FAIL", failure_class=NODE_LOST, transient=True,
                                   reason=f"no live node of the Ray cluster can hold it any more: {launch.unplaceable}")
            by = self.stop.requested or "Ray"
            return TrialResult("FAIL", failure_class="interrupted", reason=f"stopped by {by}: the task was cancelled")
        except rx.RayTaskError as e:  # a bug on the node's side: the trial's failure, never the study's end
            return TrialResult("FAIL", failure_class="internal", reason=f"on the node: {type(e.cause).__name__}: "
                               f"{e.cause}", log_tail=str(e)[-4000:])
        except rx.RayError as e:  # the node died, or the cluster failed the task: the machine, not the config
            if launch.cancelled:
                return TrialResult("FAIL", failure_class="interrupted", reason=f"stopped by {self.stop.requested}")
            where, tags = self._running_on, {}
            at = f" ({where.address})" if where else ""
            if isinstance(e, (rx.NodeDiedError, rx.ObjectLostError)) and not isinstance(e, rx.OwnerDiedError):
                why = f"the node running the trial{at} was lost"
                if where is not None:  # kept in the trial, so its retry stays off that node
                    tags = {NODE_TAG: where.id, ADDRESS_TAG: where.address}
            elif isinstance(e, (rx.WorkerCrashedError, rx.LocalRayletDiedError, rx.OwnerDiedError, rx.ActorDiedError)):
                why = f"the trial's Ray worker{at} died"  # its node may be well: the retry may go there
            else:
                why = f"Ray failed the trial's task{at}"
            return TrialResult("FAIL", failure_class=NODE_LOST, transient=True, launch_tags=tags,
                               reason=f"{why} ({type(e).__name__}): {_first_line(e)[:300]}")
        finally:
            self._show(progress)

    def _show(self, progress: Progress) -> None:
        """The task's phases and notes, in the order it sent them. Lines are a courtesy: a queue that
        fails (its node lost) is dropped, and the next launch makes another."""
        def take(item: tuple[str, Any]) -> None:
            kind, text = item
            if kind == "node":
                node_id, address = text
                self._running_on = placement.Node(node_id, address, 0, 0)
            else:
                (progress.phase if kind == "phase" else progress.note)(text)

        if self._relay is not None and not _drain(self._relay, take):
            progress.note("    the trial's progress lines are lost (its queue failed); its result is not")
            self._relay = None

    def _spread_over(self, want: placement.Need, lost: placement.Node | None) -> list[placement.Node] | None:
        """The nodes a launch wider than every node spreads over (None: it fits one), off a lost node and
        every node at its address where the others hold it."""
        if lost is not None:
            off = [n for n in self.nodes if n.id != lost.id and n.address != lost.address]
            if over := placement.spread_nodes(want, off):
                return over
        return placement.spread_nodes(want, self.nodes)

    @staticmethod
    def _lost_node(trial: optuna.Trial | None) -> placement.Node | None:
        """The node a trial this one measures again was lost with (None: not a retry of a lost node). A
        retry that was itself interrupted passes the lost node on to the retry of it."""
        from autotuner.core import record

        if trial is None:
            return None
        by_number = {t.number: t for t in trial.study.get_trials(deepcopy=False)}
        retry_of, seen = trial.user_attrs.get(record.RETRY_OF), set[int]()
        while isinstance(retry_of, int) and retry_of not in seen and (earlier := by_number.get(retry_of)):
            seen.add(retry_of)
            failure = earlier.user_attrs.get(record.FAILURE_CLASS)
            if failure == NODE_LOST:
                tags = earlier.user_attrs.get(record.LAUNCH_TAGS) or {}
                return placement.Node(tags[NODE_TAG], tags.get(ADDRESS_TAG, "?"), 0, 0) if NODE_TAG in tags else None
            if failure != "interrupted":
                return None
            retry_of = earlier.user_attrs.get(record.RETRY_OF)
        return None


def _queue_here() -> Any:
    """A queue that tasks send lines to, on this machine's node: a queue on another node would die with it."""
    import ray
    from ray.util.queue import Queue
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
    return Queue(actor_options={"num_cpus": 0, "scheduling_strategy": here})


def _task(options: dict[str, Any], progress: Progress) -> Any:
    """The node's task with `options`; without the label selector where this Ray refuses one (older than
    label selectors on tasks: it checks the options here), so a retry is not lost over where it goes."""
    import ray

    try:
        return ray.remote(run_on_node).options(**options)
    except (ValueError, TypeError) as e:
        if "label_selector" not in options:
            raise
        progress.note(f"    this Ray refuses label selectors ({_first_line(e)[:120]}): the retry may land on the "
                      "node that was lost")
        return ray.remote(run_on_node).options(**{k: v for k, v in options.items() if k != "label_selector"})


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


# --- the node's side -------------------------------------------------------------------------------------

@dataclass
class TrialJob:
    """What a node needs to run one launch: everything else it reads from the experiment and the study."""

    experiment: Experiment
    params: dict[str, Any]
    trial_id: int | None  # None: a launch that reports to no trial (confirmation, the quality reference)
    label: str
    gate: Any
    measure_levels: bool
    binary: str | None
    bans: list[Any]
    cache_dir: str | None
    relay: Any
    kernel_keys: dict[str, tuple[str, str | None]]  # node id -> the kernel cache key its stage tuned under
    spread: int = 0  # GPUs of a launch wider than a node, spread by the engine's own placement group (0: none)


class RelayedProgress:
    """The executor's `progress` on a node: each phase and note goes to the driver's queue."""

    def __init__(self, relay: Any):
        self.relay = relay

    def phase(self, text: str) -> None:
        self._put("phase", text)

    def note(self, text: str) -> None:
        self._put("note", text)

    def at(self, node: placement.Node) -> None:
        """Tell the driver where the launch runs (kept with a lost launch, so its retry goes elsewhere)."""
        self._put("node", (node.id, node.address))

    def _put(self, kind: str, text: Any) -> None:
        # Sent, never waited for: a task blocked in ray.get lends its CPUs and GPUs back to Ray, which
        # may start another trial on them. A caller's calls to one actor run in order.
        try:
            self.relay.actor.put_nowait.remote((kind, text))
        except Exception:  # the driver's queue is gone: the line is lost, the trial goes on
            pass


def run_on_node(job: TrialJob) -> NodeOutcome:
    """The Ray task: run one launch here with a local executor, on the GPUs Ray gave this task; its
    result, the files it wrote, where it ran and how long each phase took."""
    import optuna
    import ray

    from autotuner.core import record
    from autotuner.core.study import open_study
    from autotuner.core.traffic import keep_state
    from autotuner.engines._base import get_engine
    from autotuner.launchers import make_launcher
    from autotuner.node.pool import Leases, Pool
    from autotuner.stages import kernel_stage
    from autotuner.util import secrets

    exp, cfg = job.experiment, job.experiment.config
    progress = RelayedProgress(job.relay)
    context = ray.get_runtime_context()
    here = next((n for n in nodes() if n.id == context.get_node_id()),
                placement.Node(context.get_node_id(), "?", 0, 0))
    progress.at(here)
    progress.phase(f"on Ray node {here.describe()}")
    workdir = Path(tempfile.mkdtemp(prefix="autotuner-ray-"))
    try:
        gpu_ids = [int(g) for g in ray.get_gpu_ids()]
        pool = Leases(Pool.of_gpus(gpu_ids), directory=workdir / "leases") if gpu_ids else None
        engine = get_engine(cfg.engine, exp.space.env_params)
        if job.spread:
            node_ip = here.address if here.address != "?" else None
            exp = placement.spread_launch(exp, engine, context.gcs_address, node_ip)
        if cfg.kernels is not None:  # the kernels the stage tuned on this node, for its GPU
            exp = kernel_stage.for_node(exp, engine, gpu_ids, job.kernel_keys.get(here.id))
        launcher = make_launcher(exp, progress=progress.note)
        executor = TrialExecutor(exp, engine=engine, launcher=launcher, binary=job.binary,
                                 secrets=secrets.collect(cfg.secret_env), pool=pool)
        # An engine of this study whose task died with its node's raylet may outlive it (a container is no
        # child of the task): removed here. One whose owning task still runs is another trial's, and stays.
        if reaped := launcher.reap(executor.labels):
            progress.note(f"    removed {len(reaped)} engine(s) of this study left on this node by a lost task")
        if job.spread:
            if busy := _await_free_gpus(job.spread, here.id, cfg.startup_timeout_s, progress):
                return TrialResult("FAIL", failure_class="gpus-busy", transient=True, reason=busy), {}, here, {}
            progress.note(f"    spread over nodes: {engine.name} places its GPU workers on the cluster at "
                          f"{context.gcs_address} by a placement group of its own")
        study = open_study(cfg, n_levels=cfg.load.max_steps)
        executor.traffic.load = lambda: study.user_attrs.get(record.TRAFFIC)
        executor.traffic.save = lambda state: keep_state(study, cfg.study.storage, state)
        executor.bans = job.bans
        executor.cache_dir = Path(job.cache_dir) if job.cache_dir else None
        trial = optuna.trial.Trial(study, job.trial_id) if job.trial_id is not None else None
        trial_dir, timings = workdir / job.label, dict[str, float]()
        result = executor.run(job.params, trial=trial, trial_dir=trial_dir, progress=progress,  # type: ignore[arg-type]
                              timings=timings, label=job.label, gate=job.gate, measure_levels=job.measure_levels)
        result.launch_tags.update(kernel_stage.key_tags(exp))  # the winner's command reads the same kernels
        if job.spread:  # and is spread as this launch was
            result.launch_tags |= {placement.SPREAD_TAG: context.gcs_address,
                                   placement.SPREAD_GPUS_TAG: str(job.spread),
                                   **({placement.SPREAD_NODE_GPUS_TAG: str(int(here.gpus))} if here.gpus else {})}
        return result, _files(trial_dir), here, timings
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _gone(before: list[placement.Node], answered: set[str], used: set[str] | None) -> list[placement.Node]:
    """The GPU nodes of `before` the engine `used` (None: any) that are no longer alive, or whose raylet
    `answered` before the launch and no longer does: Ray counts a node alive until its health checks have
    failed (seconds to a minute), and the engine whose worker was there has failed by then."""
    alive = {n.id for n in nodes()}
    candidates = [n for n in before if n.gpus and (used is None or n.id in used)]
    answering = _answering([n for n in candidates if n.id in alive and n.id in answered])
    return [n for n in candidates if n.id not in alive or (n.id in answered and n.id not in answering)]


def _answering(candidates: list[placement.Node]) -> set[str]:
    """The ids of the nodes whose raylet takes a connection (asked side by side; an unknown port answers)."""
    from concurrent.futures import ThreadPoolExecutor

    def answers(node: placement.Node) -> bool:
        if not node.port or node.address == "?":
            return True
        try:
            with socket.create_connection((node.address, node.port), timeout=RAYLET_CONNECT_S):
                return True
        except OSError:
            return False

    if not candidates:
        return set()
    with ThreadPoolExecutor(max_workers=min(32, len(candidates))) as pool:
        return {n.id for n, ok in zip(candidates, pool.map(answers, candidates), strict=True) if ok}


def _group_ids() -> set[str]:
    from ray.util import placement_group_table

    return set(placement_group_table())


def _engine_nodes(before: set[str]) -> set[str] | None:
    """The nodes the placement groups made since `before` (a spread engine's, ended or not: Ray keeps a
    removed group's bundles) put bundles on; None where that cannot be told: none made, or a bundle not
    placed (its node lost, the group waits to place it again)."""
    from ray.util import placement_group_table

    made = [g for gid, g in placement_group_table().items() if gid not in before]
    if not made or any(len(g.get("bundles_to_node_id") or {}) < len(g.get("bundles") or {}) for g in made):
        return None
    return {node for g in made for node in g["bundles_to_node_id"].values()}


def _lost_under_spread(result: TrialResult, gone: list[placement.Node]) -> None:
    """A spread launch that failed while a GPU node of the cluster was lost: the machine, not the config
    (vLLM's workers there ended with it, and the engine with them), measured once more. The lost node is
    the trial's node tag, as a lost task's is: the retry's serving process stays off it."""
    lost = gone[0]
    was = f"{result.failure_class}: {result.reason}" if result.reason else str(result.failure_class)
    result.failure_class, result.transient = NODE_LOST, True
    result.reason = (f"a GPU node of the cluster ({lost.address}) was lost while the engine was spread over its "
                     f"nodes (the engine's own failure: {was[:300]})")
    result.launch_tags.update({NODE_TAG: lost.id, ADDRESS_TAG: lost.address})


def _await_free_gpus(gpus: int, node_id: str, timeout_s: float, progress: RelayedProgress) -> str | None:
    """Wait until `gpus` GPUs of the cluster are free, one of them on this node (where a spread engine
    puts its first worker): it asks for them all at once, and a start that finds them held fails. Why
    they never were (None: they are)."""
    from ray._private.state import available_resources_per_node  # what vLLM itself reads

    progress.phase(f"waiting for {gpus} free GPU(s) of the cluster, one on this node (taken all at once)")
    deadline = time.monotonic() + timeout_s
    while True:
        free = available_resources_per_node()
        total, here = sum(r.get("GPU", 0) for r in free.values()), free.get(node_id, {}).get("GPU", 0)
        if total >= gpus and here >= 1:
            return None
        if time.monotonic() > deadline:
            return (f"{gpus} GPU(s) of the cluster, one on the serving node, were never free at once in "
                    f"{timeout_s:g} s (free: {total:g}, {here:g} here): other trials or jobs hold them")
        time.sleep(PENDING_POLL_S)


def _files(folder: Path) -> dict[str, bytes]:
    """The trial's files by name (the log's end when one is huge)."""
    out: dict[str, bytes] = {}
    for path in sorted(folder.glob("*")) if folder.is_dir() else []:
        if path.is_file():
            size = path.stat().st_size
            with path.open("rb") as f:
                if size > MAX_FILE_BYTES:
                    f.seek(size - MAX_FILE_BYTES)
                out[path.name] = f.read()
    return out


def _drain(relay: Any, take: Callable[[Any], None]) -> bool:
    """Each item in `relay`, in the order sent; False when the queue (or what takes its items) failed."""
    from ray.util.queue import Empty

    try:
        while True:
            take(relay.get_nowait())
    except Empty:
        return True
    except Exception:
        return False
