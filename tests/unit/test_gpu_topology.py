"""The GPU topology from `nvidia-smi topo -m` (recorded on real machines, tests/data/gpu/README.md says
where from), and the pool packing trials by it."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotuner.node.gpu_topology import best_group, describe, link_rank, parse_topo_matrix
from autotuner.node.pool import Leases, Pool, pack, with_topology
from autotuner.report import _packing_text

DATA = Path(__file__).parent.parent / "data" / "gpu"


def recorded(name: str):
    topology = parse_topo_matrix((DATA / name).read_text())
    assert topology is not None
    return topology


H100 = "topo-m-8x-h100-sxm-nv18.txt"
RTX4090 = "topo-m-8x-rtx4090-pcie-two-numa.txt"
L40S = "topo-m-4x-l40s-two-numa.txt"
MIXED = "topo-m-5x-4090-mixed-pcie.txt"
PHB = "topo-m-4x-consumer-phb.txt"


@pytest.mark.parametrize("name, gpus, numa, link01", [
    (H100, 8, {0: 0, 3: 0, 4: 1, 7: 1}, "NV18"),
    (RTX4090, 8, {0: 0, 3: 0, 4: 1, 7: 1}, "SYS"),  # tabs, NIC columns and rows, no legend
    (L40S, 4, {0: 0, 1: 0, 2: 1, 3: 1}, "NODE"),
    (MIXED, 5, {0: 1, 1: 0, 4: 0}, "SYS"),
    (PHB, 4, {0: 0, 3: 0}, "PHB"),
])
def test_every_recorded_matrix_parses_to_its_gpus_links_and_numa_nodes(name, gpus, numa, link01):
    topology = recorded(name)
    assert topology.gpus == tuple(range(gpus))
    assert topology.link(0, 1) == topology.link(1, 0) == link01
    assert all(topology.numa[g] == n for g, n in numa.items())
    assert len(topology.links) == gpus * (gpus - 1) // 2  # NIC columns are not GPU links


def test_nic_rows_and_the_legend_are_not_gpus():
    topology = recorded(L40S)
    assert topology.link(2, 3) == "NODE" and topology.link(1, 2) == "SYS"
    assert parse_topo_matrix("Legend:\n\n  X    = Self\n") is None
    assert parse_topo_matrix("") is None


def test_links_rank_as_nvidias_legend_orders_them():
    order = ["NV18", "NV4", "PIX", "PXB", "PHB", "NODE", "SYS", "?"]
    assert sorted(order, key=link_rank) == order


def test_a_pair_on_one_host_bridge_beats_a_pair_across_bridges_or_numa_nodes():
    topology = recorded(MIXED)  # 1-2 and 3-4 on PHB, NODE between them, GPU 0 alone on NUMA 1
    assert best_group(topology, range(5), 2) == (1, 2)
    assert best_group(topology, [0, 2, 3, 4], 2) == (3, 4)
    assert best_group(topology, [0, 1, 3], 2) == (1, 3)  # NODE, not SYS to GPU 0
    assert best_group(topology, range(5), 4) == (1, 2, 3, 4)


def test_a_single_gpu_trial_takes_the_loner_and_keeps_the_pairs_whole():
    assert best_group(recorded(MIXED), range(5), 1) == (0,)


def test_on_a_two_numa_pcie_box_a_group_stays_on_one_numa_node():
    for name in (RTX4090, L40S):
        topology = recorded(name)
        half = len(topology.gpus) // 2
        assert best_group(topology, topology.gpus, half) == tuple(range(half))
        assert {topology.numa[g] for g in best_group(topology, topology.gpus, 2)} == {0}
    # NUMA 0 half taken: a TP4 trial gets all of NUMA 1, not 2+2 across the SMP link.
    assert best_group(recorded(RTX4090), [2, 3, 4, 5, 6, 7], 4) == (4, 5, 6, 7)


def test_on_nvlink_all_to_all_the_numa_nodes_decide_and_the_best_fit_keeps_a_quad_whole():
    topology = recorded(H100)
    assert best_group(topology, range(8), 4) == (0, 1, 2, 3)
    assert best_group(topology, range(1, 8), 4) == (4, 5, 6, 7)
    # 4 and 7 busy: a TP2 trial takes 5-6 on NUMA 1, leaving NUMA 0's four for a TP4 trial.
    assert best_group(topology, [0, 1, 2, 3, 5, 6], 2) == (5, 6)


def test_too_few_free_gpus_is_none():
    assert best_group(recorded(PHB), [0, 1], 3) is None


def test_the_pool_packs_by_topology_when_it_knows_it_and_by_ids_otherwise():
    topology = recorded(MIXED)
    assert pack(tuple(range(5)), set(), 2) == (0, 1)  # the id rule: across NUMA nodes here
    assert pack(tuple(range(5)), set(), 2, topology) == (1, 2)  # one host bridge
    assert pack(tuple(range(5)), {1}, 2, topology) == (3, 4)
    # Ids the matrix does not cover (a pool of ids the matrix never saw): the id rule.
    assert pack((8, 9), set(), 2, topology) == (8, 9)


def test_with_topology_reads_the_matrix_for_gpu_pools_only(tmp_path):
    text = (DATA / H100).read_text()
    assert with_topology(Pool.of_gpus(8), text).topology is not None
    assert with_topology(Pool.of_gpus(8), None).topology is None
    assert with_topology(Pool.of_cpus([0, 1]), text).topology is None
    leases = Leases(with_topology(Pool.of_gpus(8), text), directory=tmp_path, owner="me")
    assert leases.acquire(4, "a") == (0, 1, 2, 3)
    assert leases.acquire(2, "b") == (4, 5)
    assert leases.acquire(2, "c") == (6, 7)


def test_the_report_states_how_the_pool_packed():
    assert _packing_text((DATA / H100).read_text()) == (
        "by topology: NV18 between all 8 GPUs; NUMA node 0: GPU 0-3, node 1: GPU 4-7")
    assert "NODE (0-1 2-3), SYS" in _packing_text((DATA / L40S).read_text())
    assert _packing_text(None).startswith("by aligned GPU ids")


def test_describe_names_each_link_kind_once():
    assert describe(recorded(PHB)) == "PHB between all 4 GPUs; NUMA node 0: GPU 0-3"


def test_one_h200_as_driver_580_prints_it_with_terminal_escapes():
    # Recorded on a one-GPU H200 (driver 580.159.04): the header is underlined with ANSI escapes even
    # through a pipe, and the matrix has one cell. Before: no GPU matrix found, no topology for the pool.
    text = (DATA / "topo-m-1x-h200.txt").read_text()
    assert "\x1b[4m" in text
    topo = parse_topo_matrix(text)
    assert topo is not None and topo.gpus == (0,) and topo.links == {} and topo.numa == {0: 0}
    assert describe(topo) == "one GPU (0); NUMA node 0: GPU 0"
    assert with_topology(Pool.of_gpus((0,)), text).topology == topo
