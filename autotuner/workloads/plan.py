"""A level's requests before and after they have text: the one shape every workload kind yields.

A `RequestSpec` says what one request must be in the served model's tokens: `blocks` of prompt tokens
(each a key and a length: equal keys are equal tokens, so a server's prefix cache sees reuse exactly
where the workload has it), then `own_tokens` drawn for this request alone, or a dataset's `text` as
it is; `output_tokens` to generate; `arrival_s` when a trace fixes it. `render` turns specs into
request bodies with a `Vocabulary`: words that are one token each on the served model (found through
its tokenize endpoint, bench/tokenize.py), so a prompt of N words is N prompt tokens. With the
built-in word list (no tokenize endpoint) lengths are close, not exact, and the plan says so.

Pure: no file, no connection, no clock.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotuner.workloads.words import ENDPOINT_PATHS, WORDS


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters sent with every request of a workload (greedy, answers of exact length, by
    default: `ignore_eos` makes the server generate exactly the output length asked for)."""

    temperature: float = 0.0
    top_p: float | None = None
    ignore_eos: bool = True


@dataclass(frozen=True)
class RequestSpec:
    blocks: tuple[tuple[str, int], ...] = ()
    own_tokens: int = 0
    output_tokens: int = 64
    arrival_s: float | None = None
    text: str | None = None  # a dataset's prompt, sent as written (after any blocks)
    text_tokens: int | None = None  # its length in the served model's tokens, where known

    @property
    def input_tokens(self) -> int | None:
        """Prompt tokens asked for (None: a text whose length in tokens is not known)."""
        text = 0 if self.text is None else self.text_tokens
        return None if text is None else sum(n for _, n in self.blocks) + self.own_tokens + text


@dataclass(frozen=True)
class Vocabulary:
    """Words to build prompts from; `exact`: each is one token of the served model (checked)."""

    words: tuple[str, ...] = WORDS
    exact: bool = False
    specials: int = 0  # tokens the server adds to every prompt it is sent (a BOS)
    source: str = "the built-in word list (about one token each; no tokenize endpoint was asked)"

    def __post_init__(self) -> None:
        if len(self.words) < 2:
            raise ValueError("a vocabulary needs at least two words")


BUILTIN = Vocabulary()


@dataclass(frozen=True)
class LevelPlan:
    """What one level sends: request bodies in order, the prompt tokens each asked for, when each goes."""

    path: str
    bodies: tuple[dict[str, Any], ...]
    input_tokens: tuple[int | None, ...]
    arrivals_s: tuple[float, ...] | None = None  # None: as the level's load says (concurrency, rate)
    exact: bool = False
    endpoint: str = "completions"

    def __len__(self) -> int:
        return len(self.bodies)

    @property
    def requested_input_tokens(self) -> int | None:
        """The prompt tokens the plan asked for in all (None when some request's length is unknown)."""
        if any(n is None for n in self.input_tokens):
            return None
        return sum(n for n in self.input_tokens if n is not None)


def _seed(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:8], "big")


SHARED = "prefix/"  # block keys the same in every stream: a workload's shared prefixes, on purpose


class Renderer:
    """Turns specs into prompt text with one vocabulary; a block's words depend on its key alone (and
    the `salt`, so a level can have blocks no other level shares, except keys starting with SHARED: a
    synthetic workload's shared prefixes are the same in the warm-up and every level), and are cached
    while they are reused."""

    def __init__(self, vocab: Vocabulary, salt: str = "", cache_blocks: int = 4096):
        self.vocab, self.salt = vocab, salt
        self._blocks: dict[tuple[str, int], list[str]] = {}
        self._cache_blocks = cache_blocks

    def block(self, key: str, length: int) -> list[str]:
        words = self._blocks.get((key, length))
        if words is None:
            salt = "" if key.startswith(SHARED) else self.salt
            words = random.Random(_seed(salt, "block", key)).choices(self.vocab.words, k=length)
            if len(self._blocks) >= self._cache_blocks:
                self._blocks.pop(next(iter(self._blocks)))
            self._blocks[(key, length)] = words
        return words

    def prompt(self, spec: RequestSpec, index: int) -> str:
        words: list[str] = []
        for key, length in spec.blocks:
            words += self.block(key, length)
        if spec.own_tokens:
            words += random.Random(_seed(self.salt, "own", index)).choices(self.vocab.words, k=spec.own_tokens)
        text = " ".join(words)
        if spec.text is not None:
            text = f"{text}\n{spec.text}" if text else spec.text
        return text


def body(endpoint: str, model: str, prompt: str, max_tokens: int, sampling: Sampling) -> dict[str, Any]:
    """One streaming request body for `endpoint` ("completions" or "chat") carrying `prompt`."""
    payload: dict[str, Any] = {"model": model}
    if endpoint == "chat":
        payload["messages"] = [{"role": "user", "content": prompt}]
    else:
        payload["prompt"] = prompt
    payload["max_tokens"] = max_tokens
    payload["temperature"] = sampling.temperature
    if sampling.top_p is not None:
        payload["top_p"] = sampling.top_p
    payload["stream"] = True
    # Without include_usage the token counts would have to be guessed from the number of chunks.
    payload["stream_options"] = {"include_usage": True}
    if sampling.ignore_eos:
        payload["ignore_eos"] = True
    return payload


def render(specs: Sequence[RequestSpec], *, endpoint: str, model: str, vocab: Vocabulary, sampling: Sampling,
           salt: str = "") -> LevelPlan:
    """The level's bodies from its specs. Arrival times come along when every spec has one."""
    if endpoint not in ENDPOINT_PATHS:
        raise ValueError(f"unknown endpoint {endpoint!r}; valid: {sorted(ENDPOINT_PATHS)}")
    renderer = Renderer(vocab, salt)
    bodies = tuple(body(endpoint, model, renderer.prompt(s, i), s.output_tokens, sampling)
                   for i, s in enumerate(specs))
    arrivals = [s.arrival_s for s in specs]
    timed = tuple(a for a in arrivals if a is not None)
    extra = vocab.specials if endpoint == "completions" else 0  # a chat template adds tokens we do not count
    asked = tuple(None if s.input_tokens is None else s.input_tokens + extra for s in specs)
    return LevelPlan(path=ENDPOINT_PATHS[endpoint], bodies=bodies, input_tokens=asked,
                     arrivals_s=timed if specs and len(timed) == len(specs) else None,
                     exact=vocab.exact and endpoint == "completions", endpoint=endpoint)
