"""The random-weight Hugging Face Llama of scripts/tiny_hf.py: the shape the vLLM experiment needs,
one token per workload word, and greedy decoding that streams visible text on every step (so every
request has a time to first token). Built and checked in the vLLM venv (torch, transformers)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

from autotuner.workloads.synthetic import WORDS

# A script of the vLLM venv, not a module of the package: loaded by path (it imports torch only when run).
_spec = importlib.util.spec_from_file_location("tiny_hf",
                                               Path(__file__).resolve().parents[2] / "scripts" / "tiny_hf.py")
tiny_hf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tiny_hf)

pytestmark = pytest.mark.slow

CHECK = r"""
import json, sys, torch
from transformers import AutoTokenizer, AutoModelForCausalLM
path, words = sys.argv[1], sys.argv[2].split()
tok = AutoTokenizer.from_pretrained(path)
model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.bfloat16)
prompts = [" ".join(words[i:i + 16]) for i in range(0, 64, 16)] + ["the", "<|im_start|>user\nhello"]
silent = 0
for p in prompts:
    ids = tok(p, return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=24, do_sample=False, min_new_tokens=24)[0, ids.shape[1]:]
    silent += sum(1 for t in out.tolist() if not tok.decode([t]) or "\ufffd" in tok.decode([t]))
print(json.dumps({"params": model.num_parameters(), "vocab": model.config.vocab_size, "tokenizer": len(tok),
                  "words_per_token": max(len(tok(" " + w).input_ids) for w in words), "silent": silent,
                  "heads": model.config.num_attention_heads, "kv_heads": model.config.num_key_value_heads}))
"""


def test_word_list_is_the_load_generators():
    assert set(tiny_hf.WORDS.split()) == set(WORDS)


def test_model_shape_tokens_and_visible_greedy_text(hf_model, vllm_python):
    facts = json.loads((hf_model / "autotuner-model.json").read_text())
    assert 37e6 < facts["params"] < 40e6
    out = subprocess.run([str(vllm_python), "-c", CHECK, str(hf_model), " ".join(WORDS)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["vocab"] == got["tokenizer"]  # every id the model can emit decodes
    assert got["words_per_token"] == 1  # a prompt of N workload words is N tokens
    assert got["silent"] == 0  # every greedy step streams visible text
    assert (got["heads"], got["kv_heads"]) == (12, 4)
