"""The device pool: how trials of different sizes are packed onto a node's GPUs (or CPU cores), and the
lease file that keeps processes on one node from ever being handed the same unit."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import time

import pytest

from autotuner.node.pool import Leases, Pool, PoolTooSmall, pack

EIGHT = tuple(range(8))


def test_a_tp2_trial_gets_an_aligned_pair_and_a_tp4_trial_an_aligned_quad():
    assert pack(EIGHT, set(), 2) == (0, 1)
    assert pack(EIGHT, {0}, 2) == (2, 3)  # not 1-2: that would split two pairs
    assert pack(EIGHT, {0, 1}, 4) == (4, 5, 6, 7)
    assert pack(EIGHT, {0, 5}, 4) == (1, 2, 3, 4)  # no aligned quad free: a contiguous run


def test_best_fit_keeps_big_blocks_whole():
    # GPU 2 busy: a TP1 trial takes 3 (beside the busy one), not 0, so 0-1 stays a pair and 4-7 a quad.
    assert pack(EIGHT, {2}, 1) == (3,)
    # 0-1 busy, 4-7 free: a TP2 trial takes 2-3 and leaves the quad for a TP4 trial.
    assert pack(EIGHT, {0, 1}, 2) == (2, 3)


def test_odd_sizes_take_a_contiguous_run_in_the_smallest_free_stretch():
    assert pack(EIGHT, set(), 3) == (0, 1, 2)
    assert pack(EIGHT, {3}, 3) == (0, 1, 2)  # 0-2 is a run of exactly 3; 4-7 stays whole
    assert pack(EIGHT, {0, 1, 2, 3, 4}, 3) == (5, 6, 7)


def test_fragmented_free_units_are_still_used_rather_than_wait_forever():
    assert pack(EIGHT, {1, 3, 5, 7}, 3) == (0, 2, 4)


def test_never_over_commits():
    assert pack(EIGHT, set(EIGHT) - {6}, 2) is None
    assert pack((0, 1), set(), 3) is None


def test_random_arrivals_and_departures_never_share_a_unit():
    rng = random.Random(7)
    held: list[tuple[int, ...]] = []
    for _ in range(2000):
        if held and rng.random() < 0.45:
            held.pop(rng.randrange(len(held)))
            continue
        need = rng.choice([1, 1, 2, 2, 4, 8, 3])
        busy = {u for units in held for u in units}
        got = pack(EIGHT, busy, need)
        if got is None:
            assert need > 8 - len(busy)  # refused only when too few units are free
            continue
        assert len(got) == need and not busy & set(got) and set(got) <= set(EIGHT)
        held.append(got)


def test_a_pool_of_non_contiguous_ids_is_packed_in_its_own_order():
    assert pack((2, 3, 6, 7), set(), 2) == (2, 3)
    assert pack((2, 3, 6, 7), {2}, 2) == (6, 7)


def test_leases_are_shared_through_the_file_and_released(tmp_path):
    pool = Pool.of_gpus(4)
    a, b = Leases(pool, tmp_path), Leases(pool, tmp_path)
    first = a.acquire(2, "study/trial-0001")
    second = b.acquire(2, "study/trial-0002")
    assert set(first).isdisjoint(second)
    waited = []
    with pytest.raises(InterruptedError):
        a.acquire(1, "study/trial-0003", waiting=waited.append, stop=lambda: True)
    assert waited == ["waiting for 1 GPU unit(s): 0 of 4 free"]
    b.release(second)
    assert a.acquire(2, "study/trial-0003") == second and len(a.held()) == 2
    a.release(second)
    assert [lease["label"] for lease in a.held()] == ["study/trial-0001"]


def test_a_dead_holders_lease_is_taken_back(tmp_path):
    pool = Pool.of_cpus([0, 1])
    dead = subprocess.run([sys.executable, "-c", "from autotuner.launchers._base import this_owner; "
                           "print(this_owner())"], capture_output=True, text=True, check=True).stdout.strip()
    leases = Leases(pool, tmp_path)
    leases.path.write_text(json.dumps({"leases": [{"units": [0, 1], "owner": dead, "label": "x"}],
                                       "queue": [{"ticket": "t", "owner": dead, "need": 1, "pool": [0, 1]}]}))
    assert leases.acquire(2, "mine") == (0, 1)


def test_a_trial_bigger_than_the_pool_is_refused_at_once(tmp_path):
    with pytest.raises(PoolTooSmall, match=r"needs 4 GPU unit\(s\), the pool has 2 \(GPUs 0,1\)"):
        Leases(Pool.of_gpus(2), tmp_path).acquire(4, "x")


def test_every_packing_of_a_small_node_is_disjoint_and_complete():
    for busy_bits in range(16):
        busy = {u for u in range(4) if busy_bits >> u & 1}
        for need in range(1, 5):
            got = pack((0, 1, 2, 3), busy, need)
            if need <= 4 - len(busy):
                assert got is not None and len(got) == need and not busy & set(got)
            else:
                assert got is None


def test_what_a_config_takes_from_the_pool():
    from autotuner.engines._base import get_engine

    vllm, llamacpp = get_engine("vllm"), get_engine("llamacpp")
    gpus = Pool.of_gpus(8)
    assert gpus.need(vllm.gpus_needed({"tensor_parallel_size": 2, "pipeline_parallel_size": 2}), None) == 4
    assert gpus.need(vllm.gpus_needed({"parallel_layout": "TP2xDP2"}), None) == 4
    assert gpus.need(vllm.gpus_needed({}), None) == 1
    # A parallel size fixed in the experiment's engine_args is what the launch gets: the lease covers it.
    assert vllm.gpus_needed({"max_num_seqs": 64}, ["--tensor-parallel-size", "2"]) == 2
    assert vllm.gpus_needed({"pipeline_parallel_size": 2}, ["--tensor-parallel-size=4"]) == 8
    sglang = get_engine("sglang")
    assert sglang.gpus_needed({"dp_size": 2}, ["--tp-size", "4"]) == 8
    assert sglang.infeasible({}, {"gpus": 4, "engine_args": ["--tp-size", "8"]})  # 8 GPUs of the 4 declared
    assert gpus.need(llamacpp.gpus_needed({}), None) == 8  # llama.cpp splits the model over every GPU it sees
    cores = Pool.of_cpus(range(16))
    assert cores.need(0, llamacpp.cpus_needed({"threads": 4, "threads_batch": 6})) == 6
    assert cores.need(0, llamacpp.cpus_needed({})) == 16  # llama.cpp's default: every core
    assert cores.need(0, llamacpp.cpus_needed({"threads": 64})) == 16


def test_first_come_first_served_so_a_big_trial_is_not_starved(tmp_path):
    import threading

    leases = Leases(Pool.of_gpus(2), tmp_path)
    small = leases.acquire(1, "tp1-running")
    got: dict[str, tuple[int, ...]] = {}
    big = threading.Thread(target=lambda: got.setdefault("tp2", leases.acquire(2, "tp2-waits")))
    big.start()
    deadline = time.monotonic() + 30
    while not leases.queued():  # the TP2 request is queued behind the running TP1
        assert time.monotonic() < deadline
        time.sleep(0.01)
    late: list[str] = []
    # A TP1 request that arrives later may not take the free GPU: the TP2 request is ahead of it.
    with pytest.raises(InterruptedError):
        leases.acquire(1, "tp1-late", waiting=late.append, stop=lambda: True)
    assert late == ["waiting for 1 GPU unit(s): 1 of 2 free, 1 request(s) ahead"]
    assert leases.queued() == ["tp2-waits"]  # giving up left the queue
    leases.release(small)
    big.join(timeout=10)
    assert got["tp2"] == (0, 1) and leases.queued() == []


def test_pools_that_share_no_unit_do_not_wait_for_each_other(tmp_path):
    low, high = Leases(Pool.of_gpus([0, 1]), tmp_path), Leases(Pool.of_gpus([2, 3]), tmp_path)
    held = low.acquire(2, "low-running")
    with pytest.raises(InterruptedError):  # queued behind the running one, then gives up...
        low.acquire(2, "low-waits", stop=lambda: True)
    import threading

    waiter = threading.Thread(target=lambda: low.acquire(1, "low-queued"), daemon=True)
    waiter.start()
    deadline = time.monotonic() + 30
    while low.queued() != ["low-queued"]:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert high.acquire(2, "high") == (2, 3)  # ...while a request on other GPUs goes ahead at once
    low.release(held)
    waiter.join(timeout=10)
    assert not waiter.is_alive()


def test_leases_are_per_host_files_in_a_node_local_folder(tmp_path, monkeypatch):
    import socket

    from autotuner.node.pool import default_dir

    monkeypatch.delenv("AUTOTUNER_POOL_DIR", raising=False)
    assert str(default_dir()).startswith(tempfile.gettempdir())
    monkeypatch.setenv("AUTOTUNER_POOL_DIR", str(tmp_path))
    assert Leases(Pool.of_gpus(2)).path == tmp_path / f"gpu-{socket.gethostname()}.json"


def test_a_pool_of_ids_is_aligned_on_the_ids_not_on_positions():
    pool = tuple(range(1, 8))  # GPU 0 is someone else's
    assert pack(pool, set(), 2) == (2, 3)
    assert pack(pool, set(), 4) == (4, 5, 6, 7)
    assert pack(pool, {4}, 4) == (1, 2, 3, 5)  # no run of four left: the lowest free ids


def _config(tmp_path, extra: str = ""):
    from autotuner.config import load_experiment

    (tmp_path / "s.yaml").write_text("engine: vllm\nparams:\n  max_num_seqs: {type: int, low: 8, high: 64}\n")
    (tmp_path / "exp.yaml").write_text("name: t\nengine: vllm\nmodel: {path: m}\nsearch_space: s.yaml\n" + extra)
    return load_experiment(tmp_path / "exp.yaml").config


def test_the_node_pool_is_the_gpus_the_user_allows(tmp_path):
    from autotuner.config import ConfigError
    from autotuner.node.pool import node_pool

    gpus = _config(tmp_path, "hardware: {gpus: 4}\n")
    assert node_pool(gpus, 1, None, environ={}).units == (0, 1, 2, 3)
    assert node_pool(gpus, 1, None, environ={"CUDA_VISIBLE_DEVICES": "4,5"}).units == (4, 5)
    # A confinement by UUID is refused: leasing by index would put trials on GPUs it excluded.
    with pytest.raises(ConfigError, match="CUDA_VISIBLE_DEVICES=GPU-1a2b names GPUs by UUID"):
        node_pool(gpus, 1, None, environ={"CUDA_VISIBLE_DEVICES": "GPU-1a2b"})
    by_uuid = _config(tmp_path, "hardware: {gpus: 1}\nlauncher: docker\ndocker: {image: x, gpus: [GPU-1a2b]}\n")
    with pytest.raises(ConfigError, match=r"docker.gpus: \['GPU-1a2b'\] names GPUs by UUID"):
        node_pool(by_uuid, 1, None, environ={})
    assert node_pool(gpus, 1, None, environ={"CUDA_VISIBLE_DEVICES": ""}).units == (0, 1, 2, 3)
    assert node_pool(gpus, 1, "6,7", environ={"CUDA_VISIBLE_DEVICES": "4,5"}).units == (6, 7)
    in_docker = _config(tmp_path, "hardware: {gpus: 2}\nlauncher: docker\ndocker: {image: x, gpus: [2, 3]}\n")
    assert node_pool(in_docker, 1, None, environ={}).units == (2, 3)
    cpu = _config(tmp_path)
    assert node_pool(cpu, 1, None, environ={}) is None  # one worker on a CPU node: nothing to share
    assert node_pool(cpu, 2, None, environ={}).kind == "cpu"
    with pytest.raises(ConfigError, match=r"^--gpus: '0,x' is not a list of GPU ids such as 0,1,2,3$"):
        node_pool(gpus, 1, "0,x")
    with pytest.raises(ConfigError, match=r"^--gpus: '1,1' must list distinct GPU ids"):
        node_pool(gpus, 1, "1,1")
