"""Datasets of prompts, in the formats people already have:

- `sharegpt`: a JSON array (or JSON Lines) of `{"conversations": [{"from": "human", "value": ...},
  {"from": "gpt", "value": ...}, ...]}`. As `vllm bench serve` does, the first human turn is the prompt
  and the answer after it says how long the output is (its length in the served model's tokens, or
  `output_len` where no tokenizer was asked); a conversation without a human turn and an answer is
  skipped and counted.
- `jsonl`: one request a line, with the field names of `vllm bench serve --dataset-name custom` and
  AIPerf's single-turn files: the prompt as `prompt` or `text` (or `texts`, joined) or chat `messages`
  (the last user message is sent), and an optional output length as `output_tokens`, `output_length` or
  `max_tokens`.

`read_dataset` returns at most `limit` entries in file order (a JSON Lines file streams).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from autotuner.workloads.errors import WorkloadFileError
from autotuner.workloads.files import json_document, json_lines, number
from autotuner.workloads.plan import RequestSpec

Format = Literal["sharegpt", "jsonl"]
HUMAN = ("human", "user")
ASSISTANT = ("gpt", "assistant", "chatgpt", "bard", "model")
OUTPUT_FIELDS = ("output_tokens", "output_length", "max_tokens")
PROMPT_FIELDS = ("prompt", "text", "texts", "messages")


@dataclass(frozen=True)
class Entry:
    prompt: str
    output_tokens: int | None  # given by the file
    answer: str | None = None  # a reference answer whose length sets the output (ShareGPT)
    rounds: tuple[tuple[str, str], ...] = ()  # every (human turn, its answer) of a conversation, in order


@dataclass(frozen=True)
class Dataset:
    path: Path
    entries: tuple[Entry, ...]
    skipped: int = 0


def _text(path: Path, line: int, value: Any, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise WorkloadFileError(path, f"expected non-empty text, got {str(value)[:60]!r}", line=line, field=field)
    return value


def _jsonl_entry(path: Path, line: int, obj: dict[str, Any]) -> Entry:
    given = [f for f in PROMPT_FIELDS if f in obj]
    if not given:
        raise WorkloadFileError(path, f"no prompt: give one of {', '.join(PROMPT_FIELDS)}", line=line)
    name = given[0]
    value = obj[name]
    if name == "texts":
        if not isinstance(value, list) or not value:
            raise WorkloadFileError(path, "expected a non-empty list of texts", line=line, field=name)
        prompt = "\n".join(_text(path, line, v, name) for v in value)
    elif name == "messages":
        users = [m for m in value if isinstance(m, dict) and m.get("role") == "user"] if isinstance(value, list) else []
        if not users:
            raise WorkloadFileError(path, "expected a list of chat messages with a user message", line=line, field=name)
        prompt = _text(path, line, users[-1].get("content"), f"{name}.content")
    else:
        prompt = _text(path, line, value, name)
    out = next((number(path, line, obj, f) for f in OUTPUT_FIELDS if f in obj), None)
    return Entry(prompt, out)


def _sharegpt_entry(path: Path, line: int, obj: Any) -> Entry | None:
    turns = obj.get("conversations", obj.get("conversation")) if isinstance(obj, dict) else None
    if not isinstance(turns, list):
        raise WorkloadFileError(path, "expected a ShareGPT conversation: an object with a 'conversations' list",
                                line=line, field="conversations")
    rounds: list[tuple[str, str]] = []
    for k, turn in enumerate(turns[:-1]):
        if not isinstance(turn, dict) or "value" not in turn:
            raise WorkloadFileError(path, "each turn needs 'from' and 'value'", line=line, field=f"conversations[{k}]")
        answer = turns[k + 1]
        if (turn.get("from") not in HUMAN or not isinstance(answer, dict)
                or answer.get("from", "gpt") not in ASSISTANT):
            continue
        asked, said = turn["value"], answer.get("value")
        if isinstance(asked, str) and isinstance(said, str) and asked.strip() and said.strip():
            rounds.append((asked, said))
    if not rounds:
        return None
    return Entry(rounds[0][0], None, rounds[0][1], tuple(rounds))


def read_dataset(path: Path, fmt: Format, *, limit: int | None = None) -> Dataset:
    entries: list[Entry] = []
    skipped = 0
    if fmt == "jsonl":
        for line, obj in json_lines(path):
            if limit is not None and len(entries) >= limit:
                break
            entries.append(_jsonl_entry(path, line, obj))
    elif fmt == "sharegpt":
        if path.suffix == ".jsonl":
            items: Any = json_lines(path)
        else:
            doc = json_document(path)
            if not isinstance(doc, list):
                raise WorkloadFileError(path, f"expected a JSON array of conversations, got {type(doc).__name__}")
            items = ((k + 1, obj) for k, obj in enumerate(doc))  # "line": the conversation's place in the array
        for line, obj in items:
            if limit is not None and len(entries) >= limit:
                break
            entry = _sharegpt_entry(path, line, obj)
            if entry is None:
                skipped += 1
            else:
                entries.append(entry)
    else:
        raise ValueError(f"unknown dataset format {fmt!r}; valid: sharegpt, jsonl")
    if not entries:
        raise WorkloadFileError(path, "no usable request in it" + (f" ({skipped} conversations without a human "
                                                                    "turn and an answer)" if skipped else ""))
    return Dataset(path, tuple(entries), skipped)


def dataset_specs(entries: list[Entry], *, default_output: int, token_counts: dict[str, int] | None = None,
                  max_output: int | None = None) -> list[RequestSpec]:
    """Specs of `entries`: the prompt as written; output tokens from the file, else the answer's length in
    `token_counts` (the served model's tokens), else `default_output`; capped at `max_output`."""
    counts = token_counts or {}
    specs = []
    for e in entries:
        out = e.output_tokens or (counts.get(e.answer) if e.answer is not None else None) or default_output
        if max_output is not None:
            out = min(out, max_output)
        specs.append(RequestSpec(text=e.prompt, text_tokens=counts.get(e.prompt), output_tokens=max(1, out)))
    return specs
