"""Workload files as users bring them: traces, ShareGPT and JSONL datasets, their errors, and the
requests a study makes of them (pure: no server)."""

from __future__ import annotations

import json
import random
import statistics
import time
from pathlib import Path

import pytest

from autotuner.workloads import arrivals
from autotuner.workloads.dataset import read_dataset
from autotuner.workloads.errors import WorkloadFileError
from autotuner.workloads.lengths import Lengths
from autotuner.workloads.plan import BUILTIN, RequestSpec, Sampling, Vocabulary, render
from autotuner.workloads.samples import write as write_samples
from autotuner.workloads.source import DatasetSource, SyntheticSource, TraceSource, histogram, prefix_reuse
from autotuner.workloads.trace import read_trace, trace_specs


def lines(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


# --- traces -----------------------------------------------------------------------------------------

def test_equal_hash_ids_are_equal_tokens_and_other_ids_are_not(tmp_path: Path) -> None:
    trace = read_trace(lines(tmp_path / "t.jsonl", [
        {"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1, 2, 3]},      # 4 + 4 + 2
        {"timestamp": 500, "input_length": 12, "output_length": 5, "hash_ids": [1, 2, 9]},    # 4 + 4 + 4
        {"timestamp": 800, "input_length": 6, "output_length": 5, "hash_ids": [7]},           # 4, then 2 of its own
    ]), block_size=4)
    plan = render(trace_specs(trace), endpoint="completions", model="m", vocab=BUILTIN, sampling=Sampling())
    words = [b["prompt"].split(" ") for b in plan.bodies]
    assert [len(w) for w in words] == [10, 12, 6] == list(plan.input_tokens)
    assert words[0][:8] == words[1][:8]  # blocks 1 and 2: the same tokens
    assert words[0][8:] != words[1][8:10]  # block 3 (2 tokens) is not block 9
    assert plan.arrivals_s == (0.0, 0.5, 0.8)
    # another level (another salt) shares no block with the first: no level warms another's cache
    other = render(trace_specs(trace), endpoint="completions", model="m", vocab=BUILTIN, sampling=Sampling(),
                   salt="level-1")
    assert other.bodies[0]["prompt"] != plan.bodies[0]["prompt"]


def test_a_window_of_the_trace_and_its_speed_up(tmp_path: Path) -> None:
    rows = [{"timestamp": 1000 * k, "input_length": 8, "output_length": 4} for k in range(10)]
    trace = read_trace(lines(tmp_path / "t.jsonl", rows), start_s=2, duration_s=3)
    assert [r.timestamp_s for r in trace.requests] == [2.0, 3.0, 4.0]
    assert (trace.lines, trace.span_s) == (10, 9.0)
    assert arrivals.scaled([r.timestamp_s for r in trace.requests], 2.0) == [0.0, 0.5, 1.0]
    assert len(read_trace(tmp_path / "t.jsonl", limit=4).requests) == 4


@pytest.mark.parametrize("rows, expected", [
    (["{not json"], "t.jsonl: line 1: not JSON"),
    ([{"timestamp": 0, "input_length": 8}], "t.jsonl: line 1: field 'output_length': missing"),
    ([{"timestamp": 0, "input_length": "8", "output_length": 4}], "line 1: field 'input_length': expected an integer"),
    ([{"timestamp": 0, "input_length": 0, "output_length": 4}], "line 1: field 'input_length': must be >= 1"),
    ([{"timestamp": 5, "input_length": 8, "output_length": 4}, {"timestamp": 4, "input_length": 8, "output_length": 4}],
     "line 2: field 'timestamp': goes backwards (4 ms after 5 ms"),
    ([{"timestamp": 0, "input_length": 1024, "output_length": 4, "hash_ids": [1, 2]},
      {"timestamp": 1, "input_length": 600, "output_length": 4, "hash_ids": [3, 2]}],
     "line 2: field 'hash_ids': block 2 is 88 tokens here but 512 on an earlier line"),
    ([{"timestamp": 0, "input_length": 100, "output_length": 4, "hash_ids": [1, 2]}],
     "line 1: field 'hash_ids': 2 blocks of 512 tokens are more than input_length 100 fills"),
    ([{"timestamp": 0, "input_length": 10, "output_length": 4, "hash_ids": ["a"]}],
     "line 1: field 'hash_ids': expected a list of integers"),
    (["[1, 2]"], "line 1: expected a JSON object, got list"),
    ([], "t.jsonl: empty: no request in it"),
])
def test_a_bad_trace_names_file_line_and_field(tmp_path: Path, rows: list, expected: str) -> None:
    with pytest.raises(WorkloadFileError) as err:
        read_trace(lines(tmp_path / "t.jsonl", rows))
    assert expected in str(err.value)


def test_unreadable_trace_files(tmp_path: Path) -> None:
    with pytest.raises(WorkloadFileError, match="missing.jsonl: file not found"):
        read_trace(tmp_path / "missing.jsonl")
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"timestamp": 0, "input_length": 8, "output_length": 4}\n{"text": "caf\xe9"}\n')
    with pytest.raises(WorkloadFileError, match=r"latin.jsonl: line 2: not UTF-8 text \(byte 0xe9\)"):
        read_trace(latin)
    with pytest.raises(WorkloadFileError, match="no request in the window"):
        read_trace(lines(tmp_path / "t.jsonl", [{"timestamp": 0, "input_length": 8, "output_length": 4}]), start_s=5)


@pytest.mark.slow
def test_a_million_line_trace_streams_in_seconds(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    row = '{"timestamp": %d, "input_length": 700, "output_length": 100, "hash_ids": [%d, %d]}\n'
    with path.open("w") as f:
        f.writelines(row % (k, 2 * k, 2 * k + 1) for k in range(1_000_000))
    t = time.perf_counter()
    trace = read_trace(path, duration_s=2.0)  # a 2 s window: the rest is checked, not kept
    elapsed = time.perf_counter() - t
    assert (trace.lines, len(trace.requests)) == (1_000_000, 2000)
    assert elapsed < 30, f"reading took {elapsed:.1f} s"  # a bound that only a quadratic or buffered read breaks


# --- datasets ---------------------------------------------------------------------------------------

def test_sharegpt_first_human_turn_and_its_answer(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps([
        {"id": "a", "conversations": [{"from": "human", "value": "hi there"}, {"from": "gpt", "value": "hello you"},
                                      {"from": "human", "value": "more"}, {"from": "gpt", "value": "sure"}]},
        {"id": "b", "conversations": [{"from": "system", "value": "be brief"}, {"from": "human", "value": "why"},
                                      {"from": "gpt", "value": "because"}]},
        {"id": "c", "conversations": [{"from": "human", "value": "unanswered"}]},
    ]))
    data = read_dataset(path, "sharegpt")
    assert [(e.prompt, e.answer) for e in data.entries] == [("hi there", "hello you"), ("why", "because")]
    assert data.skipped == 1
    source = DatasetSource(data, default_output=32, token_counts={"hello you": 3, "hi there": 2})
    specs = source.specs("level-0", 2)
    assert [(s.text, s.output_tokens, s.input_tokens) for s in specs] == [("hi there", 3, 2), ("why", 32, None)]


def test_jsonl_fields_of_vllm_custom_and_aiperf_single_turn(tmp_path: Path) -> None:
    data = read_dataset(lines(tmp_path / "p.jsonl", [
        {"prompt": "one", "output_tokens": 7},
        {"text": "two", "output_length": 9},
        {"texts": ["three", "four"]},
        {"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "five"}], "max_tokens": 3},
    ]), "jsonl")
    assert [(e.prompt, e.output_tokens) for e in data.entries] == [("one", 7), ("two", 9), ("three\nfour", None),
                                                                   ("five", 3)]


@pytest.mark.parametrize("row, expected", [
    ({"output_tokens": 5}, "p.jsonl: line 1: no prompt: give one of prompt, text, texts, messages"),
    ({"prompt": ""}, "line 1: field 'prompt': expected non-empty text"),
    ({"prompt": "x", "output_tokens": 0}, "line 1: field 'output_tokens': must be >= 1"),
    ({"messages": [{"role": "system", "content": "s"}]}, "field 'messages': expected a list of chat messages"),
])
def test_a_bad_dataset_line_names_the_field(tmp_path: Path, row: dict, expected: str) -> None:
    with pytest.raises(WorkloadFileError) as err:
        read_dataset(lines(tmp_path / "p.jsonl", [row]), "jsonl")
    assert expected in str(err.value)


def test_each_level_takes_prompts_no_other_level_sent(tmp_path: Path) -> None:
    data = read_dataset(lines(tmp_path / "p.jsonl", [{"prompt": f"p{k}"} for k in range(20)]), "jsonl")
    source = DatasetSource(data, default_output=8, warmup=2)
    sent = [s.text for stream in ("warmup",) for s in source.specs(stream, 2)]
    for stream in ("level-0", "level-0-again", "level-1"):
        sent += [s.text for s in source.specs(stream, 4)]
    assert len(sent) == len(set(sent)) == 14
    assert not source.wraps("level-1", 4) and source.wraps("level-2", 4)


# --- synthetic lengths, prefixes, arrivals ----------------------------------------------------------

def test_length_distributions_are_drawn_clamped_and_reproducible() -> None:
    rng = random.Random(0)
    normal = Lengths("normal", mean=300, stddev=100, min=50, max=500)
    draws = [normal.draw(rng) for _ in range(4000)]
    assert min(draws) >= 50 and max(draws) <= 500
    assert 290 < statistics.fmean(draws) < 310
    logn = [Lengths("lognormal", mean=200, stddev=0.5).draw(rng) for _ in range(4000)]
    assert 190 < statistics.median(logn) < 210
    assert {Lengths("uniform", min=3, max=5).draw(rng) for _ in range(200)} == {3, 4, 5}
    with pytest.raises(ValueError, match="max \\(2\\) must be >= min \\(3\\)"):
        Lengths("uniform", min=3, max=2)


def test_prefix_groups_share_their_prefix_and_nothing_else() -> None:
    source = SyntheticSource(Lengths.fixed(40), Lengths.fixed(8), prefix_len=30, prefix_groups=3, seed=1)
    plan = render(source.specs("level-0", 60), endpoint="completions", model="m", vocab=BUILTIN, sampling=Sampling(),
                  salt="level-0")
    prefixes = {" ".join(b["prompt"].split(" ")[:30]) for b in plan.bodies}
    assert len(prefixes) == 3
    assert len({b["prompt"] for b in plan.bodies}) == 60
    # 57 of 60 requests find their 30-token prefix sent before: 57 x 30 of 60 x 40 prompt tokens
    assert prefix_reuse(source.specs("level-0", 60)) == pytest.approx(57 * 30 / (60 * 40))


def test_poisson_and_gamma_schedules_offer_the_rate_they_name() -> None:
    for burstiness in (1.0, 0.3, 4.0):
        offsets = arrivals.schedule(64, 8.0, seed=0, burstiness=burstiness)
        assert offsets[-1] == pytest.approx(64 / 8.0)  # as vllm bench serve normalises its own
        assert all(b >= a for a, b in zip(offsets, offsets[1:], strict=False))
    gaps = lambda o: [b - a for a, b in zip(o, o[1:], strict=False)]  # noqa: E731
    cv = lambda g: statistics.pstdev(g) / statistics.fmean(g)  # noqa: E731
    bursty, even = arrivals.schedule(2000, 5, burstiness=0.25), arrivals.schedule(2000, 5, burstiness=4)
    assert cv(gaps(bursty)) > 1.5 > 0.7 > cv(gaps(even))  # gamma shape k: cv 1/sqrt(k)
    assert arrivals.schedule(4, 2.0, pattern="constant") == [0.5, 1.0, 1.5, 2.0]
    assert arrivals.offered_rate(arrivals.schedule(64, 8.0), gap_first=True) == pytest.approx(8.0)
    assert arrivals.offered_rate([0.0, 0.5, 1.0], gap_first=False) == pytest.approx(2.0)
    # unrescaled, seed 0's 64 exponential gaps at 8/s span longer than 8 s: the schedule would offer less
    rng = random.Random(0)
    raw = sum(rng.expovariate(8.0) for _ in range(64))
    assert 64 / raw < 8.0 * 0.95


def test_requests_carry_the_workload_sampling() -> None:
    plan = render([RequestSpec(own_tokens=5, output_tokens=9)], endpoint="chat", model="m",
                  vocab=Vocabulary(("a", "b"), exact=True, specials=1), sampling=Sampling(0.7, 0.9, False))
    body = plan.bodies[0]
    assert (body["temperature"], body["top_p"], body["max_tokens"], "ignore_eos" in body) == (0.7, 0.9, 9, False)
    assert body["messages"][0]["content"].count(" ") == 4
    assert plan.input_tokens == (5,) and not plan.exact  # a chat template adds tokens nobody counted


def test_the_shipped_sample_files_read_back(tmp_path: Path) -> None:
    paths = write_samples(tmp_path)
    before = [p.read_bytes() for p in paths]
    assert [p.read_bytes() for p in write_samples(tmp_path)] == before  # the same bytes every time
    trace = read_trace(tmp_path / "trace.jsonl", block_size=64)
    shape = TraceSource(trace).shape(["level-0"], len(trace.requests))
    assert shape.prefix_reuse > 0.3 and shape.offered_rate and 1 < shape.offered_rate < 4
    assert shape.longest_request and shape.longest_request > 800
    assert read_dataset(tmp_path / "sharegpt.json", "sharegpt").skipped == 5
    assert len(read_dataset(tmp_path / "prompts.jsonl", "jsonl").entries) == 200
    assert any("#" in line for line in histogram(list(shape.input_tokens)))


# --- multi-turn sessions ----------------------------------------------------------------------------

def test_generated_sessions_are_reproducible_and_grow_turn_by_turn() -> None:
    from autotuner.workloads.sessions import generated_sessions, render_sessions, session_shape

    def make(stream: str) -> list:
        return generated_sessions(5, turns=Lengths("uniform", min=2, max=4), input_len=Lengths.fixed(30),
                                  output_len=Lengths.fixed(10), seed=3, stream=stream)
    sessions = make("level-0")
    assert sessions == make("level-0") and sessions != make("level-1")
    assert all(2 <= len(s.turns) <= 4 for s in sessions)
    prompts, outputs, reuse = session_shape(sessions[:1])
    # turn k's prompt: every earlier message and answer (40 tokens a round) and its own 30
    assert prompts == [30 + 40 * k for k in range(len(sessions[0].turns))] and set(outputs) == {10}
    assert reuse == pytest.approx(sum(40 * k for k in range(len(prompts))) / sum(prompts))
    plan = render_sessions(sessions, vocab=BUILTIN, sampling=Sampling(), think_s=0.5, salt="level-0")
    assert len(plan) == sum(len(s.turns) for s in sessions) and plan.think_s == 0.5
    messages = [user for s in plan.sessions for user, _ in s]
    assert len(set(messages)) == len(messages) and all(len(m.split(" ")) == 30 for m in messages)


def test_sharegpt_rounds_become_a_sessions_turns(tmp_path: Path) -> None:
    from autotuner.workloads.sessions import dataset_sessions

    path = tmp_path / "s.json"
    path.write_text(json.dumps([{"conversations": [
        {"from": "human", "value": "first"}, {"from": "gpt", "value": "one two"},
        {"from": "human", "value": "second"}, {"from": "gpt", "value": "three four five"},
        {"from": "human", "value": "third, unanswered"}]}]))
    (entry,) = read_dataset(path, "sharegpt").entries
    assert entry.rounds == (("first", "one two"), ("second", "three four five"))
    (session,) = dataset_sessions([entry], token_counts={"one two": 2, "three four five": 3}, default_output=9)
    assert [(t.text, t.output_tokens) for t in session.turns] == [("first", 2), ("second", 3)]
    (capped,) = dataset_sessions([entry], token_counts={}, default_output=9, max_turns=1)
    assert [(t.text, t.output_tokens) for t in capped.turns] == [("first", 9)]
