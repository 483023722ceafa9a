"""`autotuner init`'s parts: the GGUF header read exactly (checked against the gguf package's own reader),
and the sizing rules on recorded facts: this CPU and the quickstart's model, an 8B on one H100, a 70B that
fits nowhere here, and a trace's lengths and pace."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autotuner.config import SearchSpaceConfig
from autotuner.config.experiment import ExperimentConfig
from autotuner.config.scaffold import GIB, InitError, Machine, Traffic, llamacpp
from autotuner.models.gguf import GgufError, GgufFacts, read_gguf
from autotuner.models.tiny_gguf import write_tiny_llama_gguf

THIS_CPU = Machine(cpus=2, memory_gib=23.5)
# Llama-3.1-8B-Instruct Q4_K_M and Llama-3.1-70B-Instruct Q4_K_M as their GGUF headers state them
LLAMA_8B = GgufFacts("llama", 32, 131072, 4096, 32, 8, 0, "Q4_K_M", 8_030_261_248, 4_920_733_696)
LLAMA_70B = GgufFacts("llama", 80, 131072, 8192, 64, 8, 0, "Q4_K_M", 70_553_706_496, 42_520_393_728)


@pytest.mark.parametrize("quant", ["f16", "q8_0"])
def test_the_header_gives_what_the_gguf_package_reads(tmp_path, quant):
    gguf = pytest.importorskip("gguf")
    path = write_tiny_llama_gguf(tmp_path / "m.gguf", size="tiny", seed=0, quant=quant)
    facts = read_gguf(path)
    reader = gguf.GGUFReader(str(path))
    assert facts.parameters == sum(int(t.n_elements) for t in reader.tensors)
    assert facts.weight_bytes == sum(int(t.n_bytes) for t in reader.tensors)
    assert (facts.architecture, facts.layers, facts.heads, facts.kv_heads, facts.embedding) == ("llama", 4, 4, 2, 256)
    assert facts.quantization == quant.upper() and facts.experts == 0
    assert facts.kv_bytes_per_token == 2 * 4 * 2 * (256 // 4) * 2


def test_a_file_that_is_not_gguf_or_is_cut_short_is_one_clear_error(tmp_path):
    (tmp_path / "x.gguf").write_bytes(b"PK\x03\x04 not a model")
    with pytest.raises(GgufError, match="not a GGUF file"):
        read_gguf(tmp_path / "x.gguf")
    whole = write_tiny_llama_gguf(tmp_path / "m.gguf", size="tiny", seed=0).read_bytes()
    (tmp_path / "cut.gguf").write_bytes(whole[:200])
    with pytest.raises(GgufError, match="cut short"):
        read_gguf(tmp_path / "cut.gguf")


def test_a_split_model_counts_every_file_from_its_first(tmp_path):
    # As convert_hf_to_gguf --split-max-tensors writes one (NAME-0000i-of-00003.gguf): llama.cpp is given
    # the first file and loads the others; its weights are all of theirs.
    gguf, np = pytest.importorskip("gguf"), pytest.importorskip("numpy")
    writer = gguf.GGUFWriter(tmp_path / "m.gguf", "llama", split_max_tensors=2)
    writer.add_block_count(2)
    writer.add_embedding_length(8)
    writer.add_head_count(2)
    for i in range(5):
        writer.add_tensor(f"blk.{i}.w", np.ones((4, 8 * (i + 1)), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    files = sorted(tmp_path.glob("m-*-of-00003.gguf"))
    assert len(files) == 3
    readers = [gguf.GGUFReader(str(f)) for f in files]
    facts = read_gguf(files[0])
    assert facts.parameters == sum(int(t.n_elements) for r in readers for t in r.tensors) == 4 * 8 * 15
    assert facts.weight_bytes == sum(int(t.n_bytes) for r in readers for t in r.tensors)
    assert (facts.layers, facts.embedding) == (2, 8)
    assert read_gguf(files[1]).parameters == sum(int(t.n_elements) for t in readers[1].tensors)  # a later file: itself
    files[2].unlink()
    with pytest.raises(GgufError, match="m-00003-of-00003.gguf: no such file"):
        read_gguf(files[0])


def _loaded(scaffold, tmp_path: Path) -> tuple[ExperimentConfig, SearchSpaceConfig]:
    return (ExperimentConfig.model_validate(yaml.safe_load(scaffold.experiment)),
            SearchSpaceConfig.model_validate(yaml.safe_load(scaffold.space)))


def test_on_this_cpu_slots_threads_and_context_come_from_cores_memory_and_lengths(tmp_path):
    small = GgufFacts("llama", 8, 16384, 1024, 16, 4, 0, "F16", 106_972_160, 213_979_136)  # the quickstart's
    scaffold = llamacpp("mine", "m.gguf", "s.yaml", small, THIS_CPU)
    exp, space = _loaded(scaffold, tmp_path)
    assert space.params["parallel"].high == 8  # 4 a core on 2 cores
    assert space.params["threads"].high == 2
    assert space.params["ctx_size"].choices == [1024, 2048, 4096]  # 400 tokens a request: 2 to 8 slots of it
    assert exp.load.max_concurrency == [2, 8] and exp.engine_args == [] and exp.hardware.gpus == 0
    assert any("slots (-np) 1 to 8: 4 a core on 2 cores" in d for d in scaffold.decisions)
    assert scaffold.experiment.startswith("# Written by `autotuner init`")


def test_an_8b_on_one_h100_goes_to_the_gpu_with_64_slots_and_no_thread_search(tmp_path):
    scaffold = llamacpp("llama8b", "m.gguf", "s.yaml", LLAMA_8B, Machine(32, 256.0, 1, 79.6, "h100"))
    exp, space = _loaded(scaffold, tmp_path)
    assert exp.engine_args == ["-ngl", "999"] and exp.hardware.gpus == 1
    assert space.params["parallel"].high == 64 and "threads" not in space.params
    assert exp.load.max_concurrency == [16, 64]
    # 64 slots of 400 tokens: 25,600 tokens, within 8B's KV budget on 80 GB (128 KiB a token at f16)
    assert space.params["ctx_size"].choices == [8192, 16384, 32768]
    assert exp.startup_timeout_s == int(60 + 30 * LLAMA_8B.weight_bytes / GIB)


def test_a_model_whose_weights_fit_nowhere_here_is_refused_in_one_line():
    with pytest.raises(InitError, match=r"its weights take 39\.6 GiB; 23\.5 GiB of memory hold 20\.2 GiB"):
        llamacpp("llama70b", "m.gguf", "s.yaml", LLAMA_70B, THIS_CPU)
    with pytest.raises(InitError, match="trained for 4096"):
        short = GgufFacts("llama", 8, 4096, 1024, 16, 4, 0, "F16", 10**8, 2 * 10**8)
        llamacpp("x", "m.gguf", "s.yaml", short, THIS_CPU, Traffic(4000, 500))


def test_a_kv_budget_smaller_than_the_wanted_slots_caps_them():
    # the 70B on one H100: weights fit with ~31 GiB for the KV cache: 320 KiB a token, 8,016-token requests
    scaffold = llamacpp("llama70b", "m.gguf", "s.yaml", LLAMA_70B, Machine(32, 256.0, 1, 79.6, "h100"),
                        Traffic(6000, 2000))
    space = yaml.safe_load(scaffold.space)
    kv_tokens = (79.6 * 0.9 - 1) * GIB - LLAMA_70B.weight_bytes
    fits = int(kv_tokens // LLAMA_70B.kv_bytes_per_token) // 8016
    assert space["params"]["parallel"]["high"] == min(64, 2 * fits) < 64
    assert any(f"the KV budget holds {fits} requests at f16" in d for d in scaffold.decisions)


def test_a_trace_brings_its_lengths_its_pace_and_prefix_reuse(tmp_path):
    traffic = Traffic(2048, 256, {"trace": {"path": "t.jsonl"}, "warmup_requests": 4}, "a trace",
                      shares_prefixes=True, load={"speedup": [1, 2]})
    small = GgufFacts("llama", 8, 16384, 1024, 16, 4, 0, "F16", 106_972_160, 213_979_136)
    exp, space = _loaded(llamacpp("t", "m.gguf", "s.yaml", small, THIS_CPU, traffic), tmp_path)
    assert exp.load.speedup == [1, 2] and exp.workload.trace is not None
    assert space.params["cache_reuse"].choices == [0, 256]
    assert min(space.params["ctx_size"].choices) >= 2048 + 256
