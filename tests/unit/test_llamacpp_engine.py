"""The llama-server adapter: params reach only their own flags, with llama.cpp's spelling."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotuner.engines._base import EngineError, LaunchContext, get_engine

CTX = LaunchContext(model_path=Path("/m/model.gguf"), served_model_name="tiny", port=4321, binary="/bin/llama-server")


def test_defaults_launch_with_no_tuning_flags():
    spec = get_engine("llamacpp").build({}, CTX)
    assert spec.argv == ["/bin/llama-server", "--model", "/m/model.gguf", "--host", "127.0.0.1", "--port", "4321",
                         "--alias", "tiny", "--metrics"]
    assert spec.port == 4321 and spec.health_path == "/health"


def test_every_tuning_param_maps_to_its_flag():
    params = {"parallel": 8, "threads": 2, "threads_batch": 2, "batch_size": 512, "ubatch_size": 128,
              "cont_batching": False, "flash_attn": "on", "cache_type_k": "q8_0", "cache_type_v": "q8_0",
              "ctx_size": 8192, "kv_unified": True, "cache_reuse": 256, "load_mode": "mlock",
              "rope_freq_base": 500000}
    args = get_engine("llamacpp").build(params, CTX).argv[10:]
    assert args == ["-np", "8", "-t", "2", "-tb", "2", "-b", "512", "-ub", "128", "-nocb", "-fa", "on",
                    "-ctk", "q8_0", "-ctv", "q8_0", "-c", "8192", "-kvu", "--cache-reuse", "256", "-lm", "mlock",
                    "--rope-freq-base", "500000"]


def test_booleans_pick_the_on_or_off_flag_and_may_pass_nothing():
    engine = get_engine("llamacpp")
    assert engine.tuning_args({"cont_batching": True, "kv_unified": False}) == ["-cb", "-no-kvu"]


def test_space_with_unknown_param_or_value_is_refused_with_the_valid_names():
    engine = get_engine("llamacpp")
    with pytest.raises(EngineError, match=r"'n_gpu_layers' is not a llamacpp param \(known: batch_size, "):
        engine.check_space(["parallel", "n_gpu_layers"], {})
    with pytest.raises(EngineError, match=r"'flash_attn': 'yes' is not accepted by llamacpp"):
        engine.check_space(["flash_attn"], {"flash_attn": ["on", "yes"]})


def test_quantized_v_cache_without_flash_attention_is_infeasible():
    engine = get_engine("llamacpp")
    assert engine.infeasible({"flash_attn": "off", "cache_type_v": "q8_0"}, {})
    assert engine.infeasible({"flash_attn": "on", "cache_type_v": "q8_0"}, {}) == []


def test_failure_classes_from_the_server_log():
    engine = get_engine("llamacpp")
    assert engine.classify_failure("x\nsrc/llama-context.cpp:1: GGML_ASSERT(n_outputs_max <= x) failed\n#1 gdb") == (
        "assert", "src/llama-context.cpp:1: GGML_ASSERT(n_outputs_max <= x) failed")
    assert engine.classify_failure("error: invalid argument: --bogus")[0] == "bad-flag"
    assert engine.classify_failure("ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer")[0] == "oom"
    # No known class, but the first line llama.cpp marks as an error is the reason a user needs.
    assert engine.classify_failure("0.00.001 I loading\n0.00.009 E llama_init_from_model: quantized V cache "
                                   "requires flash_attn to be enabled\n0.00.010 E exiting") == (
        None, "0.00.009 E llama_init_from_model: quantized V cache requires flash_attn to be enabled")
    assert engine.classify_failure("all good") == (None, None)
    assert engine.parse_version("version: 0.5.0-dev (build 1, commit 0c1e570)\nbuilt with GNU") == "0.5.0-dev+0c1e570"


def test_unknown_engine_lists_the_known_ones():
    with pytest.raises(EngineError, match=r"unknown engine 'tgi' \(engines: llamacpp"):
        get_engine("tgi")


@pytest.mark.parametrize("params, context, rule", [
    # split KV: each of 16 slots gets 4096 / 16 = 256 tokens, and the longest request needs 870
    ({"parallel": 16, "ctx_size": 4096}, {"longest_request": 870, "mean_request": 420},
     "ctx_size 4096 split over 16 slots is 256 tokens a slot, below the workload's longest request (870 tokens"),
    # one unified buffer: holds the longest, but not 16 busy slots of 420 tokens
    ({"parallel": 16, "ctx_size": 4096, "kv_unified": True},
     {"longest_request": 870, "mean_request": 420, "max_concurrency": 16},
     "the unified KV buffer (ctx_size 4096) is below 16 busy slots x the workload's mean request (420 tokens)"),
    ({"parallel": 4, "ctx_size": 512, "kv_unified": True}, {"longest_request": 870, "mean_request": 100},
     "the unified KV buffer (ctx_size 512) is below the workload's longest request (870 tokens)"),
])
def test_a_context_that_cannot_hold_the_workload_is_infeasible(params, context, rule):
    broken = get_engine("llamacpp").infeasible(params, context)
    assert any(rule in b for b in broken), broken


@pytest.mark.parametrize("params, context", [
    ({"parallel": 4, "ctx_size": 4096}, {"longest_request": 870, "mean_request": 420}),  # 1024 a slot
    # the load keeps only 4 slots busy: 4 x 420 fits a 4096 buffer
    ({"parallel": 16, "ctx_size": 4096, "kv_unified": True},
     {"longest_request": 870, "mean_request": 420, "max_concurrency": 4}),
    ({"parallel": 16, "ctx_size": 0}, {"longest_request": 870}),  # the model's own context: not ours to judge
    # an open schedule (a rate, a trace) keeps as many slots busy as the server is slow: the mean bounds nothing
    ({"parallel": 16, "ctx_size": 4096, "kv_unified": True}, {"longest_request": 870, "mean_request": 420}),
    ({"parallel": 16, "ctx_size": 4096}, {}),  # lengths unknown (a dataset before its first launch)
])
def test_a_context_that_holds_the_workload_is_launchable(params, context):
    assert get_engine("llamacpp").infeasible(params, context) == []
