"""Synthetic workloads: deterministic, the requested lengths, the fields each server needs."""

from __future__ import annotations

import json
import os

import pytest

from autotuner.workloads.synthetic import (
    WORDS,
    Workload,
    build_payloads,
    build_prompts,
    level_workload,
    warmup_workload,
)


def test_same_seed_same_payloads_other_seed_other_prompts() -> None:
    w = Workload(num_prompts=16, input_len=32, seed=7)
    assert build_payloads(w, "m") == build_payloads(w, "m")
    other = build_payloads(Workload(num_prompts=16, input_len=32, seed=8), "m")
    assert [p["prompt"] for p in other] != [p["prompt"] for p in build_payloads(w, "m")]


def test_prompts_do_not_depend_on_the_process_hash_seed() -> None:
    # A different PYTHONHASHSEED must not change the prompts (studies resume in new processes).
    import subprocess
    import sys

    code = "from autotuner.workloads.synthetic import build_prompts; print(build_prompts(3, 10, 5))"
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


def prompts(workload: Workload) -> list[str]:
    return [p["prompt"] for p in build_payloads(workload, "m")]


def test_warmup_and_every_level_send_prompts_no_other_sends() -> None:
    """No prefix-cache head start: a prompt is never sent twice, and none shares a 16-word head with another."""
    w = Workload(num_prompts=64, input_len=32, seed=3)
    streams = [prompts(warmup_workload(w, 8))] + [prompts(level_workload(w, i)) for i in range(6)]
    again = [prompts(level_workload(w, i, again=True)) for i in range(2)]  # levels measured a second time
    sent = [p for stream in streams + again for p in stream]
    assert len(sent) == 8 + 8 * 64
    assert len({tuple(p.split()[:16]) for p in sent}) == len(sent)
    # The same for every trial (a config sees what every other config saw at that level) ...
    assert prompts(level_workload(w, 4)) == streams[5] and prompts(warmup_workload(w, 8)) == streams[0]
    # ... level 0 is the workload's own prompts, and another seed gives other levels.
    assert streams[1] == prompts(w)
    assert not set(prompts(level_workload(Workload(num_prompts=64, input_len=32, seed=4), 1))) & set(sent)


def test_a_shared_prefix_is_the_same_in_every_prompt_of_every_stream() -> None:
    w = Workload(num_prompts=16, input_len=40, seed=5, shared_prefix_len=24)
    streams = [prompts(warmup_workload(w, 4))] + [prompts(level_workload(w, i)) for i in range(3)]
    sent = [p.split() for stream in streams for p in stream]
    assert all(len(words) == 40 for words in sent)
    assert len({tuple(words[:24]) for words in sent}) == 1  # one prefix for all
    assert len({tuple(words[24:]) for words in sent}) == len(sent)  # the rest never repeats
    other_seed = prompts(Workload(num_prompts=1, input_len=40, seed=6, shared_prefix_len=24))[0]
    assert other_seed.split()[:24] != sent[0][:24]
    # Without a prefix nothing changes: the pinned prompts stay the same.
    assert prompts(Workload(num_prompts=2, input_len=5, seed=0)) == build_prompts(2, 5, 0)


def test_a_prefix_as_long_as_the_prompt_is_refused() -> None:
    with pytest.raises(ValueError, match="shared_prefix_len"):
        Workload(input_len=8, shared_prefix_len=8)
