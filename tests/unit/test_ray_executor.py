"""What the Ray executor asks of Ray for a launch, without a cluster: the options of the trial's task
(Ray's own calls replaced by recorders; the real cluster runs in tests/e2e/test_ray.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotuner.config import load_experiment
from autotuner.core.executor import TrialResult
from autotuner.core.progress import Progress
from autotuner.engines._base import get_engine
from autotuner.executors import ray as on_ray
from autotuner.executors.placement import Node
from autotuner.launchers.process import ProcessLauncher
from tests.support import REPO

pytest.importorskip("ray")
NODES = [Node(id="a" * 56, address="10.0.0.1", cpus=4, gpus=2), Node(id="b" * 56, address="10.0.0.2", cpus=4, gpus=3)]


@pytest.fixture
def asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[on_ray.RayTrialExecutor, list[dict[str, Any]]]:
    """An executor of a vLLM experiment (up to 4 GPUs a trial) on two nodes of 2 and 3 GPUs, and the
    (options, job) of each task it submits."""
    (tmp_path / "space.yaml").write_text("engine: vllm\nparams:\n  tensor_parallel_size: {type: int, low: 1, high: 4}\n"
                                         "  data_parallel_size: {type: int, low: 1, high: 4}\n")
    (tmp_path / "exp.yaml").write_text(
        f"name: asks\nengine: vllm\nexecutor: ray\nmodel: {{path: {REPO / 'tests/data/hf/llama-3.1-8b'}}}\n"
        f"search_space: space.yaml\nhardware: {{gpus: 4}}\nstudy: {{storage: 'sqlite:///{tmp_path}/s.db'}}\n")
    monkeypatch.setattr(on_ray, "nodes", lambda: NODES)
    monkeypatch.setattr(on_ray, "_queue_here", lambda: object())
    monkeypatch.setattr(on_ray, "_group_ids", lambda: set())  # no cluster: Ray would start one of its own
    monkeypatch.setattr(on_ray, "_answering", lambda nodes: {n.id for n in nodes})
    tasks: list[dict[str, Any]] = []

    class Recorder:
        def __init__(self, options: dict[str, Any]):
            self.options = options

        def remote(self, job: on_ray.TrialJob) -> None:
            tasks.append({"options": self.options, "job": job})

    monkeypatch.setattr(on_ray, "_task", lambda options, progress: Recorder(options))
    monkeypatch.setattr(on_ray.RayTrialExecutor, "_wait",
                        lambda self, launch, progress: TrialResult("FAIL", failure_class="interrupted", reason="test"))
    executor = on_ray.RayTrialExecutor(load_experiment(tmp_path / "exp.yaml"), engine=get_engine("vllm"),
                                       launcher=ProcessLauncher(tmp_path / "p"), binary=None, secrets={})
    return executor, tasks


def run(executor: on_ray.RayTrialExecutor, params: dict[str, Any], tmp_path: Path, trial: Any = None) -> TrialResult:
    return executor.run(params, trial=trial, trial_dir=tmp_path / "t", progress=Progress(1, "output_tok_per_s"),
                        timings={}, label="x")


def test_a_launch_one_node_holds_asks_its_gpus_there(asked, tmp_path):
    executor, tasks = asked
    run(executor, {"tensor_parallel_size": 2}, tmp_path)
    (task,) = tasks
    assert task["options"]["num_gpus"] == 2 and "scheduling_strategy" not in task["options"]
    assert task["job"].spread == 0


def test_a_launch_wider_than_every_node_asks_no_gpu_on_the_node_with_the_most(asked, tmp_path):
    executor, tasks = asked
    run(executor, {"tensor_parallel_size": 4}, tmp_path)  # the model's 32 heads split 4 ways; 3 would not
    (task,) = tasks
    assert task["options"]["num_gpus"] == 0 and task["options"]["num_cpus"] == 1.0
    assert task["options"]["scheduling_strategy"].node_id == "b" * 56 and not task["options"]["scheduling_strategy"].soft
    assert task["job"].spread == 4  # the node's task waits for 4 free GPUs before it starts the engine
    # The confirmation's node, once known, wins: its launches all serve from there.
    executor.pin = "a" * 56
    run(executor, {"tensor_parallel_size": 4}, tmp_path)
    assert tasks[1]["options"]["scheduling_strategy"].node_id == "a" * 56 and tasks[1]["options"]["num_gpus"] == 0


def test_data_parallel_wider_than_a_node_is_infeasible_before_any_task(asked, tmp_path):
    executor, tasks = asked
    assert run(executor, {"data_parallel_size": 3}, tmp_path).failure_class == "interrupted"  # one node holds it
    result = run(executor, {"data_parallel_size": 4}, tmp_path)
    assert result.failure_class == "infeasible" and "data_parallel_size 4 spread over nodes" in result.reason
    assert len(tasks) == 1
