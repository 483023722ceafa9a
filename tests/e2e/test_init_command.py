"""`autotuner init` as a user runs it: from a GGUF file to files that `autotuner run` runs as they are, on
a real llama-server; and input that rules every config out is one line, exit 2, nothing written."""

from __future__ import annotations

import re

import pytest
import yaml

from autotuner.workloads.samples import write as write_samples
from tests.support import autotuner


@pytest.mark.engine
def test_init_writes_what_run_runs_as_it_is(tmp_path, tiny_model, llama_server):
    out = autotuner("init", "--engine", "llamacpp", "--model", str(tiny_model), "--name", "mine", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "  model: llama, 4.2M params at F16 (8 MiB of weights), 4 layers" in out.stdout
    assert "slots (-np) 1 to" in out.stdout
    assert "autotuner run --experiment experiments/mine.yaml --trials 30" in out.stdout
    space = yaml.safe_load((tmp_path / "search_spaces" / "mine.yaml").read_text())
    assert space["engine"] == "llamacpp" and "parallel" in space["params"]
    # as written: every config the space holds is launchable, and the defaults' trial runs the workload
    out = autotuner("run", "--experiment", "experiments/mine.yaml", "--trials", "8", "--dry-run", cwd=tmp_path)
    summary = out.stdout.rstrip().splitlines()[-1] if out.stdout.strip() else ""
    assert out.returncode == 0 and re.match(r"# [1-8] launchable, \d+ infeasible", summary), out.stderr[-2000:]
    out = autotuner("run", "--experiment", "experiments/mine.yaml", "--trials", "1", cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Best trials of study 'mine'" in out.stdout and "[trial 1/1 · #0] COMPLETE" in out.stderr
    assert (tmp_path / "results" / "mine" / "best.json").is_file()


def test_init_sizes_the_context_from_the_users_trace(tmp_path, tiny_model):
    write_samples(tmp_path / "workloads")
    out = autotuner("init", "--engine", "llamacpp", "--model", str(tiny_model), "--workload",
                    "workloads/trace.jsonl", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    exp = yaml.safe_load((tmp_path / "experiments" / "tiny.yaml").read_text())
    assert exp["workload"]["trace"]["path"] == "../workloads/trace.jsonl" and exp["load"] == {"speedup": [1, 2]}
    assert "traffic: the trace trace.jsonl:" in out.stdout and "cache reuse" in out.stdout


@pytest.mark.parametrize("args, says", [
    (["--engine", "vllm"], "init sizes llama.cpp (a GGUF file) for now"),
    (["--engine", "llamacpp", "--gpus", "999"], "--gpus 999: this machine shows"),
    (["--engine", "llamacpp", "--gpu-type", "tpu-v9"], "--gpu-type tpu-v9: known are"),
    (["--engine", "llamacpp", "--workload", "nowhere.jsonl"], "--workload nowhere.jsonl: no such file"),
])
def test_input_init_cannot_use_is_one_line_and_writes_nothing(tmp_path, tiny_model, args, says):
    out = autotuner("init", "--model", str(tiny_model), *args, cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and says in out.stderr, out.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_file_that_is_no_model_and_a_file_that_exists_are_refused(tmp_path, tiny_model):
    (tmp_path / "notes.gguf").write_text("hello")
    out = autotuner("init", "--engine", "llamacpp", "--model", "notes.gguf", cwd=tmp_path)
    assert out.returncode == 2 and "not a GGUF file" in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.gguf"]
    assert autotuner("init", "--engine", "llamacpp", "--model", str(tiny_model), cwd=tmp_path).returncode == 0
    again = autotuner("init", "--engine", "llamacpp", "--model", str(tiny_model), cwd=tmp_path)
    assert again.returncode == 2 and "experiments/tiny.yaml exists: pass --force" in again.stderr
