"""Fault injection on real processes: the tuner SIGKILLed mid-trial and rerun, the engine killed
mid-measurement, an engine that is not ready in time, requests that stall or are refused.
Each fault must become a classified trial outcome, and the study must go on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient

from autotuner.compose import make_driver
from autotuner.config import load_experiment
from autotuner.core.progress import Progress
from autotuner.engines._base import get_engine
from autotuner.launchers.process import ProcessLauncher
from autotuner.tracking import MlflowTracker, default_tracking_uri

pytestmark = pytest.mark.engine
REPO = Path(__file__).resolve().parents[2]


def write_experiment(tmp_path: Path, model: Path, name: str, extra: str = "", workload: str = "",
                     study: str = "") -> Path:
    (tmp_path / "s.yaml").write_text("engine: llamacpp\nparams:\n  parallel: {type: int, low: 1, high: 4}\n")
    path = tmp_path / "exp.yaml"
    path.write_text(f"name: {name}\nengine: llamacpp\nmodel: {{path: {model}}}\nsearch_space: s.yaml\n"
                    f"workload: {{input_len: 8, output_len: 16, warmup_requests: 0{workload}}}\n"
                    f"load: {{max_concurrency: [2]}}\n"
                    f"study: {{storage: 'sqlite:///{tmp_path}/autotuner.db'{study}}}\n"
                    f"confirm: {{top_k: 0}}\n{extra}")
    return path


def servers_of(model: Path) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if str(model).encode() in argv and b"--port" in argv:
                pids.append(int(proc.name))
    return pids


def run_study(tmp_path: Path, exp_file: Path, binary: str, trials: int) -> optuna.Study:
    exp = load_experiment(exp_file)
    tuner = make_driver(exp, engine=get_engine("llamacpp"), launcher=ProcessLauncher(tmp_path / "procs"),
                  tracker=MlflowTracker(root=tmp_path / "mlruns"), results_dir=tmp_path / "results", binary=binary,
                  progress=lambda n: Progress(n, "output_tok_per_s"))
    return tuner.run(trials)


def test_sigkill_of_the_tuner_mid_trial_then_rerun_keeps_everything(tmp_path, tiny_model, llama_server):
    model = tmp_path / "killed.gguf"
    model.write_bytes(tiny_model.read_bytes())
    exp = write_experiment(tmp_path, model, "killed", workload=", num_prompts: 100000")
    env = {**os.environ, "PYTHONPATH": str(REPO), "AUTOTUNER_CACHE": str(tmp_path / "cache"),
           "AUTOTUNER_LLAMA_SERVER": llama_server}
    tuner = subprocess.Popen([sys.executable, "-m", "autotuner.cli", "run", "-e", str(exp), "--trials", "5"],
                             cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    seen = ""
    while "measuring" not in seen and tuner.poll() is None:
        seen += tuner.stderr.readline()
    assert servers_of(model), "the engine should be running"
    tuner.kill()  # SIGKILL: no handler runs, no cleanup in the tuner
    tuner.wait()
    for _ in range(50):  # the engine dies with its tuner (PR_SET_PDEATHSIG)
        if not servers_of(model):
            break
        time.sleep(0.1)
    assert servers_of(model) == []

    exp.write_text(exp.read_text().replace("100000", "4"))
    out = subprocess.run([sys.executable, "-m", "autotuner.cli", "run", "-e", str(exp), "--trials", "2"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "trial(s) #0 of a killed run: failed and queued again" in out.stderr
    trials = optuna.load_study(study_name="killed", storage=f"sqlite:///{tmp_path}/autotuner.db").get_trials()
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE", "COMPLETE"]
    assert trials[0].user_attrs["failure_class"] == "interrupted"
    assert trials[1].user_attrs["baseline"] is True  # the killed baseline was measured again, first

    client = MlflowClient(default_tracking_uri(tmp_path / "mlruns"))
    exp_id = client.get_experiment_by_name("killed").experiment_id
    assert len(client.search_runs([exp_id], "tags.`autotuner.role` = 'study'")) == 1
    runs = {r.data.tags["autotuner.trial"]: r.info.status for r in client.search_runs([exp_id], "tags.`autotuner.role` = 'trial'")}
    assert runs == {"0": "KILLED", "1": "FINISHED", "2": "FINISHED"}


def test_engine_killed_mid_measurement_is_crashed_mid_run(tmp_path, tiny_model, llama_server):
    import threading

    model = tmp_path / "crash.gguf"
    model.write_bytes(tiny_model.read_bytes())
    # No quality gate: without a baseline trial its reference launch of the defaults would be the one killed.
    exp = write_experiment(tmp_path, model, "crash", workload=", num_prompts: 3000", study=", baseline: false",
                           extra="quality: off\n")

    def kill_engine_when_measuring():
        import httpx

        for _ in range(1200):  # a minute at most
            for pid in servers_of(model):
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                port = int(argv[argv.index(b"--port") + 1])
                try:  # serving the load: llama-server counts the requests in its slots
                    metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=1).text
                    busy = any(line.startswith("llamacpp:requests_processing") and float(line.split()[-1]) > 0
                               for line in metrics.splitlines())
                except httpx.TransportError:
                    busy = False
                if busy:
                    time.sleep(1.0)  # past the warm-up's few requests, into the measurement
                    os.kill(pid, signal.SIGKILL)
                    return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_engine_when_measuring)
    killer.start()
    study = run_study(tmp_path, exp, llama_server, trials=1)
    killer.join()
    trials = study.get_trials()
    assert [(t.state.name, t.user_attrs.get("failure_class")) for t in trials] == [("FAIL", "crashed-mid-run")]


@pytest.mark.parametrize("extra, workload, failure_class, reason", [
    ("startup_timeout_s: 0.001\n", "", "startup-timeout", "not ready after"),
    ("", ", request_timeout_s: 0.001", "client-errors", "timeout after 0.001 s"),
    ("engine_args: ['-c', '32', '-np', '1']\n", ", input_len: 300", "client-errors", "exceeds the available context size"),
    ("engine_args: ['--no-such-flag']\n", "", "bad-flag", "error: invalid argument: --no-such-flag"),
])
def test_engine_faults_become_classified_failures_and_the_study_goes_on(
        tmp_path, tiny_model, llama_server, extra, workload, failure_class, reason):
    exp = write_experiment(tmp_path, tiny_model, "faults", extra=extra, workload=", num_prompts: 4" + workload)
    study = run_study(tmp_path, exp, llama_server, trials=2)
    trials = study.get_trials()
    assert len(trials) == 2  # the study went on after the first failure
    for t in trials:
        assert t.state.name == "FAIL"
        assert t.user_attrs["failure_class"] == failure_class
    assert reason in trials[0].user_attrs["failure_reason"]
    assert servers_of(tiny_model) == []
