"""What a trial asks of a Ray cluster, and whether the cluster can give it: the pure rules of
executors/placement.py, and the study storage every node must read the same way."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autotuner.executors import placement
from autotuner.executors.placement import Need, Node
from tests.support import REPO


def nodes(*shapes: tuple[float, float]) -> list[Node]:
    return [Node(id=f"n{i}" + "0" * 8, address=f"10.0.0.{i}", cpus=c, gpus=g) for i, (c, g) in enumerate(shapes)]


def test_a_gpu_config_asks_for_its_gpus_and_one_cpu_on_one_node():
    cluster = nodes((64, 8), (64, 8))
    assert placement.need(4, None, cluster, on_gpus=True) == Need(cpus=1.0, gpus=4)
    assert placement.need(0, None, cluster, on_gpus=True) == Need(cpus=1.0, gpus=1)  # the engine's default: one


def test_a_cpu_config_asks_for_its_threads_or_a_whole_node():
    cluster = nodes((2, 0), (8, 0))
    assert placement.need(0, 1, cluster, on_gpus=False) == Need(cpus=1.0, gpus=0)
    assert placement.need(0, None, cluster, on_gpus=False) == Need(cpus=8.0, gpus=0)  # every core it sees


def test_a_launch_no_node_holds_is_named_with_the_nodes_it_saw():
    cluster = nodes((64, 8), (64, 4))
    assert placement.unplaceable(Need(cpus=1, gpus=8), cluster) is None
    why = placement.unplaceable(Need(cpus=1, gpus=16), cluster)
    assert why is not None and "16 GPU(s)" in why and "10.0.0.0" in why and "10.0.0.1" in why
    assert placement.ONE_NODE in why  # more GPUs than any one node has, of an engine that stays on one
    assert "no live node" in (placement.unplaceable(Need(cpus=1, gpus=0), []) or "")


def test_a_launch_wider_than_every_node_spreads_over_the_fewest_nodes_that_hold_it():
    a, b, c = cluster = nodes((64, 8), (64, 4), (64, 8))
    sixteen = Need(cpus=1, gpus=16)
    assert placement.spread_nodes(Need(cpus=1, gpus=8), cluster) is None  # one node holds it: no spread
    assert placement.spread_nodes(sixteen, cluster) == [a, c]  # the most GPUs first
    assert placement.spread_nodes(Need(cpus=1, gpus=12), cluster) == [a, c]
    assert placement.spread_nodes(Need(cpus=1, gpus=21), cluster) is None  # 20 in all
    assert placement.spread_nodes(Need(cpus=128, gpus=16), cluster) is None  # no node has the serving CPUs
    # Where the engine spreads, the cluster's GPUs in all are what counts; where it does not, one node's.
    assert placement.unplaceable(sixteen, cluster, None) is None
    why = placement.unplaceable(Need(cpus=1, gpus=24), cluster, None) or ""
    assert "spread over nodes: 24 GPU(s); the cluster has 20" in why
    assert placement.ONE_NODE in (placement.unplaceable(sixteen, cluster) or "")
    # The serving process needs its CPUs on a GPU node: the one with the most GPUs that has them.
    small_a = Node(id="s" + "0" * 9, address="10.0.0.9", cpus=0.5, gpus=8)
    assert placement.spread_nodes(sixteen, [small_a, b, c]) == [c, small_a]
    busy = [Node(id=f"b{i}" + "0" * 8, address=f"10.0.1.{i}", cpus=0.5, gpus=8) for i in range(3)]
    assert "no node with GPUs has the 1 CPU(s) its serving process asks" in (placement.unplaceable(sixteen, busy, None) or "")


def test_vllm_spreads_a_config_but_not_its_data_parallel_engines():
    from autotuner.engines._base import get_engine

    vllm = get_engine("vllm")
    assert vllm.spread_problem({"parallel_layout": "TP8xPP2"}) is None
    assert "data_parallel_size 2" in (vllm.spread_problem({"parallel_layout": "TP8xDP2"}) or "")
    assert "data_parallel_size 2" in (vllm.spread_problem({}, ["--data-parallel-size", "2"]) or "")
    assert vllm.classify_failure("ValueError: Current node has no GPU available. current_node_resource={}")[0] == \
        "gpus-busy"


def test_only_vllm_as_processes_spreads_over_nodes():
    from autotuner.config import load_experiment
    from autotuner.engines._base import get_engine

    cfg = load_experiment(REPO / "experiments/quickstart.yaml").config
    assert placement.spread_refused(get_engine("vllm"), cfg) is None
    assert "only vLLM spreads over nodes" in (placement.spread_refused(get_engine("sglang"), cfg) or "")
    in_docker = cfg.model_copy(update={"launcher": "docker"})
    assert "runs as processes" in (placement.spread_refused(get_engine("vllm"), in_docker) or "")


def test_a_retry_stays_off_the_lost_node_and_its_address_while_another_node_holds_it():
    a, b, c = nodes((64, 8), (64, 8), (64, 4))
    back = Node(id="back" + "0" * 8, address=a.address, cpus=64, gpus=8)  # a's raylet again, a new id
    lost = Node(id=a.id, address=a.address, cpus=0, gpus=0)
    one, eight = Need(cpus=1, gpus=1), Need(cpus=1, gpus=8)
    assert placement.avoiding(lost, one, [back, b, c]) == sorted([a.id, back.id])
    assert placement.avoiding(lost, eight, [back, b, c]) == sorted([a.id, back.id])  # b holds 8
    assert placement.avoiding(lost, eight, [back, c]) == [a.id]  # only the address holds 8: its new id is kept
    assert placement.avoiding(lost, one, [c]) == [a.id]  # a dead id: nothing is lost by avoiding it
    assert placement.avoiding(lost, eight, [c]) == []  # nothing holds it (the executor says why, not here)
    assert placement.avoiding(lost, eight, [back]) == [a.id]
    assert placement.avoiding(None, one, [a, b]) == []


def test_a_cpu_launch_asks_for_the_memory_its_engine_holds_a_gpu_launch_none():
    from autotuner.config import load_experiment
    from autotuner.engines._base import get_engine

    cfg = load_experiment(REPO / "experiments/quickstart.yaml").config
    llama, cluster, gib = get_engine("llamacpp"), nodes((8, 0)), placement.GIB
    footprint = (2 * gib, 8192)  # 2 GiB of weights, 8 KiB of KV a token
    assert placement.config_need(llama, cfg, {}, cluster, footprint).memory == 2 * gib  # its own context: unknown
    assert placement.config_need(llama, cfg, {"ctx_size": 4096}, cluster, footprint).memory == 2 * gib + 4096 * 8192
    assert placement.config_need(llama, cfg, {}, cluster, None).memory == 0  # an unreadable model asks none
    vllm = get_engine("vllm")
    assert placement.config_need(vllm, cfg, {"cpu_kvcache_space_gb": 2}, cluster, footprint).memory == 4 * gib
    # Sized outside the space, in the experiment's env or engine_args: the launch holds it all the same.
    in_env = cfg.model_copy(update={"env": {"VLLM_CPU_KVCACHE_SPACE": "3"}})
    assert placement.config_need(vllm, in_env, {}, cluster, footprint).memory == 5 * gib
    in_args = cfg.model_copy(update={"engine_args": ["-c", "1024"]})
    assert placement.config_need(llama, in_args, {"ctx_size": 4096}, cluster, footprint).memory == 2 * gib + 1024 * 8192
    on_gpus = cfg.model_copy(update={"hardware": cfg.hardware.model_copy(update={"gpus": 1})})
    assert placement.config_need(vllm, on_gpus, {}, nodes((8, 8)), footprint).memory == 0


def test_memory_binds_where_a_node_declares_it():
    big, small = (Node("a" * 8, "10.0.0.1", 16, 0, memory=64 * placement.GIB),
                  Node("b" * 8, "10.0.0.2", 16, 0, memory=6 * placement.GIB))
    want = Need(cpus=1, gpus=0, memory=8 * placement.GIB)
    assert placement.holds(big, want) and not placement.holds(small, want)
    assert placement.trials_at_once(want, [big, small]) == 8  # 64 GiB / 8 before 16 CPUs / 2
    why = placement.unplaceable(Need(cpus=2, gpus=0, memory=100 * placement.GIB), [big, small])
    assert why is not None and "100.0 GiB of memory" in why and "64.0 GiB" in why
    undeclared = Node("c" * 8, "10.0.0.3", 16, 0)
    assert not placement.holds(undeclared, want)  # Ray gives no memory where a node declares none
    assert placement.holds(undeclared, Need(cpus=1, gpus=0))


@pytest.mark.parametrize(("want", "expected"), [
    (Need(cpus=1, gpus=1), 16),   # a GPU each: every GPU of both nodes
    (Need(cpus=1, gpus=8), 2),    # a node each
    (Need(cpus=1, gpus=3), 4),    # two per node, two GPUs left idle on each
    (Need(cpus=40, gpus=1), 2),   # CPUs bind first
])
def test_trials_at_once_fills_each_node_on_its_own(want, expected):
    assert placement.trials_at_once(want, nodes((64, 8), (64, 8))) == expected


def test_a_relative_sqlite_storage_becomes_absolute_for_the_nodes(tmp_path, monkeypatch):
    from autotuner.executors.ray import absolute_storage

    monkeypatch.chdir(tmp_path)
    assert absolute_storage("sqlite:///autotuner.db") == f"sqlite:///{Path(tmp_path).resolve()}/autotuner.db"
    for kept in ("sqlite:////abs/x.db", "postgresql://u@h/db", "sqlite:///:memory:"):
        assert absolute_storage(kept) == kept


def test_a_task_in_another_folder_opens_the_drivers_study(tmp_path, monkeypatch):
    """A Ray task's working folder is not the driver's: the experiment the nodes get (on_cluster) must
    name the study the driver made, wherever it is read from."""
    import optuna

    from autotuner.config import load_experiment
    from autotuner.executors.ray import on_cluster

    repo = Path(__file__).resolve().parents[2]
    (tmp_path / "driver").mkdir()
    (tmp_path / "node").mkdir()
    monkeypatch.chdir(tmp_path / "driver")
    exp = load_experiment(repo / "experiments" / "quickstart-ray.yaml")
    assert not exp.config.study.storage.startswith("sqlite:////")  # relative, as users write it
    optuna.create_study(study_name="s", storage=exp.config.study.storage).set_user_attr("made_by", "driver")
    shared = on_cluster(exp).config.study.storage
    monkeypatch.chdir(tmp_path / "node")
    seen = optuna.load_study(study_name="s", storage=shared)
    assert seen.user_attrs == {"made_by": "driver"}
    assert not (tmp_path / "node" / "autotuner-ray.db").exists()


def test_trials_in_flight_keep_four_rounds_of_results_for_the_sampler_unless_told():
    cluster = nodes(*[(64, 8)] * 8)  # 64 GPUs: 64 one-GPU launches fit side by side
    one = Need(cpus=1, gpus=1)
    assert placement.trials_in_flight(one, cluster, trials=64) == 16  # a quarter of the budget
    assert placement.trials_in_flight(one, cluster, trials=1000) == 64  # what the nodes hold
    assert placement.trials_in_flight(Need(cpus=1, gpus=8), cluster, trials=100) == 8
    assert placement.trials_in_flight(one, cluster, trials=3) == 1
    assert placement.trials_in_flight(one, cluster, trials=64, told=40) == 40  # ray.trials_at_once
    assert placement.trials_in_flight(one, cluster, trials=10, told=40) == 10  # never more than asked


def test_the_node_a_retry_stays_off_is_found_through_a_retry_that_was_interrupted():
    import optuna

    from autotuner.core import record
    from autotuner.executors.ray import ADDRESS_TAG, NODE_LOST, NODE_TAG, RayTrialExecutor

    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())

    def failed(failure: str, retry_of: int | None = None, tags: dict[str, str] | None = None) -> None:
        trial = study.ask()
        trial.set_user_attr(record.FAILURE_CLASS, failure)
        if retry_of is not None:
            trial.set_user_attr(record.RETRY_OF, retry_of)
        if tags:
            trial.set_user_attr(record.LAUNCH_TAGS, tags)
        study.tell(trial, state=optuna.trial.TrialState.FAIL)

    failed(NODE_LOST, tags={NODE_TAG: "dead" * 4, ADDRESS_TAG: "10.0.0.7"})  # 0: lost with its node
    failed("interrupted", retry_of=0)  # 1: its retry, killed with the driver
    failed("server_crash")  # 2
    failed("interrupted", retry_of=2)  # 3

    def retry_of(number: int) -> optuna.Trial:
        trial = study.ask()
        trial.set_user_attr(record.RETRY_OF, number)
        return trial

    lost = RayTrialExecutor._lost_node(retry_of(1))
    assert lost is not None and (lost.id, lost.address) == ("dead" * 4, "10.0.0.7")
    assert RayTrialExecutor._lost_node(retry_of(0)) == lost
    assert RayTrialExecutor._lost_node(retry_of(3)) is None  # not a node's loss at the chain's start
    assert RayTrialExecutor._lost_node(study.ask()) is None  # no retry


def test_a_study_whose_configs_may_spread_over_nodes_runs_one_trial_at_a_time():
    from types import SimpleNamespace

    from autotuner.compose import ray_workers
    from autotuner.config import load_experiment

    cfg = load_experiment(REPO / "experiments/quickstart.yaml").config
    cluster = nodes((64, 8), (64, 8))

    def driver(gpus: int, refused: str | None, told: int | None = None) -> SimpleNamespace:
        exp_cfg = cfg.model_copy(update={"hardware": cfg.hardware.model_copy(update={"gpus": gpus}),
                                         "ray": cfg.ray.model_copy(update={"trials_at_once": told})})
        executor = SimpleNamespace(nodes=cluster, spread_refused=refused, need_of=lambda _: Need(cpus=1, gpus=1))
        return SimpleNamespace(cfg=exp_cfg, executor=executor)

    at_once, why = ray_workers(driver(16, None), 100)  # type: ignore[arg-type]
    assert at_once == 1 and "configs may spread over nodes (hardware.gpus 16, nodes of at most 8 GPU(s))" in why
    assert ray_workers(driver(8, None), 100) == (16, "")  # type: ignore[arg-type]  # every config fits a node
    assert ray_workers(driver(16, "sglang"), 100) == (16, "")  # type: ignore[arg-type]  # none spreads
    assert ray_workers(driver(16, None, told=4), 100) == (4, "")  # type: ignore[arg-type]  # as told
    at_once, why = ray_workers(driver(16, None), 100, parallel=3)  # type: ignore[arg-type]  # --parallel decides
    assert at_once == 3 and why.startswith(", as --parallel says (it would run 1: configs may spread"), why
    assert ray_workers(driver(8, None), 100, parallel=16) == (16, "")  # type: ignore[arg-type]  # the same: no note


def test_a_winner_that_ran_spread_over_nodes_is_exported_as_it_ran_a_pod_a_node_and_never_as_one_pod():
    from autotuner.config import load_experiment
    from autotuner.engines._base import get_engine
    from autotuner.report.export import ExportError
    from autotuner.report.summary import TrialRow
    from autotuner.tracking.artifacts import winner_text

    exp, vllm = load_experiment(REPO / "experiments/vllm-cpu.yaml"), get_engine("vllm")

    def text(fmt: str, tags: dict[str, str]) -> str:
        row = TrialRow(number=3, value=1.0, params={}, baseline=False, metrics={}, launch_tags=tags)
        return winner_text(fmt, vllm, exp, row, None, "0.32.0")

    spread = {placement.SPREAD_TAG: "10.0.0.1:6379", placement.SPREAD_GPUS_TAG: "16",
              placement.SPREAD_NODE_GPUS_TAG: "8"}
    assert "--distributed-executor-backend ray" in text("args", spread)
    assert "RAY_ADDRESS=10.0.0.1:6379" in text("args", spread)
    assert "RAY_ADDRESS" not in text("args", {}) and "--distributed-executor-backend" not in text("args", {})
    for fmt, holder in (("docker", "one container"), ("helm-values", "the chart's one pod per engine")):
        with pytest.raises(ExportError, match=f"spread over the nodes of a Ray cluster, which {holder} cannot hold"):
            text(fmt, spread)
    assert "docker run" in text("docker", {})
    # k8s: a pod for each node, each with the serving node's GPUs; the group starts its own Ray cluster.
    group, service = yaml.safe_load_all(text("k8s", spread))
    assert group["kind"] == "LeaderWorkerSet" and group["spec"]["leaderWorkerTemplate"]["size"] == 2
    leader = group["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    assert leader["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert "--distributed-executor-backend ray" in leader["args"][0] and "10.0.0.1" not in yaml.safe_dump(group)
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "leader"
    with pytest.raises(ExportError, match="did not record their GPUs"):
        text("k8s", {placement.SPREAD_TAG: "10.0.0.1:6379"})
