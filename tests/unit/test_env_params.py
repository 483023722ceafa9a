"""Environment-variable params: a search space sets only variables its engine adapter allows, each value
reaches only the variable its param names (process env, `docker run -e`, the printed command), and
anything else is one config error naming the file and the field."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from autotuner.config import ConfigError, load_experiment
from autotuner.core import launch, preflight
from autotuner.engines._base import EnvParamError, get_engine

SPACE = ("engine: vllm\nparams:\n  max_num_seqs: {type: categorical, choices: [8, 16]}\n"
         "  nccl_proto: {type: categorical, env: NCCL_PROTO, choices: [LL, Simple]}\n")
EXP = ("name: t\nengine: vllm\nmodel: {path: m}\nsearch_space: s.yaml\nhardware: {gpus: 2}\n"
       "launcher: docker\ndocker: {image: vllm/vllm-openai:v0.32.0}\n")


def _experiment(tmp_path: Path, space: str = SPACE, experiment: str = EXP):
    (tmp_path / "exp.yaml").write_text(experiment)
    (tmp_path / "s.yaml").write_text(space)
    (tmp_path / "m").mkdir(exist_ok=True)
    return load_experiment(tmp_path / "exp.yaml")


def test_an_allowed_variable_reaches_only_itself_in_env_docker_and_the_printed_command(tmp_path):
    exp = _experiment(tmp_path)
    engine = preflight.check(exp)
    params = {"max_num_seqs": 8, "nccl_proto": "LL"}
    assert engine.tuning_env(params) == {"NCCL_PROTO": "LL"}
    assert engine.tuning_args(params) == ["--max-num-seqs", "8"]  # no flag for it
    assert engine.describe(params) == "NCCL_PROTO=LL --max-num-seqs 8"
    planned = launch.planned(exp, engine, params, port=8000, binary=None)
    assert planned.spec.env["NCCL_PROTO"] == "LL"
    docker = planned.docker or []
    assert docker[docker.index("NCCL_PROTO=LL") - 1] == "-e"
    assert shlex.split(planned.command).count("NCCL_PROTO=LL") == 1  # the printed command, once


def test_a_variable_outside_the_allow_list_is_one_line_naming_the_file_and_field(tmp_path):
    exp = _experiment(tmp_path, SPACE + "  preload: {type: categorical, env: LD_PRELOAD, choices: [/x.so]}\n")
    with pytest.raises(ConfigError) as err:
        preflight.check(exp)
    assert str(err.value).startswith(f"{tmp_path / 's.yaml'}: field 'params.preload.env': vllm takes no environment "
                                     "variable LD_PRELOAD from a search space (allowed: NCCL_ALGO, ")


def test_an_env_param_named_like_an_engine_param_is_refused(tmp_path):
    exp = _experiment(tmp_path, SPACE + "  max_num_batched_tokens: {type: categorical, env: NCCL_ALGO, "
                                        "choices: [Ring]}\n")
    with pytest.raises(ConfigError, match=r"field 'params.max_num_batched_tokens.env': 'max_num_batched_tokens' is "
                                          r"a vllm param already"):
        preflight.check(exp)


def test_a_value_the_allow_list_does_not_take_is_refused(tmp_path):
    exp = _experiment(tmp_path, SPACE + "  p2p: {type: categorical, env: NCCL_P2P_LEVEL, choices: [PHB, NEAR]}\n")
    with pytest.raises(ConfigError, match=r"field 'params': 'p2p': 'NEAR' is not accepted by vllm"):
        preflight.check(exp)


@pytest.mark.parametrize("fixed", ["env: {NCCL_PROTO: Simple}\n", "docker: {image: i, env: {NCCL_PROTO: Simple}}\n",
                                   "docker: {image: i, pass_env: [NCCL_PROTO]}\n"])
def test_a_searched_variable_the_experiment_also_fixes_is_refused(tmp_path, fixed):
    experiment = EXP.replace("docker: {image: vllm/vllm-openai:v0.32.0}\n", "") + fixed
    exp = _experiment(tmp_path, experiment=experiment)
    with pytest.raises(ConfigError, match=r"exp.yaml: field '(docker\.)?(pass_)?env': NCCL_PROTO is searched by the space's "
                                          r"param 'nccl_proto'"):
        preflight.check(exp)


def test_a_malformed_variable_name_is_a_field_error(tmp_path):
    with pytest.raises(ConfigError, match=r"s.yaml: field 'params.x.env': String should match pattern"):
        _experiment(tmp_path, SPACE + "  x: {type: categorical, env: 'A B', choices: [1]}\n")


def test_binding_leaves_the_adapter_table_alone():
    bound = get_engine("vllm", {"nccl_proto": "NCCL_PROTO"})
    assert "nccl_proto" in bound.flags and "nccl_proto" not in get_engine("vllm").flags
    with pytest.raises(EnvParamError):
        get_engine("llamacpp", {"x": "NCCL_PROTO"})  # llama.cpp publishes no allow-list
    assert get_engine("sglang", {"p": "NCCL_P2P_LEVEL"}).tuning_env({"p": "SYS"}) == {"NCCL_P2P_LEVEL": "SYS"}
