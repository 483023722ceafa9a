"""The winner in every export format, from a real llama.cpp launch spec (pure)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from autotuner.engines._base import LaunchContext, LaunchSpec, get_engine
from autotuner.report import export

PARAMS = {"parallel": 8, "threads": 2, "threads_batch": 2, "cont_batching": False, "flash_attn": "on",
          "cache_type_v": "q8_0", "kv_unified": True}


def spec() -> LaunchSpec:
    ctx = LaunchContext(model_path=Path("/data/models/m.gguf"), served_model_name="m", port=8080, binary="/opt/llama-server")
    return get_engine("llamacpp").build(PARAMS, ctx)


DOCKER = ["docker", "run", "--rm", "img", "--alias", "m"]


def run(fmt: str) -> str:
    engine = get_engine("llamacpp")
    return export.export(fmt, engine="llamacpp", spec=spec(), command=spec().command_line(), docker=DOCKER,
                         tuning_args=engine.tuning_args(PARAMS), params=PARAMS)


def test_args_and_docker_are_the_launchs_own_commands():
    assert run("args").strip() == spec().command_line()
    assert shlex.split(run("docker")) == DOCKER


def test_config_is_the_ini_llama_server_reads():
    text = run("config")
    lines = text.splitlines()
    assert "[*]" in lines and "version = 1" in lines
    for line in ("parallel = 8", "threads-batch = 2", "cont-batching = false", "flash-attn = on",
                 "cache-type-v = q8_0", "kv-unified = true", "model = /data/models/m.gguf", "metrics = true"):
        assert line in lines


def test_env_uses_llama_arg_variables_and_lists_flags_without_one():
    text = run("env")
    assert "LLAMA_ARG_N_PARALLEL=8" in text and "LLAMA_ARG_CONT_BATCHING=false" in text
    assert "LLAMA_ARG_CACHE_TYPE_V=q8_0" in text and "LLAMA_ARG_KV_UNIFIED=true" in text
    assert "# no environment variable for: -tb 2" in text


def test_yaml_for_llamacpp_records_the_winner_and_says_it_is_not_read():
    text = run("yaml")
    assert text.startswith("# llama-server reads no YAML")
    assert yaml.safe_load(text)["params"] == PARAMS


def test_long_option_engines_get_their_config_yaml():
    s = LaunchSpec(argv=["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m", "--max-num-seqs", "8",
                         "--enforce-eager", "--no-enable-chunked-prefill", "--gpu-memory-utilization", "0.9"],
                   port=8000, served_model_name="m")
    text = export.export("yaml", engine="vllm", spec=s, command="", docker=[], tuning_args=[], params={})
    assert yaml.safe_load(text) == {"model": "/m", "max-num-seqs": 8, "enforce-eager": True,
                                    "enable-chunked-prefill": False, "gpu-memory-utilization": 0.9}
    with pytest.raises(export.ExportError, match="reads its settings"):
        export.export("env", engine="vllm", spec=s, command="", docker=[], tuning_args=[], params={})
    with pytest.raises(export.ExportError, match="formats: args"):
        export.export("toml", engine="vllm", spec=s, command="", docker=[], tuning_args=[], params={})


def test_a_vllm_config_file_names_the_environment_its_params_set():
    s = get_engine("vllm").build({"max_num_seqs": 8}, LaunchContext(model_path=Path("/m"), served_model_name="m",
                                                                    port=8080, gpus=2))
    text = export.export("yaml", engine="vllm", spec=s, command="", docker=[], tuning_args=[], params={},
                         tuning_env={"NCCL_PROTO": "LL", "VLLM_TUNED_CONFIG_FOLDER": "/moe configs"})
    assert "# Set in the engine's environment too: NCCL_PROTO=LL VLLM_TUNED_CONFIG_FOLDER='/moe configs'\n" in text
    assert "max-num-seqs: 8" in text
