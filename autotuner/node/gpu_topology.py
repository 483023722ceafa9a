"""How a node's GPUs are wired, read from `nvidia-smi topo -m`, and which k of the free GPUs a trial should
get (pure: text in, data out; the command itself is run by `node.host.gpu_topology`).

The matrix names one link per pair of GPUs, best first (NVIDIA's legend):

    NV#   a bonded set of # NVLinks (more is faster)
    PIX   at most one PCIe bridge (one PCIe switch)
    PXB   several PCIe bridges, no host bridge
    PHB   through a PCIe host bridge (the CPU)
    NODE  between host bridges of one NUMA node
    SYS   across the SMP interconnect between NUMA nodes (QPI/UPI, Infinity Fabric)

`best_group` picks, among the free GPUs, the k whose worst link is best (tensor parallelism waits on the
slowest pair), then the fewest NUMA nodes, then the best links in total, then the tightest fit (it takes
the GPUs least close to the other free ones, by NUMA node and link, keeping well-connected blocks whole
for larger trials still to come), then the lowest ids. NIC rows and columns are ignored.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

# Link kinds, best first; NV# is ranked by its link count within rank 0.
LINK_ORDER = ("NV", "PIX", "PXB", "PHB", "NODE", "SYS")
UNKNOWN_RANK = len(LINK_ORDER)
MAX_CANDIDATES = 20_000  # more subsets than this (16+ GPUs, half taken): leave the choice to the id rule

_GPU = re.compile(r"^GPU(\d+)$")


@dataclass(frozen=True)
class Topology:
    """The GPU part of `nvidia-smi topo -m`: the link between each pair, and each GPU's NUMA node."""

    gpus: tuple[int, ...]
    links: dict[frozenset[int], str] = field(hash=False)
    numa: dict[int, int | None] = field(hash=False)

    def link(self, a: int, b: int) -> str:
        return self.links.get(frozenset((a, b)), "?")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def plain(text: str) -> str:
    """`nvidia-smi` output without terminal escapes: driver 580 underlines the matrix header with them
    even when piped (`\x1b[4mGPU0\tCPU Affinity...\x1b[0m`, read on an H200)."""
    return _ANSI.sub("", text)


def parse_topo_matrix(text: str) -> Topology | None:
    """The matrix of `nvidia-smi topo -m` (tabs or spaces, with or without NIC columns and legend);
    None when the text holds no GPU matrix."""
    lines = [line for line in plain(text).splitlines() if line.strip()]
    header_i = next((i for i, line in enumerate(lines) if re.match(r"^\s*GPU0\b", line)), None)
    if header_i is None:
        return None
    header = _cells(lines[header_i])
    columns = [c for c in header if _GPU.match(c)]
    numa_col = header.index("NUMA Affinity") if "NUMA Affinity" in header else None
    links: dict[frozenset[int], str] = {}
    numa: dict[int, int | None] = {}
    gpus: list[int] = []
    for line in lines[header_i + 1:]:
        cells = _cells(line)
        row = _GPU.match(cells[0]) if cells else None
        if row is None:
            if cells and cells[0].startswith(("NIC", "mlx")):
                continue
            break  # the legend
        gpu = int(row.group(1))
        gpus.append(gpu)
        for name, value in zip(columns, cells[1:1 + len(columns)], strict=False):
            other = int(name[3:])
            if other != gpu:
                links[frozenset((gpu, other))] = value
        # Cells after the link columns line up with the header's names from the right: "CPU Affinity",
        # "NUMA Affinity", "GPU NUMA ID" (older drivers print fewer).
        numa[gpu] = None
        if numa_col is not None:
            offset = len(header) - numa_col
            tail = cells[-offset:] if len(cells) >= offset else []
            numa[gpu] = int(tail[0]) if tail and tail[0].isdigit() else None
    if not gpus:
        return None
    return Topology(tuple(gpus), links, numa)


