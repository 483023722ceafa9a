"""A LaunchSpec as a pasteable `docker run` line, and the model facts the rules read from config.json."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from autotuner.engines._base import LaunchContext, LaunchSpec, get_engine
from autotuner.launchers.docker_command import docker_run_argv, docker_run_line
from autotuner.model_facts import read_model_facts


def test_docker_run_line_for_an_eight_gpu_vllm_launch():
    spec = get_engine("vllm").build({"parallel_layout": "TP8", "moe_config_folder": "/moe-configs/tp8"},
                                    LaunchContext(model_path=Path("/models/GLM-5"), served_model_name="glm-5",
                                                  port=8000, host="0.0.0.0", gpus=8))
    argv = docker_run_argv(spec, gpus=8, volumes=["/models/GLM-5:/models/GLM-5:ro"], name="t1",
                           labels={"autotuner.study": "s"})
    assert argv == ["docker", "run", "--rm", "--init", "--name", "t1", "--label", "autotuner.study=s",
                    "--gpus", "8", "--ipc=host", "-p", "127.0.0.1:8000:8000", "-v", "/models/GLM-5:/models/GLM-5:ro",
                    "-e", "DO_NOT_TRACK=1", "-e", "VLLM_NO_USAGE_STATS=1", "-e", "VLLM_TUNED_CONFIG_FOLDER=/moe-configs/tp8",
                    "--entrypoint", "vllm", "vllm/vllm-openai:v0.32.0", "serve", "--model", "/models/GLM-5",
                    "--host", "0.0.0.0", "--port", "8000", "--served-model-name", "glm-5",
                    "--tensor-parallel-size", "8"]
    # One line a shell splits back into exactly that argv.
    assert shlex.split(docker_run_line(spec, gpus=8, volumes=["/models/GLM-5:/models/GLM-5:ro"], name="t1",
                                       labels={"autotuner.study": "s"})) == argv


def test_docker_run_needs_an_image_and_quotes_what_a_shell_would_split():
    spec = LaunchSpec(argv=["python3", "-m", "x", "--chat-template", "{{ a b }}"], port=1, served_model_name="m",
                      env={"A": "x y"})
    with pytest.raises(ValueError, match="no image"):
        docker_run_argv(spec)
    line = docker_run_line(spec, image="img:1")
    assert "'{{ a b }}'" in line and "'A=x y'" in line and "--gpus" not in line


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
