"""The CLI as a user runs it: bad input exits 2 with one line naming file and field, writing nothing;
a real quickstart-sized study prints the best trials and a ready-to-run command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from tests.support import (
    REPO,
    autotuner,
    launched,
)


def test_help_lists_the_commands(tmp_path):
    out = autotuner("--help", cwd=tmp_path)
    assert out.returncode == 0
    for command in ("run", "bench", "make-model"):
        assert command in out.stdout


@pytest.mark.parametrize("experiment, expected", [
    ("name: x\nengine: llamacpp\nmodel: {path: m.gguf}\nsearch_space: s.yaml\nwokload: {}\n",
     "exp.yaml: field 'wokload': unknown field"),
    ("name: x\nengine: llamacpp\nmodel: {path: m.gguf}\nsearch_space: s.yaml\nworkload: {output_len: many}\n",
     "exp.yaml: field 'workload.output_len': Input should be a valid integer, unable to parse string as an integer (got 'many')"),
    ("name: x\nengine: tgi\nmodel: {path: m.gguf}\nsearch_space: s.yaml\n",
     "s.yaml: field 'engine': search space is for 'llamacpp' but"),
    ("name: x\nengine: llamacpp\nmodel: {path: missing.gguf}\nsearch_space: s.yaml\n",
     "exp.yaml: field 'model.path': not found:"),
])
def test_bad_experiment_exits_2_with_one_line_and_writes_nothing(tmp_path, experiment, expected):
    (tmp_path / "s.yaml").write_text("engine: llamacpp\nparams:\n  parallel: {type: int, low: 1, high: 4}\n")
    (tmp_path / "m.gguf").write_bytes(b"")
    (tmp_path / "exp.yaml").write_text(experiment)
    before = set(tmp_path.iterdir())
    out = autotuner("run", "--experiment", "exp.yaml", "--trials", "1", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert expected in lines[0]
    assert set(tmp_path.iterdir()) == before  # no study database, no mlruns/, no results/


def test_unknown_engine_param_names_the_valid_ones(tmp_path):
    (tmp_path / "s.yaml").write_text("engine: llamacpp\nparams:\n  n_gpu_layers: {type: int, low: 1, high: 4}\n")
    (tmp_path / "m.gguf").write_bytes(b"")
    (tmp_path / "exp.yaml").write_text("name: x\nengine: llamacpp\nmodel: {path: m.gguf}\nsearch_space: s.yaml\n")
    out = autotuner("run", "--experiment", "exp.yaml", cwd=tmp_path)
    assert out.returncode == 2
    assert "s.yaml: field 'params': 'n_gpu_layers' is not a llamacpp param (known: batch_size," in out.stderr


@pytest.mark.engine
def test_quickstart_sized_study_through_the_cli(tmp_path, tiny_model, llama_server):
    (tmp_path / "s.yaml").write_text((REPO / "search_spaces" / "llamacpp.yaml").read_text())
    (tmp_path / "exp.yaml").write_text(
        (REPO / "experiments" / "quickstart.yaml").read_text()
        .replace("../models/quickstart.gguf", str(tiny_model)).replace("../search_spaces/llamacpp.yaml", "s.yaml")
        .replace("num_prompts: 32", "num_prompts: 16").replace("input_len: 64", "input_len: 16")
        .replace("output_len: 64", "output_len: 16").replace("max_concurrency: [4, 16]", "max_concurrency: [2, 8]")
        .replace("repeats: 3", "repeats: 2")
        + 'env: {AUTOTUNER_TEST_MARK: "1"}\n')
    out = autotuner("run", "--experiment", "exp.yaml", "--trials", "3", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "[trial 1/3 · #0] baseline: engine defaults" in out.stderr
    assert "measuring concurrency 2 [1/2] (16 requests)" in out.stderr
    # The round: the two best and the baseline, interleaved, twice each.
    assert "[confirm 1/" in out.stderr
    if "[confirm 1/6 · #" in out.stderr:  # the baseline completed: it is in the round, measured last
        assert "[confirm 6/6 · #0] confirming the baseline" in out.stderr
    assert "[trial 3/3 · #2]" in out.stderr
    assert "Best trials of study 'quickstart'" in out.stdout
    # The engine's defaults depend on the host (llama-server picks its own thread count): the verdict
    # either compares with them or says why they have no value.
    said = out.stdout + "\n" + out.stderr[-3000:]
    assert ("over the engine defaults" in out.stdout or "(the baseline has no value: trial #0" in out.stdout
            or "The engine defaults are the best configuration measured" in out.stdout
            or "Keep the engine defaults" in out.stdout), said
    assert f"--model {tiny_model} --host 127.0.0.1 --port 8080 --alias tiny-llama --metrics" in out.stdout
    assert (tmp_path / "results" / "quickstart" / "best.json").is_file()
    # One winner command everywhere, with the experiment's environment: the file the tuner wrote (the CLI
    # writes none of its own), the report, what the run printed and `autotuner best`.
    results = tmp_path / "results" / "quickstart"
    command = (results / "best-command.sh").read_text().removeprefix("#!/bin/sh\nexec ").strip()
    assert command.startswith("AUTOTUNER_TEST_MARK=1 ") and command in out.stdout
    assert f"```sh\n{command}\n```" in (results / "report.md").read_text()
    assert json.loads((results / "best.json").read_text())["command"] == command
    assert autotuner("best", "--experiment", "exp.yaml", cwd=tmp_path).stdout.strip() == command
    assert (tmp_path / "autotuner.db").is_file() and (tmp_path / "mlruns" / "mlflow.db").is_file()


def _processes_using(path: Path) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if str(path).encode() in (proc / "cmdline").read_bytes():
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids


def _start_study(tmp_path: Path, tiny_model: Path, llama_server: str, name: str, num_prompts: int):
    """Start `autotuner run` on its own copy of the model (to find its servers by argv) and wait until
    it measures; returns the process and the model path."""
    import time

    model = tmp_path / f"{name}.gguf"
    model.write_bytes(tiny_model.read_bytes())
    (tmp_path / "s.yaml").write_text("engine: llamacpp\nparams:\n  parallel: {type: int, low: 1, high: 4}\n")
    (tmp_path / "exp.yaml").write_text(
        f"name: {name}\nengine: llamacpp\nmodel: {{path: {model}}}\nsearch_space: s.yaml\n"
        f"workload: {{num_prompts: {num_prompts}, input_len: 8, output_len: 16, warmup_requests: 0}}\n"
        "load: {max_concurrency: [2]}\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "AUTOTUNER_CACHE": str(tmp_path / "cache"),
           "AUTOTUNER_LLAMA_SERVER": llama_server}
    proc = subprocess.Popen([sys.executable, "-m", "autotuner.cli", "run", "-e", "exp.yaml", "--trials", "3"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    seen = ""
    while "measuring" not in seen and time.monotonic() < deadline and proc.poll() is None:
        seen += proc.stderr.readline()
    assert "measuring" in seen, seen
    assert len(_processes_using(model)) == 1  # the engine is up
    return proc, model


def _study(tmp_path: Path, name: str):
    import optuna

    return optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path}/autotuner.db")


@pytest.mark.engine
def test_first_signal_finishes_the_measurement_then_stops_and_the_rerun_resumes(tmp_path, tiny_model, llama_server):
    import signal

    proc, model = _start_study(tmp_path, tiny_model, llama_server, "graceful", num_prompts=300)
    try:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert "SIGTERM: finishing the measurement under way" in err
    assert "Run the same command to resume" in err
    assert _processes_using(model) == []
    [trial] = _study(tmp_path, "graceful").get_trials()
    assert trial.state.name == "COMPLETE" and trial.value > 0  # the measurement was finished and recorded

    out = autotuner("run", "-e", "exp.yaml", "--trials", "1", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    trials = _study(tmp_path, "graceful").get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
    assert not trials[1].user_attrs.get("baseline")  # the rerun went on to the next trial


@pytest.mark.engine
def test_second_ctrl_c_stops_at_once_and_the_interrupted_trial_is_retried(tmp_path, tiny_model, llama_server):
    import signal
    import time

    proc, model = _start_study(tmp_path, tiny_model, llama_server, "ctrlc", num_prompts=100000)
    try:
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=90)  # generous: CI machines can be very loaded
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert "Run the same command to resume" in err
    assert _processes_using(model) == []
    trials = _study(tmp_path, "ctrlc").get_trials()
    assert [t.state.name for t in trials] == ["FAIL", "WAITING"]  # the same config is queued again
    assert trials[0].user_attrs["failure_class"] == "interrupted"

    (tmp_path / "exp.yaml").write_text((tmp_path / "exp.yaml").read_text().replace("100000", "4"))
    out = autotuner("run", "-e", "exp.yaml", "--trials", "1", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    trials = _study(tmp_path, "ctrlc").get_trials()
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE"]
    assert trials[1].user_attrs["baseline"] is True and trials[1].user_attrs["retry_of"] == 0


@pytest.mark.engine
def test_max_trials_caps_the_study_however_many_invocations_add_to_it(tmp_path, tiny_model, llama_server):
    (tmp_path / "s.yaml").write_text((REPO / "search_spaces" / "llamacpp.yaml").read_text())
    (tmp_path / "exp.yaml").write_text(f"""\
