"""The winner in every export format, from a real llama.cpp launch spec (pure)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from autotuner import export
from autotuner.engines._base import LaunchContext, LaunchSpec, get_engine

PARAMS = {"parallel": 8, "threads": 2, "threads_batch": 2, "cont_batching": False, "flash_attn": "on",
          "cache_type_v": "q8_0", "kv_unified": True}


def spec() -> LaunchSpec:
    ctx = LaunchContext(model_path=Path("/data/models/m.gguf"), served_model_name="m", port=8080, binary="/opt/llama-server")
    return get_engine("llamacpp").build(PARAMS, ctx)


def run(fmt: str, **kw) -> str:
    engine = get_engine("llamacpp")
    return export.export(fmt, engine="llamacpp", spec=spec(), tuning_args=engine.tuning_args(PARAMS),
                         model_path="/data/models/m.gguf", params=PARAMS, version="0.5.0+abc", **kw)


def test_args_is_the_command_line():
    assert run("args").strip() == spec().command_line()


def test_docker_line_mounts_the_model_and_listens_inside():
    argv = shlex.split(run("docker", gpus=2))
    assert argv[:4] == ["docker", "run", "--rm", "--init"]
    assert "-p" in argv and argv[argv.index("-p") + 1] == "127.0.0.1:8080:8080"
    assert argv[argv.index("-v") + 1] == "/data/models:/models:ro"
    assert argv[argv.index("--gpus") + 1] == "all"
    image = argv.index("autotuner/llama-server:0.5.0-abc")
    engine_args = argv[image + 1:]
    assert engine_args[:2] == ["--model", "/models/m.gguf"]
    assert engine_args[engine_args.index("--host") + 1] == "0.0.0.0"
    assert "-np" in engine_args and "/opt/llama-server" not in argv


def test_docker_keeps_a_container_spec_and_its_env():
    s = LaunchSpec(argv=["vllm", "serve", "/m", "--port", "8000"], port=8000, served_model_name="m",
                   env={"VLLM_X": "1"}, image="vllm/vllm-openai:v0.9")
    argv = export.docker_run_argv(s, engine="vllm", model_path="/m", host_port=9000)
    assert "127.0.0.1:9000:8000" in argv and "VLLM_X=1" in argv
    assert argv[argv.index("vllm/vllm-openai:v0.9") + 1:] == ["vllm", "serve", "/models/m", "--port", "8000"]


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
    text = export.export("yaml", engine="vllm", spec=s, tuning_args=[], model_path="/m", params={})
    assert yaml.safe_load(text) == {"model": "/m", "max-num-seqs": 8, "enforce-eager": True,
                                    "enable-chunked-prefill": False, "gpu-memory-utilization": 0.9}
    with pytest.raises(export.ExportError, match="reads its settings"):
        export.export("env", engine="vllm", spec=s, tuning_args=[], model_path="/m", params={})
    with pytest.raises(export.ExportError, match="formats: args"):
        export.export("toml", engine="vllm", spec=s, tuning_args=[], model_path="/m", params={})
