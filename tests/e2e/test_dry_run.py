"""`autotuner run --dry-run` as a GPU owner uses it on a laptop: the GLM-5 experiment's docker run lines
and the rule each infeasible sample breaks, with nothing started or written."""

from __future__ import annotations

import re
import shlex
import subprocess

import pytest

from tests.support import REPO, autotuner

GLM5 = REPO / "experiments" / "glm5-nvfp4-8x-rtx-pro-6000.yaml"


def test_glm5_dry_run_prints_pasteable_docker_lines_and_broken_rules(tmp_path):
    out = autotuner("run", "--experiment", str(GLM5), "--dry-run", "--trials", "12", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    runs = [line for line in lines if line.startswith("docker run ") and " serve " in line]
    assert len(runs) >= 3
    first = shlex.split(runs[0])  # the enqueued TP8 + expert-parallel config
    assert first[first.index("--gpus") + 1] == "8" and first[first.index("--ipc") + 1] == "host"
    assert first[first.index("--entrypoint") + 1:first.index("--entrypoint") + 4] == [
        "vllm", "vllm/vllm-openai:v0.32.0", "serve"]
    assert "-v" in first and "/models/GLM-5-NVFP4:/models/GLM-5-NVFP4:ro" in first
    # The enqueued config is the one that starts on PCIe: no DeepEP, NCCL without LL128, no folder mounted.
    assert ["--all2all-backend", "allgather_reducescatter"] == first[first.index("--all2all-backend"):][:2]
    assert "NCCL_PROTO=^LL128" in first and not any("moe-configs" in arg for arg in first)
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
    first = shlex.split(next(line for line in out.stdout.splitlines()
                             if line.startswith("docker run ") and " serve " in line))
    assert first[first.index("-v") + 1] == "/models/Llama-3.1-8B-Instruct:/models/Llama-3.1-8B-Instruct:ro"
    assert first[first.index("--gpus") + 1] == "1"


def test_a_gpu_dry_run_prints_the_gpu_preflight_first_and_a_cpu_one_none(tmp_path):
    out = autotuner("run", "--experiment", str(REPO / "experiments" / "vllm-h100-8b.yaml"), "--dry-run", "--trials", "1",
                    cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "# GPU preflight before the first trial (in image vllm/vllm-openai:v0.32.0):"
    probes = [shlex.split(line) for line in lines[:lines.index(next(x for x in lines if x.startswith("# dry run")))]
              if line.startswith("docker run ") and "python3" not in line]
    assert [p[p.index("--entrypoint") + 1:p.index("--entrypoint") + 5][:4] for p in probes][1:3] == [
        ["nvidia-smi", "vllm/vllm-openai:v0.32.0", "topo", "-m"],
        ["nvidia-smi", "vllm/vllm-openai:v0.32.0", "topo", "-p2p"]]
    assert all(p[p.index("--gpus") + 1] == '"device=0"' and "--network" in p for p in probes)
    assert "import torch" in out.stdout and "can_device_access_peer" in out.stdout
    cpu = autotuner("run", "--experiment", str(REPO / "experiments" / "vllm-cpu.yaml"), "--dry-run", "--trials", "1",
                    cwd=tmp_path)
    assert cpu.returncode == 0 and "GPU preflight" not in cpu.stdout


def test_the_gpu_check_script_parses_and_its_experiment_dry_runs(tmp_path):
    script = REPO / "scripts" / "gpu-check.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    out = autotuner("run", "--experiment", str(REPO / "experiments" / "vllm-gpu-check.yaml"), "--dry-run",
                    "--trials", "3", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("# GPU preflight before the first trial (in image vllm/vllm-openai:")
    assert out.stdout.rstrip().endswith("# 3 launchable, 0 infeasible (an infeasible config costs no launch)")
    assert list(tmp_path.iterdir()) == []


def test_the_kernel_stage_dry_run_prints_its_tuners_then_trials_that_read_their_results(tmp_path):
    (tmp_path / "exp.yaml").write_text(GLM5.read_text().replace("../search_spaces/", f"{REPO}/search_spaces/")
                                       + "kernels: {gpu: NVIDIA RTX PRO 6000, cache_dir: kc}\n")
    alone = autotuner("kernels", "--experiment", "exp.yaml", "--dry-run", cwd=tmp_path)
    assert alone.returncode == 0, alone.stderr
    tuners = [shlex.split(line) for line in alone.stdout.splitlines() if line.startswith("docker run ")]
    assert len(tuners) == 6  # TP8, TP4xPP2, TP2xPP4 x expert parallel on/off
    first = tuners[0]
    # A shell in the image: Ray installed where the image lacks it, then the tuner.
    assert first[first.index("--entrypoint") + 1:first.index("--entrypoint") + 4] == [
        "sh", "vllm/vllm-openai:v0.32.0", "-c"]
    assert f"{tmp_path / 'kc'}:/autotuner-kernels" in first  # writable: the tuner writes there
    assert first[first.index("--gpus") + 1] == '"device=0,1,2,3,4,5,6,7"'  # the study's GPUs: Ray spreads over them
    tuner = shlex.split(first[-1].split(" && ")[-1])
    assert tuner == ["python3", "/vllm-workspace/benchmarks/kernels/benchmark_moe.py",
                     "--model", "/models/GLM-5-NVFP4", "--tp-size", "2", "--dtype", "auto",
                     "--save-dir", "/autotuner-kernels/vllm-0.32.0/NVIDIA_RTX_PRO_6000/tp2-ep1-auto", "--tune"]
    assert ("# vllm-0.32.0/NVIDIA_RTX_PRO_6000/tp8-ep8-auto: MoE over 8 GPU(s), experts split over 8, auto; once "
            "tuned, its trials get VLLM_TUNED_CONFIG_FOLDER=/autotuner-kernels/vllm-0.32.0/NVIDIA_RTX_PRO_6000/"
            "tp8-ep8-auto") in alone.stdout
    run = autotuner("run", "--experiment", "exp.yaml", "--dry-run", "--trials", "3", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    stage = run.stdout.index("# kernel stage: 6 fused-MoE tuning job(s) for vllm 0.32.0 on NVIDIA RTX PRO 6000")
    assert run.stdout.index("# GPU preflight") < stage < run.stdout.index("# dry run")  # in the order they run
    trial = shlex.split([line for line in run.stdout.splitlines() if "vllm serve" in line or " serve " in line][0])
    assert f"{tmp_path / 'kc'}:/autotuner-kernels:ro" in trial
    # Nothing tuned yet: a trial line names no folder it could not read (the stage's lines say which it will).
    assert not any(arg.startswith("VLLM_TUNED_CONFIG_FOLDER=") for arg in trial)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.yaml"]  # no cache folder, no study


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
    runs = [shlex.split(line) for line in out.stdout.splitlines()
            if line.startswith("docker run ") and "--model-path" in line]  # the servers, not the preflight's probes
    assert runs and all("--enable-metrics" in run for run in runs)
    for run in runs:
        env = [run[i + 1] for i, arg in enumerate(run) if arg == "-e"]
        assert any(e.startswith("NCCL_P2P_LEVEL=") for e in env) and any(e.startswith("NCCL_PROTO=") for e in env)
        assert not any(arg.startswith("NCCL_") for arg in run[run.index("--entrypoint"):])  # never a flag


def test_a_ray_dry_run_says_what_each_trial_asks_of_the_cluster(tmp_path):
    out = autotuner("run", "--experiment", str(REPO / "experiments" / "quickstart-ray.yaml"), "--dry-run",
                    "--trials", "2", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith("# executor ray: each trial a Ray task on one node") for line in lines)
    asks = [line for line in lines if line.startswith("#   on Ray: asks ")]
    # The defaults' threads: every core of the node Ray picks; the weights (the GGUF's tensor data) in memory.
    assert re.fullmatch(r"#   on Ray: asks every CPU and \d+ MiB of memory on one node", asks[0]), asks
    assert len(asks) == 2 and asks[1].endswith("of memory on one node") and "every CPU" not in asks[1], asks