name: capped
engine: llamacpp
model: {{path: {tiny_model}}}
search_space: s.yaml
workload: {{num_prompts: 4, input_len: 8, output_len: 8, warmup_requests: 0}}
load: {{max_concurrency: [2]}}
""")
    first = autotuner("run", "--experiment", "exp.yaml", "--trials", "5", "--max-trials", "2", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "stopping: the study holds its 2 trials (stop.max_trials)" in first.stderr
    again = autotuner("run", "--experiment", "exp.yaml", "--trials", "5", "--max-trials", "3", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "[trial 1/5 · #" in again.stderr and "[trial 2/5" not in again.stderr  # one more, to three in all
    study = optuna.load_study(study_name="capped", storage=f"sqlite:///{tmp_path}/autotuner.db")
    assert len(launched(study.trials)) == 3  # re-proposals never ran


@pytest.mark.engine
def test_ctrl_c_twice_stops_every_parallel_worker_and_their_engines(tmp_path, tiny_model, llama_server):
    import signal
    import time

    model = tmp_path / "parallel.gguf"
    model.write_bytes(tiny_model.read_bytes())
    (tmp_path / "s.yaml").write_text("engine: llamacpp\nparams:\n  parallel: {type: int, low: 1, high: 4}\n"
                                     "  threads: {type: int, low: 1, high: 1}\n")
    (tmp_path / "exp.yaml").write_text(
        f"name: parallel\nengine: llamacpp\nmodel: {{path: {model}}}\nsearch_space: s.yaml\n"
        "workload: {num_prompts: 100000, input_len: 8, output_len: 16, warmup_requests: 0}\n"
        "load: {max_concurrency: [2]}\nstudy: {baseline: false}\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "AUTOTUNER_POOL_DIR": str(tmp_path / "pool")}
    proc = subprocess.Popen([sys.executable, "-m", "autotuner.cli", "run", "-e", "exp.yaml", "--trials", "4",
                             "--parallel", "2"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        seen = ""
        while seen.count("measuring") < 2 and time.monotonic() < deadline and proc.poll() is None:
            seen += proc.stderr.readline()
        assert seen.count("measuring") == 2, seen  # both workers measure, side by side on one core each
        import re

        cores = re.findall(r"on CPU core (\d+)\n", seen)
        assert len(cores) == 2 and cores[0] != cores[1], seen  # each its own core
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, seen + err
    assert "Run the same command to resume" in err
    assert _processes_using(model) == []
    trials = launched(_study(tmp_path, "parallel").get_trials())  # a config the other worker ran: asked again
    assert sorted(t.state.name for t in trials) == ["FAIL", "FAIL", "WAITING", "WAITING"]  # both queued again
    assert {t.user_attrs.get("failure_class") for t in trials if t.state.name == "FAIL"} == {"interrupted"}
