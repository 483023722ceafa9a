"""`autotuner init` as a user runs it: from a GGUF file to files that `autotuner run` runs as they are, on
a real llama-server; and input that rules every config out is one line, exit 2, nothing written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from autotuner.workloads.samples import write as write_samples
from tests.support import autotuner


def test_init_writes_what_run_launches_as_it_is(tmp_path, tiny_model):
    out = autotuner("init", "--engine", "llamacpp", "--model", str(tiny_model), "--name", "mine", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "  model: llama, 4.2M params at F16 (8 MiB of weights), 4 layers" in out.stdout
    assert "slots (-np) 1 to" in out.stdout
    assert "autotuner run --experiment experiments/mine.yaml --trials 30" in out.stdout
    assert "SLO: TTFT p99 5000 ms, a guess (--ttft-p99-ms sets" in out.stdout
    space = yaml.safe_load((tmp_path / "search_spaces" / "mine.yaml").read_text())
    assert space["engine"] == "llamacpp" and "parallel" in space["params"]
    # as written: the configs the space holds are launchable (the one-step test below runs them)
    out = autotuner("run", "--experiment", "experiments/mine.yaml", "--trials", "8", "--dry-run", cwd=tmp_path)
    summary = out.stdout.rstrip().splitlines()[-1] if out.stdout.strip() else ""
    assert out.returncode == 0 and re.match(r"# [1-8] launchable, \d+ infeasible", summary), out.stderr[-2000:]


@pytest.mark.engine
def test_run_with_engine_and_model_inits_once_then_resumes_the_same_study(tmp_path, tiny_model, llama_server):
    first = autotuner("run", "--engine", "llamacpp", "--model", str(tiny_model), "--trials", "1", cwd=tmp_path,
                      timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "wrote experiments/tiny.yaml and search_spaces/tiny.yaml" in first.stderr
    assert "[trial 1/1 · #0] COMPLETE" in first.stderr and "Best trials of study 'tiny'" in first.stdout
    # The user edits it (no confirmation round: 6 more launches); the next run keeps the edit and obeys it.
    written = (tmp_path / "experiments" / "tiny.yaml").read_text()
    assert "confirm: {top_k: 2, repeats: 3}\n" in written
    edited = written.replace("confirm: {top_k: 2, repeats: 3}\n", "confirm: {top_k: 0}\n")
    (tmp_path / "experiments" / "tiny.yaml").write_text(edited)
    again = autotuner("run", "--engine", "llamacpp", "--model", str(tiny_model), "--trials", "1", cwd=tmp_path,
                      timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "experiments/tiny.yaml: the experiment for" in again.stderr and "wrote" not in again.stderr
    assert "· #1]" in again.stderr  # the study's second trial: resumed, not started anew
    assert "(provisional: not confirmed)" in again.stdout, again.stdout[-3000:]
    assert (tmp_path / "experiments" / "tiny.yaml").read_text() == edited


def test_the_users_ttft_is_the_slo(tmp_path, tiny_model):
    out = autotuner("init", "--engine", "llamacpp", "--model", str(tiny_model), "--ttft-p99-ms", "15000",
                    cwd=tmp_path)
    assert out.returncode == 0 and "SLO: TTFT p99 15000 ms, what your users accept" in out.stdout, out.stderr
    written = (tmp_path / "experiments" / "tiny.yaml").read_text()
    assert yaml.safe_load(written)["objective"]["slo"] == {"ttft_ms_p99": 15000}
    assert "# the SLO: the TTFT your users accept (--ttft-p99-ms)\nobjective:" in written


def test_run_with_a_model_whose_name_another_experiment_holds_says_so(tmp_path, tiny_model):
    (tmp_path / "other.gguf").write_bytes(tiny_model.read_bytes())
    assert autotuner("init", "--engine", "llamacpp", "--model", "other.gguf", "--name", "tiny", cwd=tmp_path).returncode == 0
    out = autotuner("run", "--engine", "llamacpp", "--model", str(tiny_model), "--dry-run", cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "experiments/tiny.yaml exists and runs llamacpp on" in out.stderr and "--name OTHER" in out.stderr


def test_a_dry_run_with_engine_and_model_writes_nothing_here(tmp_path, tiny_model):
    out = autotuner("run", "--engine", "llamacpp", "--model", str(tiny_model), "--trials", "3", "--dry-run",
                    cwd=tmp_path)
    assert out.returncode == 0 and "(a scratch copy: dry run)" in out.stderr, out.stderr[-2000:]
    assert "launchable" in out.stdout and list(tmp_path.iterdir()) == []


def test_init_sizes_the_context_from_the_users_trace(tmp_path, tiny_model):
    write_samples(tmp_path / "workloads")
    out = autotuner("init", "--engine", "llamacpp", "--model", str(tiny_model), "--workload",
                    "workloads/trace.jsonl", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    exp = yaml.safe_load((tmp_path / "experiments" / "tiny.yaml").read_text())
    assert exp["workload"]["trace"]["path"] == "../workloads/trace.jsonl" and exp["load"] == {"speedup": [1, 2]}
    assert "traffic: the trace trace.jsonl:" in out.stdout and "cache reuse" in out.stdout


@pytest.mark.parametrize("args, says", [
    (["--engine", "tgi"], "--engine tgi: init knows llamacpp, vllm, sglang"),
    (["--engine", "vllm"], "not a folder (vllm serves a Hugging Face model folder with its config.json)"),
    (["--engine", "llamacpp", "--gpus", "999"], "--gpus 999: this machine shows"),
    (["--engine", "llamacpp", "--gpu-type", "tpu-v9"], "--gpu-type tpu-v9: known are"),
    (["--engine", "llamacpp", "--workload", "nowhere.jsonl"], "--workload nowhere.jsonl: no such file"),
    (["--engine", "llamacpp", "--ttft-p99-ms", "0"], "--ttft-p99-ms 0: the time to first token your users"),
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


REPO = Path(__file__).parents[2]
HF = REPO / "tests" / "data" / "hf"  # config.json of real checkpoints (their README says whose)


@pytest.mark.parametrize("engine, model, gpus, gpu_type", [
    ("vllm", "llama-3.1-8b", "1", "h100"),
    ("vllm", "glm-5-nvfp4", "8", "rtx-pro-6000"),
    ("sglang", "glm-5-nvfp4", "8", "rtx-pro-6000"),
    ("vllm", "deepseek-v3", "8", "h200"),
    ("sglang", "deepseek-v3", "8", "h200"),
])
def test_init_for_gpus_this_machine_lacks_writes_files_a_dry_run_launches(tmp_path, engine, model, gpus, gpu_type):
    out = autotuner("init", "--engine", engine, "--model", str(HF / model), "--gpus", gpus, "--gpu-type", gpu_type,
                    cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"machine: {gpus} x {gpu_type}" in out.stdout and "layouts: " in out.stdout
    out = autotuner("run", "--experiment", f"experiments/{model}.yaml", "--trials", "12", "--dry-run", cwd=tmp_path)
    summary = out.stdout.rstrip().splitlines()[-1] if out.stdout.strip() else ""
    launchable = re.match(r"# (\d+) launchable, \d+ infeasible", summary)
    assert out.returncode == 0 and launchable and int(launchable[1]) >= 1, out.stderr[-2000:] + summary
    assert "docker run" in out.stdout and ("--max-model-len 2048" in out.stdout or "--context-length 2048" in out.stdout)


def test_a_model_no_layout_of_the_gpus_holds_is_one_line_and_writes_nothing(tmp_path):
    out = autotuner("init", "--engine", "vllm", "--model", str(HF / "deepseek-v3"), "--gpus", "8", "--gpu-type", "h100",
                    cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "637 GiB of weights (FP8) need at least 11 GPUs of 79.6 GiB; planned for 8" in out.stderr
    assert list(tmp_path.iterdir()) == []
