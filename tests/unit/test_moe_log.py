"""Which fused-MoE config a server loaded, read from log lines as vLLM 0.32.0 and SGLang 0.5.23 print them
(fused_moe.py and fused_moe_triton_config.py, get_moe_configs)."""

from __future__ import annotations

from autotuner.stages.moe_log import TAG, moe_config_tags, moe_configs_used, tags_from_file

VLLM_TUNED = ("(EngineCore_DP0 pid=311) INFO 05-02 10:11:12 [fused_moe.py:1150] Using configuration from "
              "/autotuner-kernels/vllm-0.32.0/G/tp8-ep8-auto/E=32,N=2048,device_name=G.json for MoE layer.")
VLLM_BUILTIN = ("(Worker_TP0 pid=9) INFO 05-02 10:11:12 [fused_moe.py:1150] Using configuration from /usr/local/lib/"
                "python3.12/dist-packages/vllm/model_executor/layers/fused_moe/configs/E=8,N=14336,"
                "device_name=NVIDIA_H100_80GB_HBM3.json for MoE layer.")
VLLM_DEFAULT = ("(Worker_TP0 pid=9) WARNING 05-02 10:11:12 [fused_moe.py:1163] Using default MoE config. Performance "
                "might be sub-optimal! Config file not found at /x/E=32,N=2048,device_name=G.json, /y/E=32.json")
SGLANG_TUNED = "[2026-05-02 10:11:12 TP0] Using MoE kernel config from /cfg/configs/triton_3_4_0/E=257,N=256.json."
SGLANG_DEFAULT = ("[2026-05-02 10:11:12 TP0] Using default MoE kernel config. Performance might be sub-optimal! "
                  "Config file not found at /x.json, you can create them with https://github.com/...")


def test_vllm_lines():
    assert moe_configs_used(VLLM_TUNED) == ["tuned:E=32,N=2048,device_name=G.json"]
    assert moe_configs_used(VLLM_BUILTIN) == ["builtin:E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3.json"]
    assert moe_configs_used(VLLM_DEFAULT) == ["default"]


def test_sglang_lines():
    assert moe_configs_used(SGLANG_TUNED) == ["tuned:E=257,N=256.json"]
    assert moe_configs_used(SGLANG_DEFAULT) == ["default"]
    fallback = ("Config file not found at /a.json. Fallback to triton version 3.3.1 and use MoE kernel config from "
                "/usr/lib/python3/sglang/srt/layers/moe/moe_runner/triton_utils/configs/triton_3_3_1/E=257.json. "
                "Performance might be sub-optimal!")
    assert moe_configs_used(fallback) == ["builtin:E=257.json"]


def test_each_config_once_in_order_and_none_for_a_log_without_moe():
    log = "\n".join([VLLM_TUNED, VLLM_TUNED, VLLM_DEFAULT, "INFO: Started server process"])
    assert moe_config_tags(log) == {TAG: "tuned:E=32,N=2048,device_name=G.json; default"}
    assert moe_config_tags("INFO Loading weights took 3.1 s\n") == {}


def test_the_tag_from_a_log_file_and_from_none(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("start\n" + VLLM_TUNED + "\n")
    assert tags_from_file(log) == {TAG: "tuned:E=32,N=2048,device_name=G.json"}
    assert tags_from_file(tmp_path / "missing.log") == {}
