"""`autotuner init`'s GPU rules on recorded facts: parameters computed from config.json against the
published counts, the layouts that hold GLM-5-NVFP4 on 8 RTX PRO 6000 against the ones this project wrote
by hand for that box, and the limits that follow from the KV budget."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autotuner.config.gpu_sizing import UTILIZATION, Layout, fit, plan
from autotuner.config.scaffold import InitError, Machine
from autotuner.config.scaffold_gpu import GPU_SYNTHETIC, sglang, vllm
from autotuner.models.hf import HfError, read_hf

ROOT = Path(__file__).parents[2]
HF = ROOT / "tests" / "data" / "hf"
H100 = Machine(16, 128.0, 1, 79.6, "h100", None)
PRO_6000_X8 = Machine(64, 512.0, 8, 95.6, "rtx-pro-6000", "pcie")
H200_X8 = Machine(64, 1024.0, 8, 139.8, "h200", "nvlink")


@pytest.mark.parametrize("model, published, tolerance", [
    ("llama-3.1-8b", 8_030_261_248, 0.001),  # the safetensors index's bytes / 2 (bf16)
    ("deepseek-v3", 671e9 + 14e9, 0.01),  # DeepSeek's card: 671B main model + 14B MTP module
    ("glm-5-nvfp4", 744e9, 0.015),  # Z.ai's card: 744B (our count holds its MTP layer too)
])
def test_parameters_computed_from_config_match_the_published_counts(model, published, tolerance):
    facts = read_hf(HF / model)
    assert abs(facts.parameters - published) / published < tolerance, facts.parameters


def test_weight_bytes_are_read_where_the_index_has_them_and_estimated_by_quantization_where_not():
    llama, glm, ds = (read_hf(HF / m) for m in ("llama-3.1-8b", "glm-5-nvfp4", "deepseek-v3"))
    assert llama.weights_read and llama.weight_bytes == 16_060_522_496
    assert not glm.weights_read and glm.quantization == "NVFP4" and 400 < glm.weight_bytes / 2**30 < 440
    assert not ds.weights_read and ds.quantization == "FP8" and 620 < ds.weight_bytes / 2**30 < 660
    # MLA caches the latent and the rotary key: 576 values a layer, not 2 x 128 heads x 128
    assert ds.mla and ds.kv_bytes_per_token() == 61 * 576 * 2
    assert llama.kv_bytes_per_token() == 32 * 2 * 8 * 128 * 2


def test_a_safetensors_header_is_summed_when_there_is_no_index(tmp_path):
    import json
    import struct

    (tmp_path / "config.json").write_text((HF / "llama-3.1-8b" / "config.json").read_text())
    header = json.dumps({"a": {"dtype": "BF16", "shape": [4, 4], "data_offsets": [0, 32]},
                         "b": {"dtype": "BF16", "shape": [8], "data_offsets": [32, 48]},
                         "__metadata__": {"format": "pt"}}).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(48))
    facts = read_hf(tmp_path)
    assert facts.weights_read and facts.weight_bytes == 48
    (tmp_path / "model.safetensors").write_bytes(b"\xff" * 8)
    with pytest.raises(HfError, match="model.safetensors: not a safetensors file"):
        read_hf(tmp_path)


def test_a_folder_without_config_json_is_one_clear_error(tmp_path):
    with pytest.raises(HfError, match="no config.json"):
        read_hf(tmp_path)


def test_glm5_nvfp4_on_8_pro_6000_finds_the_hand_written_layouts_but_one_that_does_not_fit():
    facts = read_hf(HF / "glm-5-nvfp4")
    hand = yaml.safe_load((ROOT / "search_spaces" / "vllm-moe-8gpu.yaml").read_text())
    scaffold = vllm("glm", "/models/GLM-5-NVFP4", "space.yaml", facts, PRO_6000_X8)
    space, exp = yaml.safe_load(scaffold.space), yaml.safe_load(scaffold.experiment)
    # TP1xDP8 leaves each GPU the whole 16-bit attention and MTP layer beside 1/8 of the 4-bit experts
    assert set(space["params"]["parallel_layout"]["choices"]) == set(hand["params"]["parallel_layout"]["choices"]) \
        - {"TP1xDP8"}
    assert any(d.startswith("TP1xDP8 excluded: 80 GiB of weights a GPU (the experts spread over the replicas), "
                            "more than the 77 GiB") for d in scaffold.decisions)
    assert exp["study"]["baseline"] is False and exp["enqueue"] == [{"parallel_layout": "TP8",
                                                                     "enable_expert_parallel": True}]
    assert "all2all_backend" not in space["params"]  # PCIe: no DeepEP
    assert {"nccl_proto", "nccl_p2p_level", "mtp_draft_tokens", "decode_context_parallel_size"} <= set(space["params"])
    assert 'decode_context_parallel_size != 4 or parallel_layout in ["TP8", "TP4xPP2", "TP4xDP2"]' \
        in space["constraints"]
    assert "b12x" in space["params"]["moe_backend"]["choices"]  # SM12x's NVFP4 MoE kernels
    assert any(d.startswith("TP1 (the engine's default) excluded: 428 GiB of weights") for d in scaffold.decisions)


def test_the_experts_share_of_the_weights_is_counted_in_bytes_at_their_quantization():
    glm = read_hf(HF / "glm-5-nvfp4")  # 4-bit experts; attention, embeddings and the MTP layer at 16 bits
    assert 25 < (glm.weight_bytes - glm.expert_weight_bytes) / 2**30 < 35
    assert glm.expert_weight_bytes / glm.weight_bytes < glm.expert_parameters / glm.parameters


def test_sglang_replicas_hold_the_whole_model_so_dp_layouts_of_glm5_are_excluded_with_why():
    p = plan(read_hf(HF / "glm-5-nvfp4"), PRO_6000_X8, GPU_SYNTHETIC, experts_over_dp=False)
    assert {f.layout.name for f in p.fits} == {"TP8", "TP4xPP2", "TP2xPP4"}
    assert any(d.startswith("TP4xDP2 excluded: 107 GiB of weights a GPU (each replica holds every expert), more than "
                         "the 77 GiB a 95.6 GiB GPU gives") for d in p.decisions)
    space = yaml.safe_load(sglang("glm", "m", "s.yaml", read_hf(HF / "glm-5-nvfp4"), PRO_6000_X8).space)
    assert space["params"]["tp_size"]["choices"] == [8, 4, 2] and space["constraints"] == [
        "tp_size * pp_size == 8", "tp_size % ep_size == 0", "tp_size % attn_dp_size == 0"]
    assert space["params"]["speculative_algorithm"]["choices"] == ["none", "EAGLE"]


def test_an_8b_on_one_h100_keeps_the_defaults_as_baseline_and_sizes_batches_from_the_kv_budget():
    facts = read_hf(HF / "llama-3.1-8b")
    scaffold = vllm("l", "m", "s.yaml", facts, H100)
    space, exp = yaml.safe_load(scaffold.space), yaml.safe_load(scaffold.experiment)
    assert "parallel_layout" not in space["params"] and "enable_expert_parallel" not in space["params"]
    assert "baseline" not in exp["study"] and "enqueue" not in exp
    one = fit(facts, 79.6, Layout(1), GPU_SYNTHETIC.need)
    # 79.6 GiB x 0.85 - 4 GiB - 15 GiB of weights, 128 KiB of KV a token, 1296 tokens a request
    assert one.requests == int((79.6 * UTILIZATION - 4 - 16_060_522_496 / 2**30) * 2**30 / 131072 // 1296)
    assert space["params"]["max_num_seqs"]["choices"] == [64, 128, 256, 512]  # 2 x 333 at FP8, floored
    assert exp["load"] == {"max_concurrency": [128, 512]}
    assert exp["engine_args"] == ["--max-model-len", "2048"]


def test_deepseek_v3_fits_8_h200_with_deepep_on_nvlink_and_no_8_h100_at_all():
    facts = read_hf(HF / "deepseek-v3")
    space = yaml.safe_load(vllm("d", "m", "s.yaml", facts, H200_X8).space)
    assert space["params"]["all2all_backend"]["choices"] == ["allgather_reducescatter", "deepep_low_latency",
                                                             "deepep_high_throughput"]
    assert "disable_custom_all_reduce" in space["params"] and "nccl_proto" not in space["params"]
    with pytest.raises(InitError, match="637 GiB of weights .FP8. need at least 11 GPUs of 79.6 GiB; planned for 8"):
        plan(facts, Machine(64, 1024.0, 8, 79.6, "h100", "nvlink"), GPU_SYNTHETIC)


def test_a_layout_that_splits_gqa_heads_past_their_count_keeps_one_a_rank():
    facts = read_hf(HF / "llama-3.1-8b")  # 8 KV heads
    tp8, tp16 = (fit(facts, 79.6, Layout(tp), 1000) for tp in (8, 16))
    assert tp16.requests < 2 * tp8.requests  # TP16 holds one head a rank, as TP8 does: the KV a GPU stays


@pytest.mark.parametrize("recorded, link", [
    ("topo-m-8x-h100-sxm-nv18.txt", "nvlink"),
    ("topo-m-8x-rtx4090-pcie-two-numa.txt", "pcie"),
    ("topo-m-4x-l40s-two-numa.txt", "pcie"),
])
def test_the_interconnect_is_read_from_the_recorded_topology(recorded, link):
    from autotuner.new_experiment import interconnect

    assert interconnect((ROOT / "tests" / "data" / "gpu" / recorded).read_text()) == link
    assert interconnect(None) is None and interconnect("no GPU here") is None


@pytest.mark.parametrize("nvml, known", [
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"), ("NVIDIA L40S", "l40s"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000"), ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb"), ("Tesla V100-SXM2-32GB", "Tesla V100-SXM2-32GB"), ("NVIDIA L40", "NVIDIA L40"),
])
def test_nvml_names_map_to_the_known_cards_and_others_stay_as_they_are(nvml, known):
    from autotuner.new_experiment import _known_name

    assert _known_name(nvml) == known


def _config(tmp_path, **keys) -> Path:
    base = {"architectures": ["X"], "hidden_size": 5120, "num_hidden_layers": 40, "num_attention_heads": 40,
            "num_key_value_heads": 10, "intermediate_size": 17920, "vocab_size": 32064, "torch_dtype": "bfloat16",
            "max_position_embeddings": 131072, **keys}
    (tmp_path / "config.json").write_text(__import__("json").dumps(base))
    return tmp_path


def test_tp_must_divide_the_heads_and_sit_with_the_kv_heads_and_any_divisor_of_the_gpus_is_tried(tmp_path):
    from autotuner.config.gpu_sizing import layouts

    facts = read_hf(_config(tmp_path))  # 40 heads, 10 KV heads (Phi-3-medium's shape)
    assert [lay.name for lay in layouts(8, facts)] == ["TP2xPP4", "TP2xDP4", "TP1xDP8"]  # TP4, TP8: not with 10
    assert [lay.name for lay in layouts(6, facts)] == ["TP2xPP3", "TP2xDP3", "TP1xDP6"]


def test_a_moe_model_on_one_gpu_gets_no_expert_parallel_params(tmp_path):
    facts = read_hf(_config(tmp_path, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=1024,
                            hidden_size=2048, intermediate_size=6144, num_attention_heads=32, num_key_value_heads=4))
    space = yaml.safe_load(vllm("m", "m", "s.yaml", facts, H100).space)
    assert "enable_expert_parallel" not in space["params"] and "enable_eplb" not in space["params"]
    assert space["params"]["moe_backend"]["choices"] == ["auto", "triton"]


def test_gpus_whose_memory_is_unknown_are_one_clear_error():
    with pytest.raises(InitError, match="leave nothing after the runtime's share"):
        plan(read_hf(HF / "llama-3.1-8b"), Machine(8, 64.0, 1, 0.0, "GPU", None), GPU_SYNTHETIC)


def test_the_slo_is_the_users_ttft_where_given_and_a_guess_said_so_where_not():
    from dataclasses import replace

    llama = read_hf(HF / "llama-3.1-8b")
    guessed = vllm("l", "m", "s.yaml", llama, H100)
    assert yaml.safe_load(guessed.experiment)["objective"]["slo"] == {"ttft_ms_p99": 10000}
    assert any(d.startswith("SLO: TTFT p99 10000 ms, a guess") for d in guessed.decisions)
    theirs = sglang("l", "m", "s.yaml", llama, H100, replace(GPU_SYNTHETIC, ttft_ms_p99=800))
    assert yaml.safe_load(theirs.experiment)["objective"]["slo"] == {"ttft_ms_p99": 800}
    assert "SLO: TTFT p99 800 ms, what your users accept (--ttft-p99-ms)" in theirs.decisions
