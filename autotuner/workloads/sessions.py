"""Multi-turn sessions: conversations whose every turn is sent with the whole history, the previous
answers being those the server actually gave, after a think time. What chat and agent traffic does to
a server: a prompt that grows turn by turn behind a prefix it has seen (a prefix cache's best case),
and TTFT that depends on the turn.

A `Session` is its turns' new user messages (tokens of its own, or a dataset's text) and output
lengths; `generated_sessions` draws them from length distributions, `dataset_sessions` takes a ShareGPT
conversation's rounds (each human turn, the length of its reference answer). `render_sessions` turns
them into a `SessionPlan`: the user messages as text, what the runner (bench/runner.run_sessions) sends.

Pure: no file, no connection, no clock.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from autotuner.workloads.dataset import Entry
from autotuner.workloads.lengths import Lengths
from autotuner.workloads.plan import Renderer, RequestSpec, Sampling, Vocabulary
from autotuner.workloads.synthetic import derived_seed


@dataclass(frozen=True)
class Session:
    turns: tuple[RequestSpec, ...]  # each turn's new user message and its output length


@dataclass(frozen=True)
class SessionPlan:
    """A level of sessions: per session, per turn, (user message, max_tokens); sent with the history."""

    sessions: tuple[tuple[tuple[str, int], ...], ...]
    think_s: float
    sampling: Sampling
    exact: bool = False

    def __len__(self) -> int:
        return sum(len(s) for s in self.sessions)


def generated_sessions(n: int, *, turns: Lengths, input_len: Lengths, output_len: Lengths, seed: int = 0,
                       stream: str = "") -> list[Session]:
    """`n` sessions of `turns` turns each (drawn), each user message and answer drawn from its lengths."""
    rng = random.Random(derived_seed(seed, f"sessions/{stream}"))
    return [Session(tuple(RequestSpec(own_tokens=input_len.draw(rng), output_tokens=output_len.draw(rng))
                          for _ in range(turns.draw(rng))))
            for _ in range(n)]


def dataset_sessions(entries: Sequence[Entry], *, token_counts: dict[str, int], default_output: int,
                     max_output: int | None = None, max_turns: int | None = None) -> list[Session]:
    """Each conversation's rounds as a session: its human turns, outputs as long as their answers."""
    out = []
    for e in entries:
        rounds = e.rounds or ((e.prompt, e.answer or ""),)
        turns = []
        for asked, said in rounds[:max_turns]:
            length = e.output_tokens or token_counts.get(said) or default_output
            turns.append(RequestSpec(text=asked, text_tokens=token_counts.get(asked),
                                     output_tokens=max(1, min(length, max_output or length))))
        out.append(Session(tuple(turns)))
    return out


def render_sessions(sessions: Sequence[Session], *, vocab: Vocabulary, sampling: Sampling, think_s: float,
                    salt: str = "") -> SessionPlan:
    renderer = Renderer(vocab, salt)
    rendered = tuple(tuple((renderer.prompt(turn, 1000 * i + k), turn.output_tokens) for k, turn in enumerate(s.turns))
                     for i, s in enumerate(sessions))
    return SessionPlan(rendered, think_s, sampling)


def session_shape(sessions: Sequence[Session], specials: int = 0) -> tuple[list[int], list[int], float]:
    """Each turn's whole prompt (the history, its answers and the new message) and output, where the
    lengths are known, and the share of prompt tokens that are the history a previous turn sent."""
    prompts, outputs = [], []
    reused = total = 0
    for s in sessions:
        history = 0
        for turn in s.turns:
            own = turn.input_tokens
            if own is None:
                break
            prompt = history + own + specials
            prompts.append(prompt)
            outputs.append(turn.output_tokens)
            reused += history
            total += prompt
            history += own + turn.output_tokens
    return prompts, outputs, (reused / total if total else 0.0)
