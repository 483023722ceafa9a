"""Trials on a real Ray cluster of two nodes on this machine (scripts/start-ray.sh): the quickstart's
llama-server study placed as Ray tasks, two at once, confirmed on one node; and the worker node killed
mid-trial: that trial is recorded as `node-lost`, measured once more on the node left, and every trial is
in the study and in MLflow once. No engine outlives the study."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient
from optuna.storages import RetryFailedTrialCallback

from tests.support import REPO, launched, processes_naming, require

pytestmark = pytest.mark.engine


@contextmanager
def cluster(port: int, gpus: int = 0, env: dict[str, str] | None = None) -> Iterator[tuple[str, str]]:
    """A private two-node cluster (the scripts users run), stopped at the end: its address and folder.
    `gpus`: GPUs each node declares (none is here); `env`: more of the nodes' environment."""
    folder = tempfile.mkdtemp(prefix=f"atr-{port}-", dir="/tmp")  # Ray's socket paths must stay short
    env = {**os.environ, **(env or {}), "RAY_PORT": str(port), "AUTOTUNER_RAY_DIR": folder, "RAY_NODE_CPUS": "1",
           "RAY_NODE_GPUS": str(gpus)}
    try:
        out = subprocess.run([str(REPO / "scripts/start-ray.sh")], env=env, capture_output=True, text=True,
                             timeout=180)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == f"export RAY_ADDRESS=127.0.0.1:{port}"
        yield f"127.0.0.1:{port}", folder
    finally:
        stop = subprocess.run([str(REPO / "scripts/stop-ray.sh")], env=env, capture_output=True, text=True,
                              timeout=120)
        assert stop.returncode == 0 and not processes_naming(folder), f"a process of the cluster is left: {stop.stderr}"


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    """The cluster CI started (RAY_ADDRESS), else a private one for this module."""
    try:
        import ray  # noqa: F401
    except ImportError:
        require("Ray", "Ray is not installed: pip install -e '.[ray]'")
    if os.environ.get("RAY_ADDRESS"):
        yield os.environ["RAY_ADDRESS"]
        return
    with cluster(free_port()) as (address, _):
        yield address


