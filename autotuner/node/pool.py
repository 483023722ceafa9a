"""The devices of one node, handed out to trials side by side: GPUs (a TP2 trial gets 2 of 8) or, on a
CPU-only machine, CPU cores (each llama-server trial gets as many cores as its threads).

`pack` is the pure part: which free units a trial of `need` units gets (by the GPUs' real links when the
pool knows them, `gpu_topology.best_group`; else by aligned ids). `Leases` keeps who holds what in
a JSON file under a lock, shared by every autotuner process of this user on the node (the `--parallel`
workers, and separate `autotuner run`s of other studies), so no unit is ever given twice; a lease whose
holder died is taken back.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from autotuner.config import ConfigError, ExperimentConfig
from autotuner.launchers._base import owner_alive, this_owner
from autotuner.node.gpu_topology import Topology, best_group, parse_topo_matrix
from autotuner.util import locks

POLL_S = 0.5


def default_dir() -> Path:
    """Where a node's leases live: $AUTOTUNER_POOL_DIR, else a per-user folder in the node's temp dir
    (node-local, unlike a home folder that several nodes may share)."""
    if env := os.environ.get("AUTOTUNER_POOL_DIR"):
        return Path(env)
    return Path(tempfile.gettempdir()) / f"autotuner-pool-{os.getuid()}"


@dataclass(frozen=True)
class Pool:
    """The units trials may use: GPU ids (kind "gpu") or CPU core ids (kind "cpu"), in their order."""

    kind: str
    units: tuple[int, ...]
    topology: Topology | None = field(default=None, compare=False)  # GPUs: `nvidia-smi topo -m`, parsed

    @classmethod
    def of_gpus(cls, gpus: int | Sequence[int]) -> Pool:
        return cls("gpu", tuple(range(gpus)) if isinstance(gpus, int) else tuple(gpus))

    @classmethod
    def of_cpus(cls, cpus: Sequence[int] | None = None) -> Pool:
        return cls("cpu", tuple(sorted(cpus if cpus is not None else os.sched_getaffinity(0))))

    def need(self, gpus: int, cpus: int | None) -> int:
        """Units a launch takes: its GPUs (TP x PP x DP; 0: the engine uses every GPU it sees), or its
        cores on a CPU pool (None: every core; more threads than cores share the whole pool)."""
        if self.kind == "gpu":
            return gpus or len(self.units)
        return min(cpus, len(self.units)) if cpus else len(self.units)

    def describe(self, units: Sequence[int]) -> str:
        names = "GPU" if self.kind == "gpu" else "CPU core"
        return f"{names}{'s' if len(units) != 1 else ''} {','.join(map(str, units))}"


def node_pool(cfg: ExperimentConfig, parallel: int, gpus: str | None,
              environ: Mapping[str, str] = os.environ) -> Pool | None:
    """The pool trials share on this node: GPUs whenever there are any (each trial gets just what its
    config needs): `gpus` ("0,1,2,3", from --gpus), else the ids the user already confined the tuner to
    (the experiment's docker gpus list, an inherited CUDA_VISIBLE_DEVICES of plain ids), else 0 to
    hardware.gpus - 1; CPU cores when trials run side by side on a CPU-only node; None: nothing to share."""
    if gpus is not None:
        try:
            ids = [int(g) for g in gpus.split(",") if g.strip()]
        except ValueError:
            raise ConfigError(f"--gpus: '{gpus}' is not a list of GPU ids such as 0,1,2,3") from None
        if not ids or len(set(ids)) != len(ids) or min(ids) < 0:
            raise ConfigError(f"--gpus: '{gpus}' must list distinct GPU ids such as 0,1,2,3")
        return Pool.of_gpus(ids)
    if cfg.hardware.gpus:
        return Pool.of_gpus(_confined_gpus(cfg, environ) or cfg.hardware.gpus)
    return Pool.of_cpus() if parallel > 1 else None


def study_gpus(cfg: ExperimentConfig) -> list[int]:
    """The GPUs a study of `cfg` would use, without --gpus: its pool's (none on a CPU experiment)."""
    pool = node_pool(cfg, 1, None)
    return list(pool.units) if pool is not None and pool.kind == "gpu" else []


def with_topology(pool: Pool, topo_text: str | None) -> Pool:
    """A GPU pool that packs by the links in `topo_text` (`nvidia-smi topo -m`); unchanged without one."""
    topology = parse_topo_matrix(topo_text or "") if pool.kind == "gpu" else None
    return replace(pool, topology=topology) if topology is not None else pool


def _confined_gpus(cfg: ExperimentConfig, environ: Mapping[str, str]) -> list[int] | None:
    """The GPU indices the user confined the tuner to; a confinement by UUID (or MIG instance) is refused,
    since trials are leased GPUs by nvidia-smi index and would otherwise land on GPUs it excluded."""
    docker_gpus = cfg.docker.gpus if cfg.launcher == "docker" and cfg.docker is not None else None
    if isinstance(docker_gpus, list):
        if not all(str(g).isdigit() for g in docker_gpus):
            raise ConfigError(f"docker.gpus: {docker_gpus} names GPUs by UUID, but trials are leased GPUs by "
                              f"index: {_BY_INDEX}")
        return [int(g) for g in docker_gpus]
    visible = [v.strip() for v in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if not visible:
        return None
    if not all(v.isdigit() for v in visible):
        raise ConfigError(f"CUDA_VISIBLE_DEVICES={','.join(visible)} names GPUs by UUID, but trials are leased GPUs "
                          f"by index: {_BY_INDEX}")
    return [int(v) for v in visible]


_BY_INDEX = "name them by index (nvidia-smi --query-gpu=index,uuid --format=csv), or pass --gpus 0,1,..."


def pack(units: Sequence[int], busy: set[int], need: int,
         topology: Topology | None = None) -> tuple[int, ...] | None:
    """The ids (of `units`) a trial needing `need` gets, or None when too few are free.

    With the GPUs' `topology` (covering every free id) the group with the best links wins
    (`gpu_topology.best_group`). Without it, neighbouring GPU ids usually share the fastest links
    (NVLink pairs, one PCIe switch), so a trial gets a block aligned on the ids when one is free (a TP2
    trial: 0-1, 2-3, ...; a TP4 trial: 0-3, 4-7), else a run of consecutive ids, else any free ids.
    Among equal choices the one in the smallest free stretch wins (best fit), keeping big blocks whole
    for the big trials still to come.
    """
    free = set(units) - busy
    if need <= 0 or need > len(free):
        return None
    if topology is not None and free <= set(topology.gpus):
        group = best_group(topology, free, need)
        if group is not None:
            return group

    def whole(start: int, size: int) -> bool:
        return all(start + i in free for i in range(size))

    if need & (need - 1) == 0:  # a power of two: aligned blocks
        blocks = [s for s in sorted(free) if s % need == 0 and whole(s, need)]
        if blocks:
            best = min(blocks, key=lambda s: (_aligned_free_size(whole, s, need), s))
            return tuple(range(best, best + need))
    runs = [s for s in sorted(free) if whole(s, need)]
    if runs:
        best = min(runs, key=lambda s: (_run_length(free, s), s))
        return tuple(range(best, best + need))
    return tuple(sorted(free)[:need])


def _aligned_free_size(whole: Callable[[int, int], bool], start: int, size: int) -> int:
    """The largest fully free aligned block that contains the block at `start` (the buddy allocator's
    view): the smaller, the better the fit."""
    while True:
        bigger = size * 2
        begin = start - start % bigger
        if not whole(begin, bigger):
            return size
        start, size = begin, bigger


def _run_length(free: set[int], start: int) -> int:
    """Length of the run of consecutive free ids around `start`."""
    lo, hi = start, start
    while lo - 1 in free:
        lo -= 1
    while hi + 1 in free:
        hi += 1
    return hi - lo + 1


class PoolTooSmall(Exception):
    """A trial needs more units than the pool has at all: it can never run here."""


class Leases:
    """Who holds which units of `pool` on this node, and who waits: `<dir>/<kind>.json`, read and written
    under its lock. First come, first served: a request is served only when no older one still waits, so
    a TP8 trial is not starved by a stream of TP1 trials (the price: units may idle while it waits for
    running trials to end)."""

    def __init__(self, pool: Pool, directory: Path | None = None, owner: str | None = None):
        self.pool = pool
        # One file per host: a folder shared by several nodes (an NFS home) must not mix their GPU 0s.
        self.path = (directory or default_dir()) / f"{pool.kind}-{socket.gethostname()}.json"
        self.owner = owner or this_owner()

    def acquire(self, need: int, label: str, waiting: Callable[[str], None] = lambda message: None,
                stop: Callable[[], bool] = lambda: False) -> tuple[int, ...]:
        """`need` units, waiting while others hold them or wait before us. `waiting(message)` is told once
        when this has to wait; `stop()` True while waiting gives up (raises InterruptedError)."""
        if need > len(self.pool.units):
            raise PoolTooSmall(f"needs {need} {self.pool.kind.upper()} unit(s), the pool has "
                               f"{len(self.pool.units)} ({self.pool.describe(self.pool.units)})")
        ticket = uuid.uuid4().hex
        told = False
        try:
            while True:
                with self._locked() as state:
                    queue = state["queue"]
                    if not any(w["ticket"] == ticket for w in queue):
                        queue.append({"ticket": ticket, "owner": self.owner, "need": need, "label": label,
                                      "pool": list(self.pool.units)})
                    mine = next(i for i, w in enumerate(queue) if w["ticket"] == ticket)
                    # Only requests for some of the same units stand in line before this one.
                    ahead = sum(1 for w in queue[:mine] if set(w.get("pool", ())) & set(self.pool.units))
                    busy = {u for lease in state["leases"] for u in lease["units"]}
                    units = None if ahead else pack(self.pool.units, busy, need, self.pool.topology)
                    if units is not None:
                        queue.pop(mine)
                        state["leases"].append({"units": list(units), "owner": self.owner, "label": label,
                                                "since": time.time()})
                        return units
                if not told:
                    free = len(set(self.pool.units) - busy)
                    waiting(f"waiting for {need} {self.pool.kind.upper()} unit(s): {free} of "
                            f"{len(self.pool.units)} free" + (f", {ahead} request(s) ahead" if ahead else ""))
                    told = True
                if stop():
                    raise InterruptedError("stopped while waiting for the device pool")
                time.sleep(POLL_S)
        except BaseException:  # gave up (stop, Ctrl-C): leave the queue, or the requests behind wait forever
            with self._locked() as state:
                state["queue"][:] = [w for w in state["queue"] if w["ticket"] != ticket]
            raise

    def release(self, units: Sequence[int]) -> None:
        with self._locked() as state:
            state["leases"][:] = [lease for lease in state["leases"]
                                  if not (lease["owner"] == self.owner and lease["units"] == list(units))]

    def held(self) -> list[dict]:
        with self._locked() as state:
            return [dict(lease) for lease in state["leases"]]

    def queued(self) -> list[str]:
        """The labels of the requests waiting, first in line first."""
        with self._locked() as state:
            return [w["label"] for w in state["queue"]]

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, list[dict]]]:
        """The live leases and waiting requests, to read and change; written back on exit (atomically: a
        reader never sees half a file). Entries of a dead process are dropped."""
        with locks.file_lock(self.path.with_name(self.path.name + ".lock")):
            try:
                data = json.loads(self.path.read_text())
            except (FileNotFoundError, json.JSONDecodeError):
                data = {}
            state = {key: [e for e in data.get(key, []) if owner_alive(e.get("owner"))] for key in ("leases", "queue")}
            yield state
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text(json.dumps(state, indent=1))
            tmp.replace(self.path)
