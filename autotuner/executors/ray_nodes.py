"""Work on every node of a Ray cluster before the first trial: what each node lacks to run the study's
trials (`check_nodes`), and a function run on every node side by side (`on_each_node`: the GPU preflight,
the kernel stage), its lines relayed to the driver as each node says them.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotuner.config import Experiment
from autotuner.executors import placement
from autotuner.executors.ray import POLL_S, _drain, _first_line, _queue_here, nodes, on_cluster


def node_problems(exp: Experiment, binary: str | None, version: str) -> list[str]:
    """What this node lacks to run the study's trials (run on each node as a task)."""
    import optuna

    cfg = exp.config
    problems = []
    import autotuner

    if getattr(autotuner, "__version__", version) != version:
        problems.append(f"autotuner {getattr(autotuner, '__version__', '?')} here, {version} on the driver")
    if not exp.model_path.exists():
        problems.append(f"no model at {exp.model_path}")
    if cfg.launcher == "process" and binary and not Path(binary).is_file():
        problems.append(f"no engine executable at {binary}")
    if cfg.launcher == "docker" and shutil.which("docker") is None:
        problems.append("no docker command")
    try:
        storage = optuna.storages.RDBStorage(cfg.study.storage, skip_table_creation=True)
        storage.get_study_id_from_name(cfg.study_name)
    except Exception as e:
        problems.append(f"the study '{cfg.study_name}' is not in its storage {cfg.study.storage} as seen here "
                        f"({_first_line(e)[:200]}): every node must reach one storage (docs/ray.md)")
    return problems


def check_nodes(exp: Experiment, binary: str | None) -> list[str]:
    """Each live node's problems, one line each (empty: every node can run trials). The study must exist
    in its storage already (the driver creates it)."""
    import autotuner

    version = getattr(autotuner, "__version__", "?")
    lines = []
    for run in on_each_node(node_problems, on_cluster(exp), binary, version):
        problems = run.value if run.error is None else [f"the check did not run: {run.error}"]
        lines += [f"node {run.node.describe()}: {p}" for p in problems]
    return lines


@dataclass(frozen=True)
class NodeRun:
    """What a function run on one node returned, or why it did not run there."""

    node: placement.Node
    value: Any = None
    error: str | None = None
    timed_out: bool = False  # not ended within the time given (cancelled then)


def on_each_node(fn: Callable[..., Any], *args: Any, with_gpus: bool = False, timeout_s: float = 120.0,
                 on_line: Callable[[placement.Node, str], None] | None = None) -> list[NodeRun]:
    """`fn(*args)` run once on each live node, side by side. `with_gpus`: only on the nodes that declare
    GPUs, each run holding all of that node's GPUs and given their ids as one more argument (it waits for
    GPUs another job holds, up to `timeout_s`). `on_line`: `fn` is given a `say` too, and each line it
    says comes to `on_line` with its node as it is said (a stage of hours is watched, not awaited)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    live = [n for n in nodes() if n.gpus > 0 or not with_gpus]
    by_id = {n.id: n for n in live}
    relay: Any = None
    refs: list[Any] = []

    def relay_lines() -> None:
        nonlocal relay
        if relay is not None and not _drain(relay, lambda item: on_line(by_id[item[0]], item[1])):  # type: ignore[misc]
            relay = None  # the queue is gone: the nodes go on, their lines are lost

    try:
        relay = _queue_here() if on_line is not None else None
        refs = [ray.remote(_on_node).options(num_cpus=0, num_gpus=n.gpus if with_gpus else 0, max_retries=0,
                                             scheduling_strategy=NodeAffinitySchedulingStrategy(n.id, soft=False))
                .remote(fn, args, with_gpus, relay, n.id) for n in live]
        deadline, pending = time.monotonic() + timeout_s, list(refs)
        while pending and (left := deadline - time.monotonic()) > 0:
            _, pending = ray.wait(pending, num_returns=len(pending), timeout=min(POLL_S, left))
            relay_lines()
        runs = [_node_run(node, ref, ref in pending, timeout_s) for node, ref in zip(live, refs, strict=True)]
        relay_lines()
        return runs
    except BaseException:  # Ctrl-C included: no node's task may hold its GPUs on after this
        for ref in refs:
            _cancel(ref)
        raise
    finally:
        if relay is not None:
            with contextlib.suppress(Exception):
                relay.shutdown()


def _node_run(node: placement.Node, ref: Any, late: bool, timeout_s: float) -> NodeRun:
    import ray

    if late:  # not in time (its GPUs held by another job)
        _cancel(ref)
        return NodeRun(node, error=f"not ended in {timeout_s:g} s", timed_out=True)
    try:
        return NodeRun(node, ray.get(ref))
    except Exception as e:  # the node could not run it
        return NodeRun(node, error=f"{type(e).__name__}: {_first_line(e)[:300]}")


def _cancel(ref: Any) -> None:
    """Cancel a node's task, not forced: its `finally`s stop the containers and processes it started."""
    import ray

    with contextlib.suppress(Exception):  # ended already: nothing to cancel
        ray.cancel(ref)


def _on_node(fn: Callable[..., Any], args: tuple[Any, ...], with_gpus: bool, relay: Any, node_id: str) -> Any:
    """On the node: `fn` with the GPU ids Ray gave the task, and a `say` that sends each line to `relay`."""
    import ray

    gpus = [[int(g) for g in ray.get_gpu_ids()]] if with_gpus else []
    if relay is None:
        return fn(*args, *gpus)

    sent: list[Any] = []

    def say(text: str) -> None:  # sent, not awaited (as RelayedProgress); a line lost with the queue is lost
        with contextlib.suppress(Exception):
            sent.append(relay.actor.put_nowait.remote((node_id, text)))

    try:
        return fn(*args, *gpus, say=say)
    finally:  # every line in the queue before the driver sees the task end, the last ones included
        with contextlib.suppress(Exception):
            ray.wait(sent, num_returns=len(sent), timeout=30)
