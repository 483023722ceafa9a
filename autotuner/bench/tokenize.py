"""Counting in the served model's tokens, through the server's own tokenize endpoint.

Every engine we drive has one (llama-server and vLLM: POST /tokenize; the engine adapter says which
field carries the text and how to leave special tokens out). Two uses:

- `one_token_words`: which of a list of words add exactly one token after another word (as they do in
  a prompt of words), so a prompt of N such words is N tokens: prompts exact in the model's tokens,
  whatever its tokenizer. The words found are checked once more as a whole prompt.
- `count_tokens`: the length of texts (a dataset's prompts and reference answers).

A server without the endpoint, or an answer we cannot read, gives None: the caller falls back to the
built-in word list and says so. Never raises for a server's answer.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import httpx

CONCURRENCY = 16
CHECK_WORDS = 256  # the length of the prompt that checks the words found


class TokenizeEndpoint(Protocol):
    """How a server tokenizes (the engine adapter says: engines/_base.TokenizeEndpoint): POST `path`
    with {text_field: text, special_field: whether to add the special tokens (BOS) a prompt gets} (and
    "model" when asked); the answer's "tokens" is a list."""

    @property
    def path(self) -> str: ...
    @property
    def text_field(self) -> str: ...
    @property
    def special_field(self) -> str: ...
    @property
    def with_model(self) -> bool: ...


async def _count(client: httpx.AsyncClient, url: str, endpoint: TokenizeEndpoint, model: str, text: str,
                 special: bool = False) -> int | None:
    body: dict[str, Any] = {endpoint.text_field: text, endpoint.special_field: special}
    if endpoint.with_model:
        body["model"] = model
    try:
        response = await client.post(url, json=body)
        if response.status_code != 200:
            return None
        tokens = response.json().get("tokens")
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return len(tokens) if isinstance(tokens, list) else None


async def count_tokens(base_url: str, endpoint: TokenizeEndpoint, model: str, texts: Iterable[str],
                       timeout_s: float = 30.0, special: bool = False) -> dict[str, int] | None:
    """{text: its length in tokens (`special`: with the BOS a prompt gets)}; None when the server does
    not answer one of them."""
    unique = list(dict.fromkeys(texts))
    url = base_url.rstrip("/") + endpoint.path
    gate = asyncio.Semaphore(CONCURRENCY)
    async with httpx.AsyncClient(timeout=timeout_s, trust_env=False) as client:
        async def one(text: str) -> int | None:
            async with gate:
                return await _count(client, url, endpoint, model, text, special)
        counts = await asyncio.gather(*(one(t) for t in unique))
    if any(c is None for c in counts):
        return None
    return {t: c for t, c in zip(unique, counts, strict=True) if c is not None}


async def special_tokens(base_url: str, endpoint: TokenizeEndpoint, model: str, timeout_s: float = 30.0) -> int:
    """How many tokens the server adds to a prompt (a BOS: 1); 0 when it cannot say."""
    plain = await count_tokens(base_url, endpoint, model, ["hello"], timeout_s)
    full = await count_tokens(base_url, endpoint, model, ["hello"], timeout_s, special=True)
    return max(0, full["hello"] - plain["hello"]) if plain and full else 0


async def one_token_words(base_url: str, endpoint: TokenizeEndpoint, model: str, words: Sequence[str],
                          timeout_s: float = 30.0) -> tuple[str, ...] | None:
    """The words that add one token after another word, if they make a checked prompt of exact length;
    None when the endpoint does not answer or too few words qualify."""
    anchor = words[0]
    texts = [anchor] + [f"{anchor} {w}" for w in words]
    counts = await count_tokens(base_url, endpoint, model, texts, timeout_s)
    if counts is None:
        return None
    base = counts[anchor]
    found = tuple(w for w in words if counts[f"{anchor} {w}"] - base == 1)
    if len(found) < 2:
        return None
    # The whole prompt: tokenizers may merge across words; the found words must still count one each.
    sample = " ".join(random.Random(0).choices(found, k=CHECK_WORDS))
    check = await count_tokens(base_url, endpoint, model, [f"{anchor} {sample}"], timeout_s)
    if check is None or check[f"{anchor} {sample}"] - base != CHECK_WORDS:
        return None
    return found
