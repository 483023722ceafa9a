"""Synthetic workloads: deterministic, the requested lengths, the fields each server needs."""

from __future__ import annotations

import json
import os

import pytest

from autotuner.bench.workload import WORDS, Workload, build_payloads, build_prompts


def test_same_seed_same_payloads_other_seed_other_prompts() -> None:
    w = Workload(num_prompts=16, input_len=32, seed=7)
    assert build_payloads(w, "m") == build_payloads(w, "m")
    other = build_payloads(Workload(num_prompts=16, input_len=32, seed=8), "m")
    assert [p["prompt"] for p in other] != [p["prompt"] for p in build_payloads(w, "m")]


def test_prompts_do_not_depend_on_the_process_hash_seed() -> None:
    # A different PYTHONHASHSEED must not change the prompts (studies resume in new processes).
    import subprocess
    import sys

    code = "from autotuner.bench.workload import build_prompts; print(build_prompts(3, 10, 5))"
    outs = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={**os.environ, "PYTHONHASHSEED": seed}).stdout
        for seed in ("1", "2")
    }
    assert len(outs) == 1
    assert outs.pop().strip() == str(build_prompts(3, 10, 5))


def test_prompts_have_input_len_words_from_the_word_list() -> None:
    prompts = build_prompts(num_prompts=20, input_len=128, seed=0)
    assert len(prompts) == 20
    for prompt in prompts:
        words = prompt.split(" ")
        assert len(words) == 128
        assert set(words) <= set(WORDS)


def test_prompts_are_distinct_from_their_first_words() -> None:
    prompts = build_prompts(num_prompts=64, input_len=64, seed=0)
    assert len(set(prompts)) == 64
    # No long shared prefix a prefix cache could reuse between two measured requests.
    heads = [tuple(p.split()[:4]) for p in prompts]
    assert len(set(heads)) == len(heads)


def test_completions_payload() -> None:
    (payload,) = build_payloads(Workload(endpoint="completions", num_prompts=1, input_len=5, output_len=33), "qwen")
    assert payload["model"] == "qwen"
    assert isinstance(payload["prompt"], str) and len(payload["prompt"].split()) == 5
    assert "messages" not in payload
    assert payload["max_tokens"] == 33
    assert payload["temperature"] == 0.0
    assert payload["stream"] is True
    assert payload["stream_options"] == {"include_usage": True}
    assert payload["ignore_eos"] is True
    json.dumps(payload)  # plain JSON


def test_chat_payload_carries_the_prompt_as_one_user_message() -> None:
    w = Workload(endpoint="chat", num_prompts=1, input_len=6, output_len=9)
    (payload,) = build_payloads(w, "m")
    assert payload["messages"] == [{"role": "user", "content": build_prompts(1, 6, 0)[0]}]
    assert "prompt" not in payload
    assert payload["max_tokens"] == 9 and payload["stream"] is True
    assert w.path == "/v1/chat/completions"
    assert Workload().path == "/v1/completions"


def test_ignore_eos_false_leaves_the_field_out() -> None:
    (payload,) = build_payloads(Workload(num_prompts=1, ignore_eos=False), "m")
    assert "ignore_eos" not in payload


def test_invalid_workloads_are_refused_with_the_valid_names() -> None:
    with pytest.raises(ValueError, match="chat"):
        Workload(endpoint="embeddings")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="output_len"):
        Workload(output_len=0)
    with pytest.raises(ValueError, match="num_prompts"):
        Workload(num_prompts=0)


def test_workload_is_frozen_and_serialisable() -> None:
    w = Workload()
    with pytest.raises(AttributeError):
        w.num_prompts = 3  # type: ignore[misc]
    assert Workload(**w.to_json()) == w


def test_prompts_are_pinned() -> None:
    # Changing WORDS or the drawing changes every prompt, and so every result compared across studies.
    assert build_prompts(2, 5, seed=0) == ["fire side national when through", "state field may under high"]
    assert len(WORDS) == len(set(WORDS)) == 164
