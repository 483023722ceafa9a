"""A short real study against the real llama-server: what the Optuna storage and the MLflow store hold,
a known-failing config recorded as FAIL with its reason, resume, and no engine left behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from autotuner.compose import make_driver
from autotuner.config import load_experiment
from autotuner.core.driver import StudyDriver
from autotuner.core.progress import Progress
from autotuner.engines._base import get_engine
from autotuner.launchers.process import ProcessLauncher
from autotuner.tracking import MlflowTracker, default_tracking_uri
from tests.support import launched

pytestmark = pytest.mark.engine

SPACE = """\
engine: llamacpp
params:
  parallel: {type: int, low: 1, high: 16}
  batch_size: {type: categorical, choices: [8, 512]}
  ubatch_size: {type: categorical, choices: [8, 512]}
  cont_batching: {type: bool}
"""


def experiment(tmp_path: Path, model: Path) -> Path:
    (tmp_path / "space.yaml").write_text(SPACE)
    path = tmp_path / "exp.yaml"
    path.write_text(f"""\
name: itest
engine: llamacpp
model: {{path: {model}, name: tiny}}
search_space: space.yaml
workload: {{num_prompts: 8, input_len: 16, output_len: 16, warmup_requests: 2}}
load: {{max_concurrency: [4]}}
study: {{storage: "sqlite:///{tmp_path}/study.db", seed: 1}}
startup_timeout_s: 30
confirm: {{top_k: 0}}
enqueue:
  - {{parallel: 16, batch_size: 8, ubatch_size: 8}}   # llama.cpp aborts at start: GGML_ASSERT
""")
    return path


def make_tuner(tmp_path: Path, model: Path, binary: str) -> StudyDriver:
    exp = load_experiment(experiment(tmp_path, model))
    return make_driver(exp, engine=get_engine("llamacpp"), launcher=ProcessLauncher(tmp_path / "procs"),
                 tracker=MlflowTracker(root=tmp_path / "mlruns"), results_dir=tmp_path / "results", binary=binary,
                 progress=lambda total: Progress(total, "output_tok_per_s"))


def test_short_real_study_records_everything_and_resumes(tmp_path, tiny_model, llama_server):
    study = make_tuner(tmp_path, tiny_model, llama_server).run(4)

    trials = launched(study.get_trials())
    assert len(trials) == 4
    baseline, failing = trials[0], trials[1]
    assert baseline.user_attrs["baseline"] is True and baseline.params == {}
    assert baseline.state == TrialState.COMPLETE and baseline.value > 0
    assert {"parallel": 16, "batch_size": 8, "ubatch_size": 8}.items() <= failing.params.items()
    assert failing.state == TrialState.FAIL
    assert failing.user_attrs["failure_class"] == "assert"
    assert "GGML_ASSERT" in failing.user_attrs["failure_reason"]
    assert "GGML_ASSERT" in failing.user_attrs["log_tail"]
    for t in trials:
        assert t.state in (TrialState.COMPLETE, TrialState.FAIL)
        if t.state == TrialState.COMPLETE:
            level = t.user_attrs["levels"][0]
            assert level["completed"] == 8 and level["failed"] == 0
            assert level["output_tok_per_s"] == pytest.approx(t.value)
            assert "-np" in t.user_attrs["command"] or t.number == 0

    client = MlflowClient(default_tracking_uri(tmp_path / "mlruns"))
    exp = client.get_experiment_by_name("itest")
    parents = client.search_runs([exp.experiment_id], "tags.`autotuner.role` = 'study'")
    assert len(parents) == 1
    parent = parents[0]
    children = client.search_runs([exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    assert len(children) == 4
    by_trial = {int(r.data.tags["autotuner.trial"]): r for r in children}
    assert by_trial[1].info.status == "FAILED"
    assert by_trial[1].data.tags["autotuner.failure_class"] == "assert"
    assert {"parallel": "16", "batch_size": "8", "ubatch_size": "8"}.items() <= by_trial[1].data.params.items()
    assert by_trial[0].info.status == "FINISHED"
    assert by_trial[0].data.metrics["output_tok_per_s"] == pytest.approx(baseline.value)
    for key in ("ttft_ms_p99", "tpot_ms_p50", "itl_ms_p90", "e2e_ms_mean", "request_per_s"):
        assert key in by_trial[0].data.metrics
    artifacts = {a.path for a in client.list_artifacts(by_trial[0].info.run_id)}
    assert {"command.txt", "server.log", "bench.json"} <= artifacts
    bench = json.loads(Path(client.download_artifacts(by_trial[0].info.run_id, "bench.json", str(tmp_path))).read_text())
    assert bench["state"] == "COMPLETE" and bench["levels"][0]["completed"] == 8
    assert client.get_run(parent.info.run_id).data.metrics["trials_complete"] >= 1

    # Resume: the same command continues the same study under the same parent run; --trials means more.
    study = make_tuner(tmp_path, tiny_model, llama_server).run(1)
    trials = launched(study.get_trials())
    assert len(trials) == 5
    assert sum(bool(t.user_attrs.get("baseline")) for t in trials) == 1
    assert len(client.search_runs([exp.experiment_id], "tags.`autotuner.role` = 'study'")) == 1
    assert len(client.search_runs([exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")) == 5

    # Nothing left running: every pidfile was removed by stop().
    assert list((tmp_path / "procs").glob("*.json")) == []
