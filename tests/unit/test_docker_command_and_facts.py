"""A LaunchSpec as a pasteable `docker run` line, and the model facts the rules read from config.json."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from autotuner.config import DockerConfig
from autotuner.engines._base import LaunchContext, LaunchSpec, get_engine
from autotuner.launchers.docker_command import container_context, docker_run_argv, docker_run_line, mounts
from autotuner.models.facts import read_model_facts


def test_docker_run_line_for_an_eight_gpu_vllm_launch():
    settings = DockerConfig(image="vllm/vllm-openai:v0.32.0", ipc_host=True)
    mounted = mounts(settings, Path("/models/GLM-5"))
    ctx = container_context(settings, mounted, LaunchContext(model_path=Path("/models/GLM-5"), served_model_name="glm-5",
                                                             port=41234, gpus=8))
    spec = get_engine("vllm").build({"parallel_layout": "TP8", "moe_config_folder": "/moe-configs/tp8"}, ctx)
    argv = docker_run_argv(settings, mounted, spec, gpus=8, host_port=None, name="t1", labels={"autotuner.study": "s"})
    # vLLM's image has the entrypoint `vllm serve`: the spec's binary replaces it, so `serve` is said once.
    assert argv == ["docker", "run", "--rm", "--init", "--name", "t1", "--label", "autotuner.study=s",
                    "-p", "127.0.0.1::8000", "--ipc", "host", "--gpus", "8", "-v", "/models/GLM-5:/models/GLM-5:ro",
                    "-e", "DO_NOT_TRACK=1", "-e", "VLLM_NO_USAGE_STATS=1", "-e", "VLLM_TUNED_CONFIG_FOLDER=/moe-configs/tp8",
                    "--stop-timeout", "10", "--entrypoint", "vllm", "vllm/vllm-openai:v0.32.0", "serve",
                    "--model", "/models/GLM-5", "--host", "0.0.0.0", "--port", "8000", "--served-model-name", "glm-5",
                    "--tensor-parallel-size", "8"]
    # One line a shell splits back into exactly that argv.
    assert shlex.split(docker_run_line(settings, mounted, spec, gpus=8, host_port=None, name="t1",
                                       labels={"autotuner.study": "s"})) == argv


def test_docker_run_quotes_what_a_shell_would_split_and_names_secrets_only():
    spec = LaunchSpec(argv=["python3", "-m", "x", "--chat-template", "{{ a b }}"], port=1, served_model_name="m",
                      env={"A": "x y"}, secret_env={"HF_TOKEN": "hf_secret"})
    line = docker_run_line(DockerConfig(image="img:1"), [], spec, gpus=None, host_port=9)
    assert "'{{ a b }}'" in line and "'A=x y'" in line and "--gpus" not in line
    assert "-e HF_TOKEN " in line and "hf_secret" not in line


def test_model_facts_from_config_json(tmp_path):
    assert read_model_facts(tmp_path) == {}
    (tmp_path / "config.json").write_text(json.dumps({
        "num_attention_heads": 12, "num_key_value_heads": 4, "num_hidden_layers": 6,
        "max_position_embeddings": 4096, "hidden_size": 768}))
    assert read_model_facts(tmp_path) == {"num_attention_heads": 12, "num_key_value_heads": 4, "num_hidden_layers": 6,
                                          "max_position_embeddings": 4096, "num_experts": 0}
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"num_attention_heads": 64, "n_routed_experts": 256,
                                                                      "num_hidden_layers": 78}}))
    facts = read_model_facts(tmp_path)
    assert facts["num_experts"] == 256 and facts["num_key_value_heads"] == 64
    (tmp_path / "config.json").write_text("{not json")
    assert read_model_facts(tmp_path) == {}
