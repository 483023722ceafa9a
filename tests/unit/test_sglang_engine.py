"""The SGLang adapter: every flag and value it can emit exists in SGLang 0.5.23's parser as recorded from
SGLang's own source (autotuner/engines/sglang_flags.json), and its pre-launch rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotuner.engines._base import LaunchContext, get_engine
from autotuner.util import paths
from tests.engine_samples import emitted_argvs, launch_args, param_values

RECORDED = json.loads((Path(__file__).resolve().parents[2] / "autotuner" / "engines" / "sglang_flags.json").read_text())


@pytest.fixture
def sglang():
    return get_engine("sglang")


def test_the_recorded_list_is_of_the_version_we_target():
    assert RECORDED["sglang_version"] == paths.SGLANG_VERSION == "0.5.23"
    assert len(RECORDED["flags"]) > 400


def test_every_flag_and_value_we_emit_is_in_sglangs_recorded_parser(sglang):
    flags = RECORDED["flags"]
    argvs = [launch_args(sglang, "python3")] + emitted_argvs(sglang)
    for argv in argvs:
        for i, arg in enumerate(argv):
            if not arg.startswith("--"):
                continue
            assert arg in flags, f"{arg} is not a flag of SGLang {RECORDED['sglang_version']}"
            assert not flags[arg]["deprecated"], f"{arg} is deprecated in SGLang {RECORDED['sglang_version']}"
            choices = flags[arg]["choices"]
            if choices is not None:
                assert argv[i + 1] in choices, f"{arg} {argv[i + 1]}: not among {choices}"


def test_params_map_to_sglang_spellings(sglang):
    spec = sglang.build({"tp_size": 4, "ep_size": 4, "chunked_prefill_size": -1, "cuda_graph_max_bs": 256,
                         "enable_torch_compile": True, "attention_backend": "auto", "schedule_policy": "lpm"},
                        LaunchContext(model_path=Path("/m"), served_model_name="m", port=30000, gpus=4))
    assert spec.argv == ["python3", "-m", "sglang.launch_server", "--model-path", "/m", "--host", "127.0.0.1",
                         "--port", "30000", "--served-model-name", "m", "--enable-metrics", "--tp-size", "4",
                         "--ep-size", "4",
                         "--chunked-prefill-size", "-1", "--cuda-graph-max-bs-decode", "256",
                         "--enable-torch-compile", "--schedule-policy", "lpm"]
    assert sglang.gpus_needed({"tp_size": 4, "dp_size": 2}) == 8


@pytest.mark.parametrize("params, facts, rule", [
    ({"tp_size": 8, "dp_size": 2}, {}, "TP x PP x DP = 8x1x2 = 16 GPUs, more than the 8"),
    ({"tp_size": 4, "ep_size": 8}, {}, "ep_size = 8 must divide tp_size = 4"),
    ({"tp_size": 8, "attn_dp_size": 3}, {}, "attn_dp_size = 3 must divide tp_size = 8"),
    ({"tp_size": 8}, {"num_attention_heads": 12}, "attention TP = 8 must divide the model's 12 attention heads"),
    ({"tp_size": 2, "ep_size": 2}, {"num_experts": 0}, "expert parallel needs a MoE model"),
    ({"tp_size": 4, "dp_size": 2, "attn_dp_size": 4}, {}, "SGLang runs replicas or attention DP, not both"),
    ({"tp_size": 8, "ep_size": 8, "moe_a2a_backend": "pplx"}, {}, "pplx needs attention DP"),
])
def test_sglang_rules(sglang, params, facts, rule):
    broken = sglang.infeasible(params, {"gpus": 8, "input_len": 8, "output_len": 8, **facts})
    assert any(rule in b for b in broken), broken


def test_sglang_search_space_values_are_all_accepted(sglang):
    values = param_values(sglang)
    sglang.check_space(list(values), {k: v for k, v in values.items() if sglang.flags[k].choices is not None})


def test_metrics_are_always_on_and_read_by_their_0523_names(sglang):
    """The diagnosis reads /metrics, which SGLang serves only with --enable-metrics; the series names are
    those of SGLang 0.5.23's observability/metrics_collector.py."""
    spec = sglang.build({}, LaunchContext(model_path=Path("/m"), served_model_name="m", port=30000, gpus=1))
    assert "--enable-metrics" in spec.argv
    assert sglang.server_metrics["requests_waiting"][0] == "sglang:num_queue_reqs"
    assert sglang.server_metrics["preemptions_total"][0] == "sglang:num_retracted_requests_total"


def test_dp_attention_and_speculative_decoding_use_the_0523_spellings(sglang):
    args = sglang.tuning_args({"attn_dp_size": 8, "speculative_algorithm": "EAGLE", "speculative_num_steps": 3,
                               "speculative_eagle_topk": 1, "moe_a2a_backend": "deepep"})
    assert args == ["--attn-dp-size", "8", "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
                    "--speculative-eagle-topk", "1", "--moe-a2a-backend", "deepep"]
    assert sglang.tuning_args({"speculative_algorithm": "none"}) == []  # SGLang's default: no flag at all
    assert sglang.gpus_needed({"tp_size": 8, "attn_dp_size": 8}) == 8  # attention DP lives inside the TP group


def test_the_version_is_sglangs_not_pythons(tmp_path):
    """The server is `python3 -m sglang.launch_server`: `--version` of that binary would be Python's. The
    probe asks for the installed distribution's version; here it runs against a distribution's metadata."""
    import os
    import subprocess
    import sys

    sglang = get_engine("sglang")
    dist = tmp_path / "sglang-0.5.23.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23\n")
    out = subprocess.run(sglang.version_argv(sys.executable), capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert sglang.parse_version(out.stdout + out.stderr) == "0.5.23"
    assert sglang.parse_version("") == "unknown"
