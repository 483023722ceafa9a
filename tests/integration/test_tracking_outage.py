"""A tracking server that goes away mid-study: the study goes on, and what could not be logged is
logged once the server is back (the Optuna storage is the source of truth)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from mlflow.tracking import MlflowClient

from autotuner.compose import make_driver
from autotuner.config import load_experiment
from autotuner.core.progress import Progress
from autotuner.engines._base import get_engine
from autotuner.launchers._base import free_port
from autotuner.launchers.process import ProcessLauncher
from autotuner.tracking import MlflowTracker
from tests.support import launched

pytestmark = pytest.mark.engine


class MlflowServer:
    """A real `mlflow server` on loopback, stoppable and restartable on the same port and store."""

    def __init__(self, root: Path):
        self.root, self.port, self.proc = root, free_port(), None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        mlflow = Path(sys.executable).parent / "mlflow"
        self.proc = subprocess.Popen(
            [str(mlflow), "server", "--backend-store-uri", f"sqlite:///{self.root}/mlflow.db",
             "--artifacts-destination", str(self.root / "artifacts"), "--host", "127.0.0.1",
             "--port", str(self.port), "--workers", "1"],
            stdout=subprocess.DEVNULL, stderr=(self.root / "server.log").open("ab"), cwd=self.root)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (self.root / "server.log").read_text()[-2000:]
            try:
                if httpx.get(self.uri + "/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise TimeoutError("mlflow server did not start")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class OutageProgress(Progress):
    """Takes the server down after trial 1 and brings it back after trial 3."""

    def __init__(self, total, server: MlflowServer):
        super().__init__(total, "output_tok_per_s")
        self.server = server

    def trial_finished(self, *args, **kwargs) -> None:
        super().trial_finished(*args, **kwargs)
        if self._number == 0:
            self.server.stop()
        elif self._number == 2:
            self.server.start()


def test_study_survives_a_tracking_outage_and_backfills(tmp_path, tiny_model, llama_server):
    (tmp_path / "store").mkdir()
    server = MlflowServer(tmp_path / "store")
    server.start()
    try:
        (tmp_path / "s.yaml").write_text("engine: llamacpp\nparams:\n  parallel: {type: int, low: 1, high: 64}\n")
        (tmp_path / "exp.yaml").write_text(
            f"name: outage\nengine: llamacpp\nmodel: {{path: {tiny_model}}}\nsearch_space: s.yaml\n"
            "workload: {num_prompts: 4, input_len: 8, output_len: 8, warmup_requests: 0}\n"
            f"load: {{max_concurrency: [2]}}\nstudy: {{storage: 'sqlite:///{tmp_path}/study.db'}}\n"
            "confirm: {top_k: 0}\n")
        exp = load_experiment(tmp_path / "exp.yaml")
        tracker = MlflowTracker(server.uri, attempts=2)
        tuner = make_driver(exp, engine=get_engine("llamacpp"), launcher=ProcessLauncher(tmp_path / "procs"),
                      tracker=tracker, results_dir=tmp_path / "results", binary=llama_server,
                      progress=lambda n: OutageProgress(n, server))
        study = tuner.run(5)
        ran = launched(study.get_trials())
        assert len(ran) == 5
        assert all(t.state.name == "COMPLETE" for t in ran)

        client = MlflowClient(server.uri)
        exp_id = client.get_experiment_by_name("outage").experiment_id
        runs = client.search_runs([exp_id], "tags.`autotuner.role` = 'trial'")
        by_trial = {int(r.data.tags["autotuner.trial"]): r for r in runs}
        assert sorted(by_trial) == [t.number for t in ran]  # once each, none twice
        assert all(r.info.status == "FINISHED" for r in by_trial.values())
        for number in (ran[1].number, ran[2].number):  # logged after the outage, from the storage
            run = by_trial[number]
            assert run.data.metrics["output_tok_per_s"] == pytest.approx(study.trials[number].value)
            history = client.get_metric_history(run.info.run_id, "level/output_tok_per_s")
            assert [m.step for m in history] == [0]  # the load level, as it would have been logged live
            expected = {"command.txt", "bench.json", "server.log"}
            assert {a.path for a in client.list_artifacts(run.info.run_id)} >= expected
    finally:
        server.stop()
