"""The quickstart under `launcher: docker`, as a user runs it, on a real dockerd:
experiments/quickstart-docker.yaml (with the 8 MB model and a short workload) completes 3 trials, records
each container in MLflow and leaves no container behind; a tuner killed mid-trial leaves its container,
and the rerun removes it (and only its study's) before the next trial and records the killed trial as
interrupted; a missing image is one error line before anything is written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from mlflow.tracking import MlflowClient

from autotuner.tracking import default_tracking_uri
from tests.support import container_guards

pytestmark = [pytest.mark.docker, pytest.mark.engine]

REPO = Path(__file__).resolve().parents[2]


def experiment(tmp_path: Path, model: Path, image: str, name: str, num_prompts: int = 8) -> Path:
    """experiments/quickstart-docker.yaml with the tiny model, a short workload and its own study name."""
    data = yaml.safe_load((REPO / "experiments" / "quickstart-docker.yaml").read_text())
    assert data["launcher"] == "docker"
    data["name"] = name
    data["model"]["path"] = str(model)
    data["search_space"] = str(REPO / "search_spaces" / "llamacpp.yaml")
    data["docker"]["image"] = image
    data["workload"].update(num_prompts=num_prompts, input_len=16, output_len=16, warmup_requests=2)
    data["load"] = {"max_concurrency": [4]}
    data["startup_timeout_s"] = 30
    data["confirm"] = {"top_k": 0}
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def cli(*args: str, cwd: Path, wait: bool = True, timeout: float = 240):
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "COLUMNS": "200"}
    argv = [sys.executable, "-m", "autotuner.cli", *args]
    if not wait:
        return subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def containers(client, study: str, *more_labels: str) -> list:
    """The study's containers, running or not (a label filter without a value matches its presence)."""
    return client.containers.list(all=True, filters={"label": [f"autotuner.study={study}", *more_labels]})


def test_quickstart_docker_runs_three_trials_records_containers_and_leaves_none(
        tmp_path, tiny_model, engine_image, docker_client):
    study = f"quickstart-docker-{os.getpid()}"
    experiment(tmp_path, tiny_model, engine_image, study)
    out = cli("run", "--experiment", "exp.yaml", "--trials", "3", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "[trial 3/3 · #2]" in out.stderr
    assert f"Best trials of study '{study}'" in out.stdout

    trials = optuna.load_study(study_name=study, storage=f"sqlite:///{tmp_path}/autotuner.db").get_trials()
    assert len(trials) == 3
    baseline = trials[0].user_attrs
    assert baseline["baseline"] and trials[0].state == optuna.trial.TrialState.COMPLETE, (
        baseline.get("failure_class"), baseline.get("failure_reason"), baseline.get("log_tail"))
    assert "--model /models/" in trials[0].user_attrs["command"]  # the server saw the mounted model

    client = MlflowClient(default_tracking_uri(tmp_path / "mlruns"))
    exp = client.get_experiment_by_name(study)
    runs = client.search_runs([exp.experiment_id], "tags.`autotuner.role` = 'trial'")
    assert len(runs) == 3
    image_id = docker_client.images.get(engine_image).id
    container_ids = set()
    for run in runs:
        tags = run.data.tags
        assert tags["autotuner.launcher"] == "docker"
        assert tags["autotuner.docker.image"] == engine_image
        assert tags["autotuner.docker.image_digest"] == image_id == tags["autotuner.docker.image_id"]
        assert tags["autotuner.engine_version"] != "unknown"  # read from the image
        container_ids.add(tags["autotuner.docker.container_id"])
        names = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"docker-run.txt", "command.txt", "server.log"} <= names
        docker_run = Path(client.download_artifacts(run.info.run_id, "docker-run.txt", str(tmp_path))).read_text()
        assert docker_run.splitlines()[-1].startswith("docker run --rm --init -p 127.0.0.1:")
    assert len(container_ids) == 3
    assert containers(docker_client, study) == []  # every container it started is gone


def test_a_container_a_killed_tuner_left_is_removed_by_the_rerun_first(
        tmp_path, tiny_model, engine_image, docker_client):
    # A killed tuner's container guard removes its container (test_docker_launcher.py); where it could
    # not (killed too, here; the daemon unreachable at that moment), the rerun of the study removes it.
    from autotuner.config import DockerConfig
    from autotuner.engines._base import LaunchContext
    from autotuner.engines.llamacpp import LlamaCppEngine
    from autotuner.launchers._base import free_port
    from autotuner.launchers.docker import DockerLauncher

    study = f"killed-{os.getpid()}"
    experiment(tmp_path, tiny_model, engine_image, study, num_prompts=100000)  # a trial that lasts
    tuner = cli("run", "--experiment", "exp.yaml", "--trials", "2", cwd=tmp_path, wait=False)
    try:
        deadline = time.monotonic() + 60
        while not (started := containers(docker_client, study, "autotuner.trial")):
            assert tuner.poll() is None and time.monotonic() < deadline, "no trial container appeared"
            time.sleep(0.1)
        time.sleep(1.0)  # into the trial
        guards = container_guards(started[0].id)
        assert guards, "the container has no guard"
        for pid in guards:
            os.kill(pid, signal.SIGKILL)
    finally:
        tuner.send_signal(signal.SIGKILL)
        tuner.wait()
    time.sleep(2.0)  # time enough for a guard to act, had one been left
    [stale] = containers(docker_client, study)
    assert stale.status == "running"  # the daemon keeps it: neither the tuner nor its guard could stop it

    # Another study's container on the same daemon must survive the rerun.
    other = DockerLauncher(DockerConfig(image=engine_image), model_path=tiny_model)
    spec = LlamaCppEngine().build({"threads": 1}, other.context(LaunchContext(tiny_model, "tiny", free_port())))
    bystander = other.start(spec, tmp_path / "other.log", {"autotuner.study": f"{study}-other"})
    try:
        experiment(tmp_path, tiny_model, engine_image, study, num_prompts=8)
        out = cli("run", "--experiment", "exp.yaml", "--trials", "1", cwd=tmp_path)
        assert out.returncode == 0, out.stderr[-3000:]
        note = f"removed 1 engine(s) left by an interrupted run: {stale.short_id}"
        assert note in out.stderr
        assert out.stderr.index(note) < out.stderr.index("[trial 1/1")  # before the next trial
        assert containers(docker_client, study) == []
        assert other.is_running(bystander)
        # The killed trial is recorded as interrupted, so the baseline it was running runs again.
        trials = optuna.load_study(study_name=study, storage=f"sqlite:///{tmp_path}/autotuner.db").get_trials()
        assert [t.state.name for t in trials] == ["FAIL", "COMPLETE"]
        assert trials[0].user_attrs["failure_class"] == "interrupted"
        assert trials[0].user_attrs["baseline"] and trials[1].user_attrs["baseline"]
    finally:
        other.stop(bystander)


def test_missing_image_exits_2_with_one_line_before_writing_anything(tmp_path, tiny_model, docker_client):
    experiment(tmp_path, tiny_model, "autotuner/no-such-image:0", f"missing-{os.getpid()}")
    before = set(tmp_path.iterdir())
    out = cli("run", "--experiment", "exp.yaml", "--trials", "1", cwd=tmp_path)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("error: exp.yaml: field 'docker.image': 'autotuner/no-such-image:0' is not on")
    assert set(tmp_path.iterdir()) == before  # no study database, no mlruns/, no results/
