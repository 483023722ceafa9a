"""The vLLM adapter: params reach only their own flag or env var, with vLLM 0.32's spelling; configs vLLM
would reject at start are infeasible before any launch; start-up failures are classified from its log."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotuner.engines._base import EngineError, LaunchContext, get_engine

PY = "/venv/bin/python"
CTX = LaunchContext(model_path=Path("/m/llama"), served_model_name="tiny", port=4321, binary=PY)


@pytest.fixture
def vllm():
    return get_engine("vllm")


def test_defaults_launch_the_api_server_module_on_the_cpu_build(vllm):
    spec = vllm.build({}, CTX)
    assert spec.argv == [PY, "-m", "vllm.entrypoints.openai.api_server", "--model", "/m/llama", "--host",
                         "127.0.0.1", "--port", "4321", "--served-model-name", "tiny"]
    assert spec.env["VLLM_TARGET_DEVICE"] == "cpu" and spec.env["VLLM_NO_USAGE_STATS"] == "1"
    assert spec.health_path == "/health"


def test_gpu_deployment_in_a_container_uses_vllm_serve_and_no_cpu_env(vllm):
    spec = vllm.build({}, LaunchContext(model_path=Path("/m"), served_model_name="m", port=8000, gpus=8))
    assert spec.argv[:3] == ["vllm", "serve", "--model"]
    assert "VLLM_TARGET_DEVICE" not in spec.env
    assert spec.image == "vllm/vllm-openai:v0.32.0"


def test_every_tuning_param_maps_to_its_flag(vllm):
    params = {"tensor_parallel_size": 2, "pipeline_parallel_size": 2, "data_parallel_size": 2,
              "enable_expert_parallel": True, "max_num_seqs": 64, "max_num_batched_tokens": 4096,
              "enable_chunked_prefill": False, "async_scheduling": True, "max_model_len": 2048,
              "gpu_memory_utilization": 0.9, "kv_cache_dtype": "fp8", "block_size": 32,
              "enable_prefix_caching": False, "enforce_eager": True, "optimization_level": 3,
              "cudagraph_capture_sizes": "1,2,4,8", "max_cudagraph_capture_size": 256, "dtype": "bfloat16",
              "quantization": "modelopt_fp4", "attention_backend": "FLASHINFER", "moe_backend": "flashinfer_cutlass"}
    assert vllm.tuning_args(params) == [
        "--tensor-parallel-size", "2", "--pipeline-parallel-size", "2", "--data-parallel-size", "2",
        "--enable-expert-parallel", "--max-num-seqs", "64", "--max-num-batched-tokens", "4096",
        "--no-enable-chunked-prefill", "--async-scheduling", "--max-model-len", "2048",
        "--gpu-memory-utilization", "0.9", "--kv-cache-dtype", "fp8", "--block-size", "32",
        "--no-enable-prefix-caching", "--enforce-eager", "--optimization-level", "3",
        "--cudagraph-capture-sizes", "1", "2", "4", "8", "--max-cudagraph-capture-size", "256", "--dtype", "bfloat16",
        "--quantization", "modelopt_fp4", "--attention-backend", "FLASHINFER", "--moe-backend", "flashinfer_cutlass"]


def test_env_params_become_environment_and_never_flags(vllm):
    params = {"moe_config_folder": "/moe/tp8", "cpu_kvcache_space_gb": 2, "cpu_omp_threads_bind": "nobind",
              "max_num_seqs": 8}
    assert vllm.tuning_args(params) == ["--max-num-seqs", "8"]
    spec = vllm.build(params, CTX)
    assert {"VLLM_TUNED_CONFIG_FOLDER": "/moe/tp8", "VLLM_CPU_KVCACHE_SPACE": "2",
            "VLLM_CPU_OMP_THREADS_BIND": "nobind"}.items() <= spec.env.items()
    assert vllm.describe(params) == ("VLLM_TUNED_CONFIG_FOLDER=/moe/tp8 VLLM_CPU_KVCACHE_SPACE=2 "
                                     "VLLM_CPU_OMP_THREADS_BIND=nobind --max-num-seqs 8")


def test_auto_and_default_pass_nothing_so_vllm_decides(vllm):
    params = {"attention_backend": "auto", "quantization": "auto", "moe_config_folder": "default"}
    assert vllm.tuning_args(params) == [] and vllm.tuning_env(params) == {}


def test_experiment_env_is_set_and_a_tuned_env_param_overrides_it(vllm):
    ctx = LaunchContext(model_path=Path("/m"), served_model_name="m", port=1, binary=PY,
                        extra_env=(("VLLM_CPU_KVCACHE_SPACE", "1"), ("HF_HUB_OFFLINE", "1")))
    assert vllm.build({}, ctx).env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    spec = vllm.build({"cpu_kvcache_space_gb": 4}, ctx)
    assert spec.env["VLLM_CPU_KVCACHE_SPACE"] == "4" and spec.env["HF_HUB_OFFLINE"] == "1"
    assert "VLLM_CPU_KVCACHE_SPACE=4" in spec.command_line()


def test_parallel_layout_is_one_choice_for_the_whole_split(vllm):
    assert vllm.tuning_args({"parallel_layout": "TP8"}) == ["--tensor-parallel-size", "8"]
    assert vllm.tuning_args({"parallel_layout": "TP4xPP2"}) == ["--tensor-parallel-size", "4",
                                                                 "--pipeline-parallel-size", "2"]
    assert vllm.gpus_needed({"parallel_layout": "TP2xPP2xDP2"}) == 8
    vllm.check_space(["parallel_layout"], {"parallel_layout": ["TP8", "TP4xPP2", "TP2xPP4"]})
    with pytest.raises(EngineError, match=r"'TP4\+PP2' is not of the form TP<n>\[xPP<n>\]\[xDP<n>\]"):
        vllm.check_space(["parallel_layout"], {"parallel_layout": ["TP4+PP2"]})
    with pytest.raises(EngineError, match="'parallel_layout' and 'tensor_parallel_size' both set"):
        vllm.check_space(["parallel_layout", "tensor_parallel_size"], {})


def test_space_with_unknown_param_or_value_is_refused_with_the_valid_names(vllm):
    with pytest.raises(EngineError, match=r"'max_num_seq' is not a vllm param \(known: all2all_backend, async_scheduling, "):
        vllm.check_space(["max_num_seq"], {})
    with pytest.raises(EngineError, match=r"'kv_cache_dtype': 'fp9' is not accepted by vllm"):
        vllm.check_space(["kv_cache_dtype"], {"kv_cache_dtype": ["auto", "fp9"]})


# --- rules checked before any launch ---------------------------------------------------------------

DENSE_8B = {"num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32, "num_experts": 0,
            "max_position_embeddings": 131072}
MOE = {"num_attention_heads": 64, "num_key_value_heads": 64, "num_hidden_layers": 78, "num_experts": 256}


def ctx(**facts):
    return {"input_len": 128, "output_len": 64, "gpus": 8, "engine_args": (), **facts}


@pytest.mark.parametrize("params, context, rule", [
    ({"parallel_layout": "TP8xPP2"}, ctx(), "TP x PP x DP = 8x2x1 = 16 GPUs, more than the 8 the experiment declares"),
    ({"tensor_parallel_size": 2}, ctx(gpus=0), "a CPU deployment (hardware.gpus: 0) runs one engine process"),
    ({"tensor_parallel_size": 8}, ctx(num_attention_heads=12), "TP = 8 must divide the model's 12 attention heads"),
    ({"tensor_parallel_size": 4}, ctx(num_attention_heads=12, num_key_value_heads=6),
     "TP = 4 and the model's 6 KV heads: one must divide the other"),
    ({"parallel_layout": "TP1xPP8"}, ctx(num_hidden_layers=6), "PP = 8 is more than the model's 6 layers"),
    ({"tensor_parallel_size": 2, "enable_expert_parallel": True}, ctx(**DENSE_8B),
     "expert parallel needs a MoE model, and config.json names no experts"),
    ({"enable_expert_parallel": True}, ctx(), "expert parallel with TP x DP = 1 has a single expert-parallel rank"),
    ({"block_size": 16}, ctx(gpus=0), "block_size = 16: the CPU attention backend needs a multiple of 32"),
    ({"block_size": 8}, ctx(), "block_size = 8: vLLM's GPU attention backends need a multiple of 16"),
    ({"block_size": 128, "attention_backend": "FLASHINFER"}, ctx(), "block_size = 128: FLASHINFER takes 16, 32, 64"),
    ({"enable_chunked_prefill": False, "max_num_batched_tokens": 2048, "max_model_len": 8192}, ctx(),
     "chunked prefill off: max_num_batched_tokens = 2048 must be at least max_model_len = 8192"),
    ({"enable_chunked_prefill": False, "max_num_batched_tokens": 8192}, ctx(**DENSE_8B),
     "max_num_batched_tokens = 8192 must be at least max_model_len = 131072"),
    ({"max_num_batched_tokens": 256, "max_num_seqs": 512}, ctx(),
     "max_num_batched_tokens = 256 must be at least max_num_seqs = 512"),
    ({"max_model_len": 128}, ctx(), "max_model_len = 128 is shorter than the workload's longest request (192 tokens, prompt and output)"),
])
def test_each_rule_names_what_broke_it(vllm, params, context, rule):
    broken = vllm.infeasible(params, context)
    assert any(rule in b for b in broken), broken


def test_feasible_configs_break_no_rule(vllm):
    assert vllm.infeasible({}, ctx(gpus=0)) == []
    assert vllm.infeasible({"block_size": 64, "max_num_seqs": 32, "max_num_batched_tokens": 512,
                            "enable_chunked_prefill": False}, ctx(gpus=0, max_position_embeddings=512)) == []
    assert vllm.infeasible({"parallel_layout": "TP4xPP2", "enable_expert_parallel": True, "max_num_seqs": 1024,
                            "max_num_batched_tokens": 8192, "block_size": 64}, ctx(**MOE)) == []
    assert vllm.infeasible({"tensor_parallel_size": 16}, ctx(gpus=16, num_attention_heads=64, num_key_value_heads=8)) == []


def test_fixed_engine_args_take_part_in_the_rules(vllm):
    context = ctx(engine_args=("--max-model-len=4096", "--no-enable-chunked-prefill", "--tensor-parallel-size", "2"))
    broken = vllm.infeasible({"max_num_batched_tokens": 2048}, context)
    assert any("2048 must be at least max_model_len = 4096" in b for b in broken)
    assert vllm.infeasible({"max_num_batched_tokens": 4096}, {**context, "gpus": 1})[0].startswith(
        "TP x PP x DP = 2x1x1 = 2 GPUs")


# --- failures read from vLLM's log --------------------------------------------------------------------

def test_failure_classes_from_real_vllm_log_lines(vllm):
    # Each line as vLLM 0.32.0 printed it on this machine or as its source raises it.
    block = ("(EngineCore pid=4242) ERROR 12-02 11:57:01 [core.py:1042] ValueError: No common block size for 16 "
             "(CPU_ATTN: [MultipleOf(32)])")
    assert vllm.classify_failure("Traceback (most recent call last):\n" + block + "\nEngine core failed") == (
        "block-size", block)
    assert vllm.classify_failure("usage: api_server.py [-h]\napi_server.py: error: unrecognized arguments: "
                                 "--max-num-sequences") == (
        "bad-flag", "api_server.py: error: unrecognized arguments: --max-num-sequences")
    assert vllm.classify_failure("api_server.py: error: argument --kv-cache-dtype: invalid choice: 'fp9' "
                                 "(choose from 'auto', 'fp8')")[0] == "bad-flag"
    assert vllm.classify_failure("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")[0] == "oom"
    assert vllm.classify_failure("ValueError: No available memory for the cache blocks. Try increasing "
                                 "`gpu_memory_utilization` when initializing the engine.")[0] == "oom"
    assert vllm.classify_failure("ValueError: To serve at least one request with the models's max seq len "
                                 "(131072), (16.0 GiB KV cache is needed, which is larger than the available KV "
                                 "cache memory (9.5 GiB).")[0] == "oom"
    assert vllm.classify_failure("ValueError: Invalid attention backend for cuda: FLASHMLA")[0] == "backend"
    assert vllm.classify_failure("ValueError: Total number of attention heads (12) must be divisible by tensor "
                                 "parallel size (8).")[0] == "bad-config"


def test_a_kill_by_signal_9_without_a_telling_line_is_out_of_memory(vllm):
    cls, reason = vllm.classify_failure("INFO loading weights\n", exit_code=-9)
    assert cls == "oom" and "signal 9" in reason
    assert vllm.classify_failure("INFO all fine", exit_code=1) == (None, None)


def test_version_and_binary(vllm, monkeypatch, tmp_path):
    assert vllm.parse_version("some warning\nvllm 0.32.0\n") == "0.32.0"
    # `vllm --version` in the image: the bare version after the platform log line the import prints.
    assert vllm.parse_version("INFO 12-03 10:00:00 [__init__.py:216] Automatically detected platform cuda.\n"
                              "0.32.0\n") == "0.32.0"
    assert vllm.version_argv(PY)[:2] == [PY, "-c"]
    monkeypatch.setenv("AUTOTUNER_VLLM_PYTHON", "/opt/vllm/bin/python")
    assert vllm.find_binary()[0] == "/opt/vllm/bin/python"
    monkeypatch.delenv("AUTOTUNER_VLLM_PYTHON")
    monkeypatch.setenv("AUTOTUNER_CACHE", str(tmp_path))
    binary, hint = vllm.find_binary()
    assert binary is None and "scripts/setup-vllm.sh" in hint


def test_float_steps_reach_the_engine_without_binary_noise(vllm):
    # Optuna samples 0.8500000000000001 from a float param with step 0.05.
    assert vllm.tuning_args({"gpu_memory_utilization": 0.8500000000000001}) == ["--gpu-memory-utilization", "0.85"]


def test_the_moe_knobs_use_vllm_032_spellings(vllm):
    args = vllm.tuning_args({"parallel_layout": "TP2xDP4", "enable_expert_parallel": True,
                             "all2all_backend": "deepep_low_latency", "enable_eplb": True, "enable_dbo": True,
                             "decode_context_parallel_size": 2, "disable_custom_all_reduce": True})
    assert args == ["--tensor-parallel-size", "2", "--data-parallel-size", "4", "--enable-expert-parallel",
                    "--all2all-backend", "deepep_low_latency", "--enable-eplb", "--enable-dbo",
                    "--decode-context-parallel-size", "2", "--disable-custom-all-reduce"]


def test_cuda_graph_mode_and_mtp_are_json_configs_and_their_defaults_pass_nothing(vllm):
    assert vllm.tuning_args({"cudagraph_mode": "FULL_DECODE_ONLY"}) == [
        "--compilation-config", '{"cudagraph_mode": "FULL_DECODE_ONLY"}']
    assert vllm.tuning_args({"mtp_draft_tokens": 2}) == [
        "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 2}']
    assert vllm.tuning_args({"cudagraph_mode": "auto", "mtp_draft_tokens": 0}) == []
    # The experiment's fixed --compilation-config is not mistaken for a param's value.
    assert "cudagraph_mode" not in vllm.effective({}, ["--compilation-config", '{"mode": 3}'])


def test_tp_x_dp_with_expert_parallel_occupies_every_rank_and_dcp_none_more(vllm):
    assert vllm.gpus_needed({"parallel_layout": "TP2xDP4", "enable_expert_parallel": True}) == 8
    assert vllm.gpus_needed({"parallel_layout": "TP8", "decode_context_parallel_size": 4}) == 8  # DCP reuses TP
    glm5 = {"gpus": 8, "num_experts": 256, "num_attention_heads": 64, "num_key_value_heads": 64,
            "kv_lora_rank": 512, "num_nextn_predict_layers": 1}
    assert vllm.infeasible({"parallel_layout": "TP1xDP8", "enable_expert_parallel": True, "enable_eplb": True,
                            "decode_context_parallel_size": 1, "mtp_draft_tokens": 3}, glm5) == []
    assert vllm.infeasible({"parallel_layout": "TP8", "decode_context_parallel_size": 8}, glm5) == []  # MLA


@pytest.mark.parametrize("params, context, rule", [
    ({"enable_eplb": True, "tensor_parallel_size": 2}, {}, "enable_eplb balances expert-parallel ranks"),
    ({"enable_expert_parallel": True, "tensor_parallel_size": 2, "enable_dbo": True}, {},
     "enable_dbo (microbatching) runs only over all2all_backend deepep_low_latency"),
    ({"enable_expert_parallel": True, "tensor_parallel_size": 2, "all2all_backend": "moonep", "enable_eplb": True},
     {}, "moonep does not support enable_eplb"),
    ({"moe_backend": "flashinfer_moe_ep_cutedsl", "tensor_parallel_size": 2}, {}, "needs enable_expert_parallel"),
    ({"moe_backend": "flashinfer_moe_ep_cutedsl", "enable_expert_parallel": True, "tensor_parallel_size": 2,
      "all2all_backend": "deepep_low_latency"}, {}, "dispatches and combines itself"),
    ({"parallel_layout": "TP2xPP4", "decode_context_parallel_size": 4}, {},
     "decode_context_parallel_size = 4 must divide TP = 2"),
    ({"tensor_parallel_size": 8, "decode_context_parallel_size": 2}, {"num_key_value_heads": 8},
     "without MLA needs TP = 8 above the model's 8 KV heads"),
    ({"tensor_parallel_size": 8, "decode_context_parallel_size": 4},
     {"num_attention_heads": 32, "num_key_value_heads": 4}, "more than TP / KV heads = 8/4"),
    ({"tensor_parallel_size": 8, "decode_context_parallel_size": 2},
     {"num_attention_heads": 12, "num_key_value_heads": 4}, "must divide the model's 3 query heads per KV head"),
    ({"mtp_draft_tokens": 1}, {"num_nextn_predict_layers": 0}, "the model has no multi-token-prediction layers"),
    ({"mtp_draft_tokens": 3}, {"num_nextn_predict_layers": 2}, "must be a multiple of the model's 2 MTP layers"),
])
def test_moe_dcp_and_mtp_rules_are_vllms_own(vllm, params, context, rule):
    broken = vllm.infeasible(params, {"gpus": 8, **context})
    assert any(rule in b for b in broken), broken


def test_model_facts_tell_mla_and_mtp_layers(tmp_path):
    import json

    from autotuner.models.facts import read_model_facts

    (tmp_path / "config.json").write_text(json.dumps({"num_attention_heads": 64, "kv_lora_rank": 512,
                                                      "num_nextn_predict_layers": 1, "n_routed_experts": 256}))
    facts = read_model_facts(tmp_path)
    assert facts["kv_lora_rank"] == 512 and facts["num_nextn_predict_layers"] == 1 and facts["num_experts"] == 256