def _cells(line: str) -> list[str]:
    """A matrix line split on tabs or runs of 2+ spaces (header names like "CPU Affinity" hold one)."""
    return [c.strip() for c in re.split(r"\t|\s{2,}", line.strip()) if c.strip()]


def link_rank(link: str) -> tuple[int, int]:
    """Lower is better: (kind's place in LINK_ORDER, minus the NVLink count)."""
    if m := re.fullmatch(r"NV(\d+)", link):
        return (0, -int(m.group(1)))
    return (LINK_ORDER.index(link), 0) if link in LINK_ORDER else (UNKNOWN_RANK, 0)


def best_group(topo: Topology, free: Iterable[int], need: int) -> tuple[int, ...] | None:
    """The `need` GPUs of `free` with the best links (see the module docstring); None when too few are
    free, or when there are too many subsets to weigh (the caller falls back to its id rule)."""
    pool = sorted(set(free))
    if need <= 0 or need > len(pool):
        return None
    if need == 1:
        return (min(pool, key=lambda g: (_good_neighbours(topo, (g,), pool), g)),)
    if _subsets(len(pool), need) > MAX_CANDIDATES:
        return None
    return min(itertools.combinations(pool, need), key=lambda group: _cost(topo, group, pool))


def _cost(topo: Topology, group: Sequence[int], pool: Sequence[int]) -> tuple:
    ranks = [link_rank(topo.link(a, b)) for a, b in itertools.combinations(group, 2)]
    nodes = {topo.numa.get(g) for g in group}
    return (max(ranks), len(nodes), sum(r[0] for r in ranks), _good_neighbours(topo, group, pool), tuple(group))


def _good_neighbours(topo: Topology, group: Sequence[int], pool: Sequence[int]) -> int:
    """How close the free GPUs outside `group` are to it (a point for each pair on one NUMA node, one
    for each link better than SYS): taking the group with the fewest leaves well-connected blocks whole."""
    sys_rank = link_rank("SYS")
    score = 0
    for g in group:
        for o in pool:
            if o in group:
                continue
            score += topo.numa.get(g) is not None and topo.numa.get(g) == topo.numa.get(o)
            score += link_rank(topo.link(g, o)) < sys_rank
    return score


def _subsets(n: int, k: int) -> int:
    from math import comb

    return comb(n, k)


def describe(topo: Topology) -> str:
    """One line for the report: the links seen and the NUMA nodes, e.g. "NV18 between all 8 GPUs;
    NUMA node 0: GPU 0-3, node 1: GPU 4-7"."""
    kinds = sorted({topo.link(a, b) for a, b in itertools.combinations(topo.gpus, 2)}, key=link_rank)
    if not kinds:
        links = f"one GPU ({topo.gpus[0]})" if topo.gpus else "no GPU"
    elif len(kinds) == 1:
        links = f"{kinds[0]} between all {len(topo.gpus)} GPUs"
    else:
        links = "links " + ", ".join(f"{k} ({_pairs(topo, k)})" for k in kinds)
    by_node: dict[int | None, list[int]] = {}
    for g in topo.gpus:
        by_node.setdefault(topo.numa.get(g), []).append(g)
    if list(by_node) == [None]:
        return links
    nodes = ", ".join(f"node {n}: GPU {_ranges(gs)}" for n, gs in sorted(by_node.items(), key=lambda kv: str(kv[0])))
    return f"{links}; NUMA {nodes}"


def _pairs(topo: Topology, kind: str) -> str:
    pairs = [f"{a}-{b}" for a, b in itertools.combinations(topo.gpus, 2) if topo.link(a, b) == kind]
    return " ".join(pairs) if len(pairs) <= 4 else f"{len(pairs)} pairs"


def _ranges(ids: Sequence[int]) -> str:
    out: list[str] = []
    for _, run in itertools.groupby(enumerate(sorted(ids)), key=lambda p: p[1] - p[0]):
        values = [v for _, v in run]
        out.append(str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}")
    return ",".join(out)