@pytest.fixture(scope="module")
def gpu_cluster() -> Iterator[str]:
    """A private cluster whose two nodes declare a GPU each (none is here); vLLM's python on the nodes is
    this one (the kernel stage's stand-in tuner runs with it)."""
    with cluster(free_port(), gpus=1, env={"AUTOTUNER_VLLM_PYTHON": sys.executable}) as (address, _):
        yield address


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parent_of(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        pid = parent_of(pid)
        if pid == ancestor:
            return True
    return False


def write_study(tmp_path: Path, model: Path, *, num_prompts: int, confirm: str, extra: str = "") -> Path:
    # One thread a launch, on nodes of one CPU each (RAY_NODE_CPUS=1): the two nodes share this machine's
    # 2 cores, and two llama-servers of 2 threads each on them ran 10-17x slower than one alone.
    (tmp_path / "space.yaml").write_text("engine: llamacpp\nparams:\n  parallel: {type: int, low: 1, high: 8}\n"
                                         "  batch_size: {type: categorical, choices: [128, 512, 2048]}\n"
                                         "  threads: {type: categorical, choices: [1]}\n")
    path = tmp_path / "exp.yaml"
    path.write_text(
        f"name: on-ray\nengine: llamacpp\nexecutor: ray\nmodel: {{path: {model}}}\nsearch_space: space.yaml\n"
        f"workload: {{num_prompts: {num_prompts}, input_len: 16, output_len: 32, warmup_requests: 0}}\n"
        "load: {max_concurrency: [2, 4]}\nstudy: {storage: 'sqlite:///autotuner.db', seed: 1}\n"
        f"stop: {{patience: 20}}\nconfirm: {confirm}\nstartup_timeout_s: 60\n{extra}")
    return path


def env_for(tmp_path: Path, llama_server: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "COLUMNS": "200",
            "AUTOTUNER_CACHE": str(tmp_path / "cache"), "AUTOTUNER_LLAMA_SERVER": llama_server}


def tuner_argv(exp: Path, address: str, tmp_path: Path, trials: int = 4) -> list[str]:
    return [sys.executable, "-m", "autotuner.cli", "run", "-e", str(exp), "--trials", str(trials), "--ray", address,
            "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db"]


def runs_by_trial(tmp_path: Path) -> list[int]:
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    experiment = client.get_experiment_by_name("on-ray")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    return sorted(int(r.data.tags["autotuner.trial"]) for r in runs if "autotuner.trial" in r.data.tags)


def test_a_study_runs_its_trials_as_tasks_on_both_nodes_and_confirms_on_one(tmp_path, tiny_model, llama_server,
                                                                           ray_address):
    exp = write_study(tmp_path, tiny_model, num_prompts=8, confirm="{top_k: 1, repeats: 1}")
    out = subprocess.run(tuner_argv(exp, ray_address, tmp_path, trials=8), cwd=tmp_path,
                         env=env_for(tmp_path, llama_server), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    assert "Ray cluster: 2 node(s)" in out.stderr
    assert "every node reaches the study's storage, the model and the engine" in out.stderr
    # One thread a launch, one CPU a node: 2 at once (8 trials: a quarter of them would allow 2).
    assert "2 trial(s) at once on the Ray cluster" in out.stderr
    trials = launched(optuna.load_study(study_name="on-ray", storage=f"sqlite:///{tmp_path}/autotuner.db").trials)
    assert len(trials) == 8 and all(t.state.name == "COMPLETE" for t in trials), \
        [(t.number, t.user_attrs.get("failure_reason")) for t in trials]
    nodes = {t.user_attrs["launch_tags"]["autotuner.ray_node"] for t in trials}
    assert len(nodes) == 2  # two at once, each a node's only CPU: both nodes ran trials
    assert runs_by_trial(tmp_path) == sorted(t.number for t in trials)
    summary = optuna.load_study(study_name="on-ray", storage=f"sqlite:///{tmp_path}/autotuner.db").user_attrs
    assert any(f"({n[:8]}:" in summary.get("confirmation_node", "") for n in nodes), summary.get("confirmation_node")
    assert "every launch on Ray node" in (tmp_path / "results" / "on-ray" / "report.md").read_text()
    # The worker that needed the quality reference while the baseline ran took (or waited for) its answers:
    # the defaults were not launched a second time to answer them (beside it, on this machine, both stalled).
    assert not list((tmp_path / "results" / "on-ray").glob("quality-reference-*"))
    assert not processes_naming(str(tiny_model)), "an engine outlived its trial"


def test_a_node_lost_mid_trial_is_recorded_and_its_trial_measured_again_elsewhere(tmp_path, small_model, llama_server):
    # No quality gate: the first launch on each node is a trial (the reference launch is not one).
    exp = write_study(tmp_path, small_model, num_prompts=24, confirm="{top_k: 0}",
                      extra="quality: off\nray: {trials_at_once: 2}\n")  # a trial on each node from the start
    with cluster(free_port()) as (address, folder):
        raylets = {p: Path(f"/proc/{p}/cmdline").read_bytes() for p in processes_naming(folder)
                   if b"raylet/raylet" in Path(f"/proc/{p}/cmdline").read_bytes()}
        worker_raylet, argv = next((p, a) for p, a in raylets.items() if b"autotuner-worker" in a)
        worker_node = argv.split(b"--node_id=")[1].split(b"\0")[0].decode()
        tuner = subprocess.Popen(tuner_argv(exp, address, tmp_path), cwd=tmp_path, env=env_for(tmp_path, llama_server),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 300
            while not any(descends_from(p, worker_raylet) for p in processes_naming(str(small_model))):
                assert tuner.poll() is None and time.monotonic() < deadline, "no trial reached the worker node"
                time.sleep(0.1)
            time.sleep(2)  # the engine is up and being measured
            os.kill(worker_raylet, signal.SIGKILL)  # the node is gone: its raylet, its workers, their engines
            _, err = tuner.communicate(timeout=900)
        finally:
            if tuner.poll() is None:
                tuner.kill()
    assert tuner.returncode == 0, err[-4000:]
    study = optuna.load_study(study_name="on-ray", storage=f"sqlite:///{tmp_path}/autotuner.db")
    trials = launched(study.trials)
    shown = [(t.number, t.state.name, t.user_attrs.get("failure_class"), t.user_attrs.get("retry_of")) for t in trials]
    lost = [t for t in trials if t.user_attrs.get("failure_class") == "node-lost"]
    assert len(lost) == 1, shown
    assert "the node running the trial (" in lost[0].user_attrs["failure_reason"]
    assert lost[0].user_attrs["launch_tags"]["autotuner.ray_node"] == worker_node  # told by the task, kept
    retry = [t for t in trials if t.user_attrs.get("retry_of") == lost[0].number]
    assert len(retry) == 1 and retry[0].state.name == "COMPLETE", shown
    assert retry[0].params == lost[0].params
    assert retry[0].user_attrs["launch_tags"]["autotuner.ray_node"] != worker_node  # elsewhere: the node left
    # Every trial once in the study (numbers without gaps or repeats) and once in MLflow; the rest measured.
    assert len(trials) == 4 and sum(t.state.name == "COMPLETE" for t in trials) == 3, shown
    assert sorted(t.number for t in study.trials) == list(range(len(study.trials)))
    assert runs_by_trial(tmp_path) == sorted(t.number for t in trials)
    assert "node-lost may be the machine, not the config: measuring it once more" in err
    assert "measured off the node that was lost" in err  # kept off it by a label selector on its node id
    assert not processes_naming(str(small_model)), "an engine outlived its node"


def test_the_driver_killed_mid_trial_leaves_no_engine_and_the_same_command_resumes(tmp_path, tiny_model,
                                                                                   llama_server, ray_address):
    model = tmp_path / "driver-killed.gguf"  # its own name: only this test's engines carry it
    model.write_bytes(tiny_model.read_bytes())
    exp = write_study(tmp_path, model, num_prompts=100000, confirm="{top_k: 0}",
                      extra="quality: off\nray: {trials_at_once: 2}\n")
    env = env_for(tmp_path, llama_server)
    with (tmp_path / "killed.err").open("w") as err:
        tuner = subprocess.Popen(tuner_argv(exp, ray_address, tmp_path, trials=2), cwd=tmp_path, env=env,
                                 stdout=subprocess.DEVNULL, stderr=err)
        try:
            deadline = time.monotonic() + 300
            while not processes_naming(str(model)):
                assert tuner.poll() is None and time.monotonic() < deadline, "no engine started"
                time.sleep(0.1)
            time.sleep(2)  # measuring
        finally:
            # SIGKILL, no handler runs: each worker (a session of its own) first, then the tuner that started them.
            for pid in [p for p in map(int, filter(str.isdigit, os.listdir("/proc"))) if parent_of(p) == tuner.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
            tuner.kill()
            tuner.wait(timeout=30)
    killed_err = (tmp_path / "killed.err").read_text()
    assert "stopping the trial's task" not in killed_err  # nothing stopped it gracefully: it was killed
    deadline = time.monotonic() + 60  # Ray ends a dead driver's tasks; each engine dies with its task
    while processes_naming(str(model)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not processes_naming(str(model)), "an engine outlived the driver that owned its task"

    exp.write_text(exp.read_text().replace("100000", "4"))
    out = subprocess.run(tuner_argv(exp, ray_address, tmp_path, trials=2), cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    assert "of a killed run: failed and queued again" in out.stderr, out.stderr[-4000:]
    study = optuna.load_study(study_name="on-ray", storage=f"sqlite:///{tmp_path}/autotuner.db")
    trials = launched(study.trials)
    shown = [(t.number, t.state.name, t.user_attrs.get("failure_class"), t.system_attrs) for t in trials]
    killed = [t for t in trials if t.state.name == "FAIL"]
    assert killed and all(t.user_attrs.get("failure_class") == "interrupted" for t in killed), shown
    for t in killed:  # each measured again, once, with its own config (Optuna's retry callback)
        again = [r for r in trials if RetryFailedTrialCallback.retried_trial_number(r) == t.number]
        assert len(again) == 1 and again[0].state.name == "COMPLETE" and again[0].params == t.params, shown
    assert not [t for t in study.trials if t.state.name == "RUNNING"], shown
    assert runs_by_trial(tmp_path) == sorted(t.number for t in trials)
    assert not processes_naming(str(model)), "an engine outlived the study"


def test_a_cluster_that_cannot_hold_the_defaults_is_one_clear_error_before_any_trial(tmp_path, tiny_model,
                                                                                      llama_server, ray_address):
    exp = write_study(tmp_path, tiny_model, num_prompts=8, confirm="{top_k: 0}", extra="hardware: {gpus: 1}\n")
    out = subprocess.run(tuner_argv(exp, ray_address, tmp_path), cwd=tmp_path, env=env_for(tmp_path, llama_server),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr[-3000:]
    assert "the Ray cluster cannot run the engine's defaults: needs 1 GPU(s) and 1 CPU(s) on one node" in out.stderr
    study = optuna.load_study(study_name="on-ray", storage=f"sqlite:///{tmp_path}/autotuner.db")
    assert study.trials == []


def test_the_gpu_preflight_runs_on_each_gpu_node_and_a_failing_node_stops_the_study_before_any_trial(
        tmp_path, tiny_model, llama_server, gpu_cluster):
    # Each node declares a GPU that is not there: the preflight, run on each node holding its GPU, finds no
    # driver on either, and the study stops naming both nodes (the path a node with a broken driver takes).
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has an NVIDIA driver: the check would pass here")
    exp = write_study(tmp_path, tiny_model, num_prompts=8, confirm="{top_k: 0}", extra="hardware: {gpus: 1}\n")
    out = subprocess.run(tuner_argv(exp, gpu_cluster, tmp_path), cwd=tmp_path, env=env_for(tmp_path, llama_server),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr[-3000:]
    assert "GPU preflight on each node with GPUs (on the node) ..." in out.stderr
    failed = [line for line in out.stderr.splitlines() if "GPU preflight (node " in line]
    assert len(failed) == 2, out.stderr[-3000:]
    assert all(line.endswith(", on this host) failed; no trial was started:") for line in failed)
    assert out.stderr.count("nvidia-smi sees no GPU") == 2, out.stderr[-3000:]
    study = optuna.load_study(study_name="on-ray", storage=f"sqlite:///{tmp_path}/autotuner.db")
    assert study.trials == []


def test_the_kernel_stage_runs_on_each_gpu_node_and_tunes_each_job_once_into_a_shared_cache(tmp_path, gpu_cluster):
    # The stage as check_cluster runs it: on both nodes at once, each holding its declared GPU, with the
    # stand-in tuner of the stage's unit tests (one job of six fails: "no GPU here"). The nodes share this
    # machine's disk, as a cluster's nodes share a cache folder: each job is tuned by one node, and the other
    # finds it done; the job that fails is tried on both. A trial's experiment on a node reads that cache.
    import ray

    from autotuner.engines._base import get_engine
    from autotuner.stages import kernel_stage, kernels
    from tests.unit.test_kernels_stage import (
        GLM5,
        STAND_IN_TUNER,
        model_dir,
        process_experiment,
        site_with,
        with_kernels,
    )

    script = tmp_path / "tuner.py"
    script.write_text(STAND_IN_TUNER)
    exp = with_kernels(process_experiment(GLM5, site_with(tmp_path, ray="")), model_dir(tmp_path, None), gpu="G",
                       engine_version="0.32.0", cache_dir=tmp_path / "kc", script=str(script), timeout_s=120)
    ray.init(address=gpu_cluster, namespace="autotuner-test", log_to_driver=False, logging_level="WARNING")
    try:
        said: list[tuple[str, str]] = []  # each line as the node said it, through the driver's queue
        from autotuner.executors import ray_nodes

        runs = ray_nodes.on_each_node(kernel_stage.on_node, exp, with_gpus=True, timeout_s=300,
                                   on_line=lambda node, line: said.append((node.id, line)))
    finally:
        ray.shutdown()
    assert len(runs) == 2 and all(run.error is None for run in runs), [run.error for run in runs]
    lines = [line for run in runs for line in run.value[0]]
    assert sorted(said) == sorted((run.node.id, line) for run in runs for line in run.value[0])
    assert [run.value[1] for run in runs] == [("G", "0.32.0")] * 2  # the key each node tuned under
    assert sum(": wrote " in line for line in lines) == 5, lines  # each job tuned once, by either node
    assert sum("tuned before, reused" in line for line in lines) == 5, lines
    assert sum("failed: the tuner wrote no config (no GPU here)" in line for line in lines) == 2, lines
    layout = {"parallel_layout": "TP4xPP2", "enable_expert_parallel": True}
    for key in (runs[0].value[1], None):  # the stage's key for the trial's node; a node that joined later
        env = kernels.trial_env(kernel_stage.for_node(exp, get_engine("vllm"), [0], key), get_engine("vllm"), layout)
        assert env.get("VLLM_TUNED_CONFIG_FOLDER") == str(tmp_path / "kc/vllm-0.32.0/G/tp4-ep4-auto"), env


def test_a_task_no_live_node_can_hold_is_cancelled_before_it_starts_not_left_waiting(tmp_path, ray_address,
                                                                                   monkeypatch):
    # The nodes that could hold a queued trial died while it waited (here: it asks a GPU no node declares):
    # without the check it would wait in Ray's queue forever.
    import ray

    from autotuner.config import load_experiment
    from autotuner.core.progress import Progress
    from autotuner.engines._base import get_engine
    from autotuner.executors import ray as on_ray
    from autotuner.executors.placement import Need
    from autotuner.launchers.process import ProcessLauncher

    monkeypatch.setattr(on_ray, "PENDING_CHECK_S", 1.0)
    ray.init(address=ray_address, namespace="autotuner-test", log_to_driver=False, logging_level="WARNING")
    try:
        executor = on_ray.RayTrialExecutor(load_experiment(REPO / "experiments/quickstart-ray.yaml"),
                                           engine=get_engine("llamacpp"), launcher=ProcessLauncher(tmp_path),
                                           binary=None, secrets={})
        queued = ray.remote(lambda: None).options(num_gpus=1, num_cpus=0).remote()
        t = time.monotonic()
        result = executor._wait(on_ray._Launch(queued, Need(cpus=0, gpus=1)), Progress(1, "output_tok_per_s"))
    finally:
        ray.shutdown()
    assert time.monotonic() - t < 30
    assert result.state == "FAIL" and result.failure_class == "node-lost" and result.transient, result.reason
    assert result.reason.startswith("no live node of the Ray cluster can hold it any more: needs 1 GPU(s)")


def spread_study(tmp_path: Path, startup_s: float = 120, num_prompts: int = 8, itl_s: float = 0.001) -> tuple[Path, Path]:
    """A vLLM experiment on Ray whose TP 2 needs both one-GPU nodes, run by the stand-in: it and its python."""
    model = tmp_path / "model"
    shutil.copytree(REPO / "tests/data/hf/llama-3.1-8b", model)
    python = tmp_path / "bin" / "python"  # what the vLLM adapter runs as `python -m vllm.entrypoints...`
    python.parent.mkdir()
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {REPO / 'tests/vllm_ray_stand_in.py'} \"$@\"\n")
    python.chmod(0o755)
    (tmp_path / "space.yaml").write_text("engine: vllm\nparams:\n  tensor_parallel_size: {type: categorical, "
                                         "choices: [1, 2]}\n")
    (tmp_path / "exp.yaml").write_text(
        f"name: spread\nengine: vllm\nexecutor: ray\nmodel: {{path: {model}, name: m}}\nsearch_space: space.yaml\n"
        f"hardware: {{gpus: 2}}\nworkload: {{num_prompts: {num_prompts}, input_len: 16, output_len: 8, "
        f"warmup_requests: 0}}\nenv: {{STAND_IN_ITL_S: '{itl_s}'}}\n"
        f"load: {{max_concurrency: [2]}}\nstudy: {{storage: 'sqlite:///{tmp_path}/s.db'}}\nquality: off\n"
        f"startup_timeout_s: {startup_s}\n")
    return tmp_path / "exp.yaml", python


def test_a_spread_launch_whose_gpus_another_job_holds_fails_as_gpus_busy_and_is_measured_again(tmp_path,
                                                                                             gpu_cluster):
    import ray

    from autotuner.config import load_experiment
    from autotuner.core.progress import Progress
    from autotuner.engines._base import get_engine
    from autotuner.executors import ray as on_ray
    from autotuner.launchers.process import ProcessLauncher

    exp, python = spread_study(tmp_path, startup_s=6)
    ray.init(address=gpu_cluster, namespace="autotuner-test", log_to_driver=False, logging_level="WARNING")
    try:
        holder = ray.remote(num_gpus=1, num_cpus=0)(type("Holder", (), {"ping": lambda self: 1})).remote()
        ray.get(holder.ping.remote())  # another job's actor holds one of the two GPUs
        executor = on_ray.RayTrialExecutor(load_experiment(exp), engine=get_engine("vllm"),
                                           launcher=ProcessLauncher(tmp_path / "p"), binary=str(python), secrets={})
        t = time.monotonic()
        result = executor.run({"tensor_parallel_size": 2}, trial=None, trial_dir=tmp_path / "t",
                              progress=Progress(1, "output_tok_per_s"), timings={}, label="busy")
        ray.kill(holder)
    finally:
        ray.shutdown()
    assert result.failure_class == "gpus-busy" and result.transient, result.reason
    assert "were never free at once in 6 s (free: 1, " in result.reason
    assert time.monotonic() - t < 60 and not processes_naming("vllm_ray_stand_in.py")  # no engine was started


def test_a_config_wider_than_every_node_spreads_its_engine_over_both_and_leaves_nothing(tmp_path, gpu_cluster):
    # Two nodes of one (declared) GPU each; a vLLM config of TP 2 needs both. vLLM's CPU build has no Ray
    # backend, so the engine is a stand-in that joins the cluster and places its workers as vLLM does
    # (tests/vllm_ray_stand_in.py); the rest is the real path: the executor, Ray's placement, the process
    # launcher on the node, the load generator.
    import ray
    from ray.util import placement_group_table

    from autotuner.config import load_experiment
    from autotuner.core.progress import Progress
    from autotuner.engines._base import get_engine
    from autotuner.executors import ray as on_ray
    from autotuner.launchers.process import ProcessLauncher

    path, python = spread_study(tmp_path)
    exp = load_experiment(path)
    ray.init(address=gpu_cluster, namespace="autotuner-test", log_to_driver=False, logging_level="WARNING")
    try:
        executor = on_ray.RayTrialExecutor(exp, engine=get_engine("vllm"), launcher=ProcessLauncher(tmp_path / "p"),
                                           binary=str(python), secrets={})
        result = executor.run({"tensor_parallel_size": 2}, trial=None, trial_dir=tmp_path / "t",
                              progress=Progress(1, "output_tok_per_s"), timings={}, label="spread")
        deadline = time.monotonic() + 60  # the engine's placement group ends with its process (its Ray job)
        while any(g["state"] != "REMOVED" for g in placement_group_table().values()) and time.monotonic() < deadline:
            time.sleep(0.5)
        groups = [g["state"] for g in placement_group_table().values()]
    finally:
        ray.shutdown()
    log = (tmp_path / "t" / "server.log").read_text()
    assert result.state == "COMPLETE", (result.reason, log[-3000:])
    assert result.level_metrics[0]["completed"] == 8
    # Both nodes hold a worker; the serving process runs beside the first; the engine joined this cluster.
    placed = re.search(r"serving node (\w+); workers on nodes \['(\w+)', '(\w+)'\]", log)
    assert placed and placed.group(2) != placed.group(3), log[-3000:]
    # The task's node holds a worker. (Not necessarily the node the stand-in reports as its own: with both
    # nodes' raylets at one address on this machine, Ray may attach its driver to either.)
    assert result.launch_tags["autotuner.ray_node"] in {placed.group(2), placed.group(3)}
    # The serving node's address in the cluster, told to vLLM (its own guess, the default route, may not be it).
    ip = result.launch_tags["autotuner.ray_node_address"]
    assert f"VLLM_HOST_IP {ip}\n" in log and f"VLLM_HOST_IP={ip} " in result.command
    port = gpu_cluster.rsplit(":", 1)[1]  # the cluster's GCS, at the address Ray gives it (not loopback)
    assert re.search(rf"RAY_ADDRESS \S+:{port},", log) and "backend ray" in log, log[:500]
    assert result.launch_tags["autotuner.ray_spread"].endswith(f":{port}")  # the winner's export spreads it too
    # ... and its Kubernetes export is a pod for each node, of the serving node's GPUs.
    assert (result.launch_tags["autotuner.ray_spread_gpus"], result.launch_tags["autotuner.ray_spread_node_gpus"]) \
        == ("2", "1")
    assert "--distributed-executor-backend ray" in result.command and re.search(rf"RAY_ADDRESS=\S+:{port} ",
                                                                                 result.command), result.command
    assert groups and set(groups) == {"REMOVED"}, groups  # nothing of the engine holds the GPUs after it
    assert not processes_naming("vllm_ray_stand_in.py")


def test_a_node_lost_under_a_spread_engine_is_node_lost_tagged_with_that_node_and_leaves_nothing(tmp_path):
    # Two one-GPU nodes of a private cluster (one is killed); a TP 2 launch spreads over both, served from
    # the head (the worker node has no CPU for the serving process; this test is the head's Ray driver).
    # The worker node is lost mid-measurement: the engine's worker there dies, the engine with it (as
    # vLLM's does), and the trial is the machine's (node-lost, measured once more), tagged with the lost
    # node, so the retry's serving process stays off it.
    import threading

    import ray
    from ray.util import placement_group_table

    from autotuner.config import load_experiment
    from autotuner.core.progress import Progress
    from autotuner.engines._base import get_engine
    from autotuner.executors import ray as on_ray
    from autotuner.launchers.process import ProcessLauncher

    path, python = spread_study(tmp_path, num_prompts=400, itl_s=0.05)  # about 80 s of measuring
    exp = load_experiment(path)
    with cluster(free_port(), gpus=1, env={"RAY_WORKER_CPUS": "0"}) as (address, folder):
        raylets = {p: Path(f"/proc/{p}/cmdline").read_bytes() for p in processes_naming(folder)
                   if b"raylet/raylet" in Path(f"/proc/{p}/cmdline").read_bytes()}
        ray.init(address=address, namespace="autotuner-test", log_to_driver=False, logging_level="WARNING")
        try:
            executor = on_ray.RayTrialExecutor(exp, engine=get_engine("vllm"), launcher=ProcessLauncher(tmp_path / "p"),
                                               binary=str(python), secrets={})
            out: dict[str, object] = {}
            run = threading.Thread(target=lambda: out.update(result=executor.run(
                {"tensor_parallel_size": 2}, trial=None, trial_dir=tmp_path / "t", progress=Progress(1, "output_tok_per_s"),
                timings={}, label="spread")))
            run.start()
            deadline = time.monotonic() + 180
            while not (any(g["state"] == "CREATED" for g in placement_group_table().values())
                       and processes_naming("vllm_ray_stand_in.py")):
                assert run.is_alive() and time.monotonic() < deadline, out
                time.sleep(0.2)
            time.sleep(5)  # serving, and measured
            stand_in = processes_naming("vllm_ray_stand_in.py")[0]
            other = next(p for p in raylets if not descends_from(stand_in, p))  # the node only a worker is on
            assert b"autotuner-worker" in raylets[other], "the engine was not served from the head"
            lost_node = raylets[other].split(b"--node_id=")[1].split(b"\0")[0].decode()
            os.kill(other, signal.SIGKILL)
            run.join(timeout=300)
        finally:
            ray.shutdown()
        result = out["result"]
        assert not processes_naming("vllm_ray_stand_in.py"), "the engine outlived its lost worker"
    log = (tmp_path / "t" / "server.log").read_text()
    assert "stand-in: a worker died" in log, log[-2000:]
    assert result.failure_class == "node-lost" and result.transient, (result.failure_class, result.reason)  # type: ignore[attr-defined]
    assert "was lost while the engine was spread over its nodes" in result.reason  # type: ignore[attr-defined]
    assert result.launch_tags["autotuner.ray_node"] == lost_node  # type: ignore[attr-defined]
