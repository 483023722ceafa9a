"""What one trial asks of a cluster, and whether the cluster can give it (pure: no Ray here).

A trial's engine and its load generator run on one node: a config needing 8 GPUs needs a node with 8
free GPUs (Ray places a task on one node), except a config wider than every node of an engine that
spreads over nodes (vLLM's Ray backend): its serving process runs on the node with the most GPUs and
its workers wherever the engine's own placement group puts them. On a CPU-only experiment a config
asks for its threads, or a whole node when the engine uses every core it sees (llama.cpp's default),
and the host memory it holds (its weights and the KV cache its config sizes; Ray's `memory` resource).
A GPU launch asks no memory: its weights and cache live on its GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotuner.config import Experiment

GIB = 2**30

def size(memory: float) -> str:
    return f"{memory / GIB:.1f} GiB" if memory >= GIB else f"{memory / 2**20:.0f} MiB"


@dataclass(frozen=True)
class Node:
    """One live node of the cluster, as Ray declares it."""

    id: str
    address: str
    cpus: float
    gpus: float
    memory: float = 0.0  # bytes Ray may hand out (its `memory` resource); 0: not declared
    port: int = 0  # its raylet's (NodeManagerPort); 0: unknown

    def describe(self) -> str:
        gpus = f", {self.gpus:g} GPU(s)" if self.gpus else ""
        memory = f", {size(self.memory)} of memory" if self.memory else ""
        return f"{self.address} ({self.id[:8]}: {self.cpus:g} CPU(s){gpus}{memory})"


@dataclass(frozen=True)
class Need:
    """The resources one launch asks for on one node."""

    cpus: float
    gpus: int
    memory: int = 0  # bytes of host memory

    def describe(self) -> str:
        gpus = f"{self.gpus} GPU(s) and " if self.gpus else ""
        cpus = f"{self.cpus:g} CPU(s)" if self.cpus else "every CPU"
        memory = f" and {size(self.memory)} of memory" if self.memory else ""
        return f"{gpus}{cpus}{memory} on one node"


def need(gpus: int, threads: int | None, nodes: Sequence[Node], *, on_gpus: bool, memory: int = 0) -> Need:
    """A config's need: `gpus` (TP x PP x DP; 0 on a GPU experiment: one, the engine's default),
    `threads` (None: every core of a node, so the largest node's count; 0 before a cluster is joined) and,
    on CPUs, `memory` (bytes)."""
    # Every core of the largest node; at least one where nodes declare none (a head started with 0 CPUs).
    cpus = float(threads) if threads else max([n.cpus for n in nodes] + [1.0]) if nodes else 0.0
    if on_gpus:
        return Need(cpus=1.0 if not threads else cpus, gpus=max(gpus, 1))
    return Need(cpus=cpus, gpus=0, memory=memory)


def config_need(engine: Any, cfg: Any, params: dict[str, Any], nodes: Sequence[Node],
                footprint: tuple[int, int] | None = None) -> Need:
    """What a launch of `params` asks (the engine's gpus_needed, cpus_needed and, on CPUs with the model's
    `footprint` (weight bytes, KV bytes a token) known, host_memory_needed, on experiment `cfg`): the
    fixed `env:` and `engine_args:` count as the launch sees them, e.g. a KV cache sized there."""
    on_gpus = cfg.hardware.gpus > 0
    gpus = engine.gpus_needed(params, cfg.engine_args) if on_gpus else 0
    memory = 0
    if footprint and not on_gpus:  # the values set outside the space count too, as the launch reads them
        env = {**cfg.env, **(cfg.docker.env if cfg.docker else {})}
        memory = engine.host_memory_needed(engine.effective(params, cfg.engine_args, env), *footprint)
    return need(gpus, engine.cpus_needed(params), nodes, on_gpus=on_gpus, memory=memory)


def holds(node: Node, want: Need) -> bool:
    # Ray places a memory request only on a node that declares memory (Ray declares most of it by default).
    return node.cpus >= want.cpus and node.gpus >= want.gpus and node.memory >= want.memory


ONE_NODE = "a trial of this engine runs on one node"


def spread_refused(engine: Any, cfg: Any) -> str | None:
    """Why a launch of this engine under experiment `cfg` cannot spread over nodes (None: it can)."""
    if engine.spread_args is None:
        return f"{ONE_NODE}: only vLLM spreads over nodes, with its Ray backend (docs/ray.md)"
    if cfg.launcher != "process":
        return ("an engine spread over nodes runs as processes (launcher: process): in containers its Ray "
                "workers would need a Ray cluster of the engine's image (docs/ray.md)")
    return None


SPREAD_TAG = "autotuner.ray_spread"  # a launch spread over nodes: the cluster it joined (its MLflow run too)
SPREAD_GPUS_TAG = "autotuner.ray_spread_gpus"  # ... the GPUs it spread
SPREAD_NODE_GPUS_TAG = "autotuner.ray_spread_node_gpus"  # ... and the serving node's: a deployment's pod size


def spread_launch(exp: Experiment, engine: Any, address: str | None, node_ip: str | None = None) -> Experiment:
    """`exp` as a launch spread over the nodes of the Ray cluster at `address` runs: the engine's arguments
    for it, the cluster it joins (RAY_ADDRESS, in every written-down command: it runs on a node; none: the
    cluster of the node it runs on, as in a deployment that starts its own) and, where
    known, the serving node's address in the cluster (a node with several networks: the engine's own guess,
    its default route, may not be the address Ray knows the node by, and its workers would never be placed)."""
    cfg = exp.config
    env = {**cfg.env, **({"RAY_ADDRESS": address} if address else {})}
    if node_ip and engine.spread_ip_env:
        env[engine.spread_ip_env] = node_ip
    update = {"engine_args": [*cfg.engine_args, *engine.spread_args], "env": env}
    return exp.model_copy(update={"config": cfg.model_copy(update=update)})


def as_launched(exp: Experiment, engine: Any, tags: dict[str, str]) -> Experiment:
    """`exp` as the trial with these launch tags ran: spread over nodes where it was."""
    return spread_launch(exp, engine, tags[SPREAD_TAG]) if SPREAD_TAG in tags else exp


def spread_nodes(want: Need, nodes: Sequence[Node]) -> list[Node] | None:
    """The nodes a launch wider than every node spreads over: the fewest nodes, the most GPUs first, whose
    GPUs hold it, the first (its serving process) with the CPUs it asks; None when one node holds it
    (no spread) or all of them do not. Declared GPUs: Ray places on what is free when the launch starts."""
    if not want.gpus or any(holds(n, want) for n in nodes):
        return None
    serving = [n for n in nodes if n.gpus and n.cpus >= want.cpus]
    if not serving:
        return None
    first = max(serving, key=lambda n: n.gpus)
    chosen = [first]
    for n in sorted((n for n in nodes if n.gpus and n.id != first.id), key=lambda n: -n.gpus):
        if sum(c.gpus for c in chosen) >= want.gpus:
            break
        chosen.append(n)
    return chosen if sum(c.gpus for c in chosen) >= want.gpus else None


def unplaceable(want: Need, nodes: Sequence[Node], refused: str | None = ONE_NODE) -> str | None:
    """Why the cluster can never run this launch (None: it can): no node holds it and, where the engine
    spreads over nodes (`refused` None; else why it cannot), all of them together do not either."""
    if any(holds(n, want) for n in nodes):
        return None
    wider = bool(nodes) and want.gpus > max(n.gpus for n in nodes)
    if wider and refused is None and spread_nodes(want, nodes):
        return None
    largest = ", ".join(n.describe() for n in nodes) or "no live node"
    why = ""
    if wider and refused:
        why = f" ({refused})"
    elif wider and not any(n.gpus and n.cpus >= want.cpus for n in nodes):
        why = f" (spread over nodes: no node with GPUs has the {want.cpus:g} CPU(s) its serving process asks)"
    elif wider:
        why = f" (spread over nodes: {want.gpus} GPU(s); the cluster has {sum(n.gpus for n in nodes):g})"
    return f"needs {want.describe()}; the cluster's nodes: {largest}{why}"


def avoiding(lost: Node | None, want: Need, nodes: Sequence[Node]) -> list[str]:
    """The node ids a retry of a launch lost with node `lost` stays off: that node and every node at its
    address (a raylet that comes back gets a new id at its old address) while another node holds `want`;
    else the lost id alone; none when nothing else holds it (waiting forever is worse than a flaky node)."""
    if lost is None:
        return []
    for avoid in ({lost.id} | {n.id for n in nodes if n.address == lost.address}, {lost.id}):
        if any(holds(n, want) for n in nodes if n.id not in avoid):
            return sorted(avoid)
    return []


ROUNDS = 4  # trials in flight are at most a quarter of the budget: the sampler learns from 4 rounds or more


def trials_in_flight(want: Need, nodes: Sequence[Node], trials: int, told: int | None = None) -> int:
    """How many trials a study keeps in flight: `told` (ray.trials_at_once), else as many launches of `want`
    (the defaults) as the nodes hold, but no more than a quarter of the `trials`: a batch of proposals
    made before any result is a batch the sampler learns nothing between (benchmarks/cluster_simulation.py:
    64 at once on 64 GPUs found the top group in 2 of 5 studies, 16 at once in 4, 8 at once in 5)."""
    at_once = told or min(trials_at_once(want, nodes), trials // ROUNDS)
    return max(1, min(at_once, trials))


def trials_at_once(want: Need, nodes: Sequence[Node]) -> int:
    """How many launches of this need the cluster holds side by side (each node filled on its own)."""
    total = 0
    for n in nodes:
        fits = [n.cpus // want.cpus if want.cpus else float("inf")]
        if want.gpus:
            fits.append(n.gpus // want.gpus)
        if want.memory:
            fits.append(n.memory // want.memory)
        total += int(min(fits))
    return total
