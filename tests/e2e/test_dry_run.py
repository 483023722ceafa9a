"""`autotuner run --dry-run` as a GPU owner uses it on a laptop: the GLM-5 experiment's docker run lines
and the rule each infeasible sample breaks, with nothing started or written."""

from __future__ import annotations

import shlex

import pytest

from tests.e2e.test_cli import REPO, autotuner

GLM5 = REPO / "experiments" / "glm5-nvfp4-8x-rtx-pro-6000.yaml"


def test_glm5_dry_run_prints_pasteable_docker_lines_and_broken_rules(tmp_path):
    out = autotuner("run", "--experiment", str(GLM5), "--dry-run", "--trials", "12", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    runs = [line for line in lines if line.startswith("docker run ")]
    assert len(runs) >= 3
    first = shlex.split(runs[0])  # the enqueued TP8 + expert-parallel config
    assert first[first.index("--gpus") + 1] == "8" and first[first.index("--ipc") + 1] == "host"
    assert first[first.index("--entrypoint") + 1:first.index("--entrypoint") + 4] == [
        "vllm", "vllm/vllm-openai:v0.32.0", "serve"]
    assert "-v" in first and "/models/GLM-5-NVFP4:/models/GLM-5-NVFP4:ro" in first
    assert "/srv/moe-configs:/moe-configs:ro" in first
    assert ["--tensor-parallel-size", "8"] == first[first.index("--tensor-parallel-size"):][:2]
    assert "--enable-expert-parallel" in first and "--max-num-seqs" in first
    layouts = {" ".join(shlex.split(r)[shlex.split(r).index("--tensor-parallel-size"):][:4]) for r in runs}
    assert len(layouts) >= 2  # TP8 vs TP4xPP2 vs TP2xPP4 are all sampled
    assert any(line.startswith("#   infeasible: ") for line in lines)
    assert lines[-1].startswith("# ") and "launchable" in lines[-1]
    assert list(tmp_path.iterdir()) == []  # no study database, no mlruns/, no results/


def test_process_dry_run_prints_env_and_argv_of_the_cpu_experiment(tmp_path):
    out = autotuner("run", "--experiment", str(REPO / "experiments" / "vllm-cpu.yaml"), "--dry-run", "--trials", "3",
                    cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    commands = [line for line in out.stdout.splitlines() if line and not line.startswith("#")]
    assert len(commands) >= 2
    assert all("VLLM_TARGET_DEVICE=cpu" in c and "-m vllm.entrypoints.openai.api_server" in c for c in commands)
    assert all("--enforce-eager --max-model-len 512" in c for c in commands)
    assert list(tmp_path.iterdir()) == []


def test_missing_vllm_install_is_one_line_with_what_to_run(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (tmp_path / "exp.yaml").write_text((REPO / "experiments" / "vllm-cpu.yaml").read_text()
                                       .replace("../models/llama-38m", str(model))
                                       .replace("../search_spaces/", f"{REPO}/search_spaces/"))
    env_cache = tmp_path / "empty-cache"
    out = autotuner("run", "--experiment", "exp.yaml", "--trials", "1", cwd=tmp_path,
                    env={"AUTOTUNER_CACHE": str(env_cache), "AUTOTUNER_VLLM_PYTHON": ""})
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "error: vLLM not installed: run scripts/setup-vllm.sh (vLLM 0.32.0's CPU build in its own venv) or set "
        "AUTOTUNER_VLLM_PYTHON to a python that imports vllm"]


def test_h100_dry_run_mounts_a_dotted_model_folder_itself(tmp_path):
    out = autotuner("run", "--experiment", str(REPO / "experiments" / "vllm-h100-8b.yaml"), "--dry-run", "--trials", "2",
                    cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    first = shlex.split(next(line for line in out.stdout.splitlines() if line.startswith("docker run ")))
    assert first[first.index("-v") + 1] == "/models/Llama-3.1-8B-Instruct:/models/Llama-3.1-8B-Instruct:ro"
    assert first[first.index("--gpus") + 1] == "1"


@pytest.mark.parametrize("experiment", sorted(p.name for p in (REPO / "experiments").glob("*.yaml")))
def test_every_shipped_experiment_dry_runs(tmp_path, experiment):
    """`autotuner run --experiment F --dry-run` works for every file in experiments/, on a machine without
    the model or a GPU, and writes nothing."""
    out = autotuner("run", "--experiment", str(REPO / "experiments" / experiment), "--dry-run", "--trials", "4",
                    cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1].startswith("# ") and "launchable" in out.stdout.splitlines()[-1]
    assert list(tmp_path.iterdir()) == []


def test_glm5_sglang_dry_run_serves_metrics_and_sets_nccl_only_through_its_variables(tmp_path):
    out = autotuner("run", "--experiment", str(REPO / "experiments" / "glm5-nvfp4-8x-rtx-pro-6000-sglang.yaml"),
                    "--dry-run", "--trials", "6", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    runs = [shlex.split(line) for line in out.stdout.splitlines() if line.startswith("docker run ")]
    assert runs and all("--enable-metrics" in run for run in runs)
    for run in runs:
        env = [run[i + 1] for i, arg in enumerate(run) if arg == "-e"]
        assert any(e.startswith("NCCL_P2P_LEVEL=") for e in env) and any(e.startswith("NCCL_PROTO=") for e in env)
        assert not any(arg.startswith("NCCL_") for arg in run[run.index("--entrypoint"):])  # never a flag
