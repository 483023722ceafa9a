"""A trial's traffic keeps what the first server said (the one-token words, its BOS, a dataset's counts)
in the study, so every later launch, worker and resumed run sends the same requests."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from autotuner.config.workload import WorkloadConfig
from autotuner.core.traffic import STATE_VERSION, Traffic, _digest
from autotuner.engines._base import TokenizeEndpoint


def traffic(tmp_path: Path, **workload) -> Traffic:
    w = WorkloadConfig(**workload)
    return Traffic(w, w.source(tmp_path, 2), w.count(tmp_path), TokenizeEndpoint())


def test_a_stored_vocabulary_is_used_without_asking_any_server(tmp_path):
    t = traffic(tmp_path, num_prompts=4, input_len=10)
    stored = {"version": STATE_VERSION, "words": ["alpha", "beta"], "exact": True, "specials": 1,
              "source": "2 words", "counts": {}}
    t.load = lambda: stored
    # nothing listens there: a server asked would fail the call
    assert asyncio.run(t.prepare("http://127.0.0.1:9", "m", 2)) == []
    plan = t.level(0, "m")
    assert {w for b in plan.bodies for w in b["prompt"].split(" ")} <= {"alpha", "beta"}
    assert plan.exact and plan.input_tokens == (11,) * 4  # 10 words and the stored BOS


def test_what_the_first_server_said_is_saved_once_and_a_dataset_is_restored_by_hash(tmp_path):
    (tmp_path / "p.jsonl").write_text(json.dumps({"prompt": "hello there"}) + "\n")
    t = traffic(tmp_path, num_prompts=1, dataset={"path": "p.jsonl", "format": "jsonl"})
    saved: list[dict] = []
    t.save = saved.append
    asyncio.run(t.prepare("http://127.0.0.1:9", "m", 1))  # no server: the built-in words, said once
    assert len(saved) == 1 and saved[0]["exact"] is False and saved[0]["version"] == STATE_VERSION
    other = traffic(tmp_path, num_prompts=1, dataset={"path": "p.jsonl", "format": "jsonl"})
    # another process, whose server would count otherwise: it takes the study's count of the prompt
    state = dict(saved[0], counts={_digest("hello there"): 7})
    other.load = lambda: state
    asyncio.run(other.prepare("http://127.0.0.1:9", "m", 1))
    assert other.counted and other.level(0, "m").input_tokens == (7,)
