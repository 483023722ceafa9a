"""Synthetic workloads: what the load generator sends, as plain request payloads.

A `Workload` says which OpenAI-compatible endpoint to drive and how long prompts and answers are;
`build_payloads` turns it into the list of JSON request bodies, deterministically from the seed, so two
trials of a study send byte-identical requests. Prompts are random words from a fixed list of short,
common English words (about one token each for the usual BPE tokenizers), drawn independently from the
first word on, so prompts share no long prefix that a prefix cache could reuse between requests.

No configuration may get a prefix-cache head start: a prompt is never sent twice to one server.
`warmup_workload` and `level_workload` give the warm-up and each load level their own stream of prompts
(a seed derived from the workload's seed and the level's index: the same for every trial, so every
configuration sees the same prompts at the same level). Reuse is only ever on purpose and the same for
everyone: `shared_prefix_len` words at the start of every prompt (warm-up and levels alike) are one fixed
prefix.

This module is pure: it never opens a connection, reads a file or looks at the clock.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import asdict, dataclass, replace
from typing import Any

from autotuner.workloads.lengths import Lengths
from autotuner.workloads.plan import SHARED, RequestSpec
from autotuner.workloads.words import ENDPOINT_PATHS, WORDS, Endpoint


@dataclass(frozen=True)
class Workload:
    """What to send: endpoint, number of requests, prompt and output lengths (tokens), seed.

    `ignore_eos` asks the server to generate exactly `output_len` tokens (llama-server, vLLM and SGLang
    all accept it); without it a model may stop early and output throughput means less.
    `shared_prefix_len`: the first that many of the `input_len` words are the same in every prompt.
    `stream`: which prompts ("": the seed's own, else e.g. "warmup", "level-2": see `derived_seed`); the
    shared prefix depends on the seed alone, so every stream of a workload shares it.
    """

    endpoint: Endpoint = "completions"
    num_prompts: int = 64
    input_len: int = 128
    output_len: int = 64
    seed: int = 0
    ignore_eos: bool = True
    shared_prefix_len: int = 0
    stream: str = ""

    def __post_init__(self) -> None:
        if self.endpoint not in ENDPOINT_PATHS:
            raise ValueError(f"unknown endpoint {self.endpoint!r}; valid: {sorted(ENDPOINT_PATHS)}")
        for name in ("num_prompts", "input_len", "output_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.shared_prefix_len < self.input_len:
            raise ValueError(f"shared_prefix_len must be >= 0 and below input_len ({self.input_len}): each prompt "
                             f"needs words of its own, got {self.shared_prefix_len}")

    @property
    def prompt_seed(self) -> int:
        return derived_seed(self.seed, self.stream) if self.stream else self.seed

    @property
    def path(self) -> str:
        """The request path, e.g. "/v1/completions"."""
        return ENDPOINT_PATHS[self.endpoint]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def derived_seed(seed: int, stream: str) -> int:
    """The seed of another stream of prompts (e.g. "warmup", "level-2"), fixed by `seed` and `stream`.

    A hash, not an offset: an offset stream of seed 0 would be the main stream of some other seed.
    """
    return int.from_bytes(hashlib.sha256(f"{seed}/{stream}".encode()).digest()[:8], "big")


def warmup_workload(workload: Workload, num_prompts: int) -> Workload:
    """The warm-up's requests: `num_prompts` prompts that no load level sends (same prefix, if any)."""
    return replace(workload, num_prompts=num_prompts, stream="warmup")


def level_workload(workload: Workload, index: int, again: bool = False) -> Workload:
    """The requests of load level `index` (0 first): prompts no other level or warm-up sends.

    Level 0 keeps the workload's own seed, so a one-level study sends the prompts it always sent.
    `again`: the level's second measurement, with prompts of its own (a server may have cached the first's).
    """
    if again:
        return replace(workload, stream=f"level-{index}-again")
    return workload if index == 0 else replace(workload, stream=f"level-{index}")


def build_prompts(num_prompts: int, input_len: int, seed: int = 0, prefix: str = "") -> list[str]:
    """`num_prompts` prompts of `input_len` random words each, the same for the same arguments; with a
    `prefix` (words), each prompt is the prefix and then `input_len` minus its length words of its own."""
    rng = random.Random(seed)
    own = input_len - len(prefix.split())
    return [" ".join((prefix, *rng.choices(WORDS, k=own)) if prefix else rng.choices(WORDS, k=own))
            for _ in range(num_prompts)]


def shared_prefix(workload: Workload) -> str:
    """The `shared_prefix_len` words every prompt of the workload starts with ("" for none)."""
    if not workload.shared_prefix_len:
        return ""
    return " ".join(random.Random(derived_seed(workload.seed, "prefix")).choices(WORDS, k=workload.shared_prefix_len))


def build_payload(workload: Workload, model: str, prompt: str) -> dict[str, Any]:
    """One streaming request body for `workload.endpoint` carrying `prompt`."""
    payload: dict[str, Any] = {"model": model}
    if workload.endpoint == "chat":
        payload["messages"] = [{"role": "user", "content": prompt}]
    else:
        payload["prompt"] = prompt
    payload["max_tokens"] = workload.output_len
    payload["temperature"] = 0.0
    payload["stream"] = True
    # Without include_usage the token counts would have to be guessed from the number of chunks.
    payload["stream_options"] = {"include_usage": True}
    if workload.ignore_eos:
        payload["ignore_eos"] = True
    return payload


def build_payloads(workload: Workload, model: str) -> list[dict[str, Any]]:
    """All `workload.num_prompts` request bodies, deterministic in `workload.seed` and `workload.stream`."""
    prompts = build_prompts(workload.num_prompts, workload.input_len, workload.prompt_seed, shared_prefix(workload))
    return [build_payload(workload, model, p) for p in prompts]


def synthetic_specs(n: int, *, input_len: Lengths, output_len: Lengths, prefix_len: int = 0, prefix_groups: int = 1,
                    seed: int = 0, stream: str = "") -> list[RequestSpec]:
    """`n` requests with lengths drawn from `input_len` and `output_len` (in tokens); with `prefix_len`,
    each prompt starts with one of `prefix_groups` shared prefixes of that many tokens (the same in
    every stream: reuse on purpose, the same for every config), drawn at random per request, then
    tokens of its own (at least one). The lengths depend on `seed` and `stream` alone."""
    rng = random.Random(derived_seed(seed, f"lengths/{stream}"))
    specs = []
    for _ in range(n):
        n_in, n_out = input_len.draw(rng), output_len.draw(rng)
        blocks: tuple[tuple[str, int], ...] = ()
        if prefix_len:
            group = rng.randrange(prefix_groups)
            shared = min(prefix_len, n_in - 1)
            blocks = ((f"{SHARED}{seed}/{group}", shared),) if shared else ()
        own = n_in - sum(length for _, length in blocks)
        specs.append(RequestSpec(blocks=blocks, own_tokens=own, output_tokens=n_out))
    return specs
