"""Many workers on one study, for real: worker processes on a PostgreSQL storage and an MLflow tracking
server, each launching real llama-servers. Every trial is run once and recorded once; a worker that is
killed mid-trial has its trial run again by one that lives."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.support import REPO, launched, processes_with_env

pytestmark = pytest.mark.engine


def _experiment(tmp_path: Path, model: Path, name: str, num_prompts: int) -> Path:
    space = tmp_path / "s.yaml"
    space.write_text((REPO / "search_spaces" / "llamacpp.yaml").read_text())
    exp = tmp_path / "exp.yaml"
    exp.write_text(f"""\
name: {name}
engine: llamacpp
model: {{path: {model}, name: tiny}}
search_space: s.yaml
workload: {{num_prompts: {num_prompts}, input_len: 16, output_len: 16, warmup_requests: 2}}
load: {{max_concurrency: [2, 4]}}
study: {{sampler: tpe, pruner: none, seed: 0}}
confirm: {{top_k: 1, repeats: 1}}
""")
    return exp


def _worker(tmp_path: Path, services: dict[str, str], *args: str, out: str) -> subprocess.Popen:
    # The unique folder in the environment lets the test find every process the worker started.
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "COLUMNS": "200", "AUTOTUNER_TEST_TAG": str(tmp_path),
           "AUTOTUNER_POOL_DIR": str(tmp_path / "pool")}  # not the node's: another run must not hold this test up
    return subprocess.Popen(
        [sys.executable, "-m", "autotuner.cli", "run", "--experiment", "exp.yaml", "--storage", services["storage"],
         "--tracking-uri", services["tracking_uri"], *args],
        cwd=tmp_path, env=env, stdout=(tmp_path / f"{out}.out").open("w"), stderr=(tmp_path / f"{out}.err").open("w"))


def _mlflow_trial_runs(services: dict[str, str], name: str) -> tuple[list, list]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(services["tracking_uri"])
    exp = client.get_experiment_by_name(name)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("autotuner.role") == "study"]
    trials = [r for r in runs if r.data.tags.get("autotuner.role") == "trial"]
    return parents, trials


def test_three_workers_share_one_study_on_postgresql_and_an_mlflow_server(tmp_path, tiny_model, llama_server, services):
    name = f"scale-{uuid.uuid4().hex[:8]}"
    _experiment(tmp_path, tiny_model, name, num_prompts=12)
    proc = _worker(tmp_path, services, "--trials", "9", "--parallel", "3", out="run")
    assert proc.wait(timeout=600) == 0, (tmp_path / "run.err").read_text()[-4000:]
    err = (tmp_path / "run.err").read_text()
    assert "3 workers on one study: w1 runs 3 trial(s), w2 runs 3 trial(s), w3 runs 3 trial(s)" in err
    assert all(f"[w{k} · trial 3/3 · #" in err for k in (1, 2, 3))

    study = optuna.load_study(study_name=name, storage=services["storage"])
    everything = study.get_trials()
    assert all(t.state.is_finished() for t in everything)
    trials = launched(everything)
    assert len(trials) == 9
    assert sum(bool(t.user_attrs.get("baseline")) for t in trials) == 1  # queued once, by one worker
    workers = {t.user_attrs["worker"] for t in trials}
    assert len(workers) == 3  # each worker ran trials of its own
    # No config measured twice by accident: each worker samples with its own seed, one worker at a time
    # queues an advisor's proposal, and a config another worker measures now is asked again. Only a retry
    # (a transient failure: a startup timeout, dropped requests) measures its trial's config once more.
    by_number = {t.number: t for t in trials}
    retries = [t for t in trials if t.user_attrs.get("retry_of") is not None]
    assert all(t.params == by_number[t.user_attrs["retry_of"]].params for t in retries)
    configs = [json.dumps(t.params, sort_keys=True) for t in trials if t.user_attrs.get("retry_of") is None]
    assert len(configs) == len(set(configs)), [
        (t.number, t.user_attrs.get("worker"), t.user_attrs.get("proposed_by"), t.datetime_start, t.params)
        for t in trials if configs.count(json.dumps(t.params, sort_keys=True)) > 1]
    # Every trial ran on cores leased from the pool, and every lease was given back.
    assert err.count("on CPU core") > len(trials)  # each launched trial, and the confirmation
    [leases] = (tmp_path / "pool").glob("cpu-*.json")
    assert json.loads(leases.read_text()) == {"leases": [], "queue": []}

    parents, runs = _mlflow_trial_runs(services, name)
    assert len(parents) == 1  # the workers started at once and agreed on one parent run
    per_trial = collections.Counter(r.data.tags["autotuner.trial"] for r in runs)
    assert per_trial == {str(t.number): 1 for t in trials}  # exactly one nested run per trial
    assert all(r.info.status != "RUNNING" for r in runs)
    assert all(r.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for r in runs)
    assert study.user_attrs.get("confirmation")  # the last worker to finish confirmed the best
    assert "Best trials of study" in (tmp_path / "run.out").read_text()
    assert processes_with_env(str(tmp_path)) == []


def test_a_worker_killed_mid_trial_has_its_trial_run_again_by_another(tmp_path, tiny_model, llama_server, services):
    name = f"kill-{uuid.uuid4().hex[:8]}"
    _experiment(tmp_path, tiny_model, name, num_prompts=400)  # a few seconds a trial: time to kill one
    doomed = _worker(tmp_path, services, "--trials", "2", "--seed", "1", out="doomed")
    deadline = time.monotonic() + 180
    while "measuring" not in (tmp_path / "doomed.err").read_text():
        assert doomed.poll() is None and time.monotonic() < deadline, (tmp_path / "doomed.err").read_text()
        time.sleep(0.2)
    survivor = _worker(tmp_path, services, "--trials", "2", "--seed", "2", out="survivor")
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=30)
    assert survivor.wait(timeout=600) == 0, (tmp_path / "survivor.err").read_text()[-4000:]

    study = optuna.load_study(study_name=name, storage=services["storage"])
    trials = study.get_trials()
    killed = [t for t in trials if t.state == TrialState.FAIL and t.user_attrs.get("failure_class") == "interrupted"]
    assert len(killed) == 1 and "was killed" in killed[0].user_attrs["failure_reason"]
    retried = [t for t in trials if t.system_attrs.get("failed_trial") == killed[0].number]
    assert len(retried) == 1 and retried[0].params == killed[0].params
    assert retried[0].state == TrialState.COMPLETE and retried[0].user_attrs["worker"] != killed[0].user_attrs["worker"]
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    # The killed worker's engine died with it, and its trial's run is closed (no run stays RUNNING).
    assert processes_with_env(str(tmp_path)) == []
    _, runs = _mlflow_trial_runs(services, name)
    killed_runs = [r for r in runs if r.data.tags["autotuner.trial"] == str(killed[0].number)]
    assert len(killed_runs) == 1 and killed_runs[0].info.status == "KILLED"  # MLflow's word for interrupted
