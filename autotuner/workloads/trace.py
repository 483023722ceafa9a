"""Mooncake-format traces (as AIPerf reads them): one JSON object a line with `timestamp` (ms from the
trace's start), `input_length` and `output_length` (tokens) and `hash_ids`, the ids of the prompt's
blocks of `block_size` (512) tokens, the last one possibly shorter (fewer blocks than the prompt
holds: the rest is tokens of its own, as AIPerf reads it). Equal ids are equal tokens: requests
of one session, or behind one system prompt, share their leading ids, and so a prefix cache sees the
trace's own reuse.

`read_trace` streams the whole file, checking every line (a malformed one names file, line and field;
timestamps that go backwards; a block reused with another length; `hash_ids` that do not cover
`input_length`), and keeps only the window a study replays (`start_s`, `duration_s`, at most `limit`
requests): a million-line trace costs seconds and the window's memory. `trace_specs` makes a level's
requests of it, replayed on its own timestamps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from autotuner.workloads.errors import WorkloadFileError
from autotuner.workloads.files import json_lines, number
from autotuner.workloads.plan import RequestSpec

BLOCK_SIZE = 512


@dataclass(frozen=True)
class TraceRequest:
    timestamp_s: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


@dataclass(frozen=True)
class Trace:
    path: Path
    requests: tuple[TraceRequest, ...]
    block_size: int
    lines: int  # requests in the whole file
    span_s: float  # the whole file's first to last timestamp

    @property
    def window_span_s(self) -> float:
        return self.requests[-1].timestamp_s - self.requests[0].timestamp_s if self.requests else 0.0


def _hash_ids(path: Path, line: int, obj: dict, input_length: int, block_size: int) -> tuple[int, ...]:
    if "hash_ids" not in obj:
        return ()
    ids = obj["hash_ids"]
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise WorkloadFileError(path, f"expected a list of integers, got {str(ids)[:60]}", line=line, field="hash_ids")
    # As AIPerf reads them: fewer blocks than the prompt holds are full blocks and then tokens of its own;
    # more must leave the last one between 1 and block_size tokens.
    if len(ids) > math.ceil(input_length / block_size):
        raise WorkloadFileError(path, f"{len(ids)} blocks of {block_size} tokens are more than input_length "
                                      f"{input_length} fills", line=line, field="hash_ids")
    return tuple(ids)


def block_lengths(input_length: int, blocks: int, block_size: int) -> list[int]:
    """Each block's tokens: full blocks, the last one partial where the prompt ends inside it."""
    return [min(block_size, input_length - block_size * k) for k in range(blocks)]


def read_trace(path: Path, *, block_size: int = BLOCK_SIZE, start_s: float = 0.0, duration_s: float | None = None,
               limit: int | None = None) -> Trace:
    """The trace's window: requests from `start_s` after its first timestamp, for `duration_s`, at most
    `limit`. Raises WorkloadFileError for any bad line of the file (also those outside the window)."""
    kept: list[TraceRequest] = []
    block_len: dict[int, int] = {}  # the window's blocks: a reused id must have one length
    first_ms = last_ms = None
    lines = 0
    for line, obj in json_lines(path):
        ts = number(path, line, obj, "timestamp", integer=False, minimum=0)
        if last_ms is not None and ts < last_ms:
            raise WorkloadFileError(path, f"goes backwards ({ts:g} ms after {last_ms:g} ms on an earlier line)",
                                    line=line, field="timestamp")
        first_ms = ts if first_ms is None else first_ms
        last_ms = ts
        n_in = number(path, line, obj, "input_length")
        n_out = number(path, line, obj, "output_length")
        ids = _hash_ids(path, line, obj, n_in, block_size)
        lines += 1
        offset_s = (ts - first_ms) / 1000
        if offset_s < start_s or (duration_s is not None and offset_s >= start_s + duration_s):
            continue
        if limit is not None and len(kept) >= limit:
            continue
        for block, length in zip(ids, block_lengths(n_in, len(ids), block_size), strict=True):
            if block_len.setdefault(block, length) != length:
                raise WorkloadFileError(path, f"block {block} is {length} tokens here but {block_len[block]} on an "
                                              "earlier line: equal ids must be equal tokens",
                                        line=line, field="hash_ids")
        kept.append(TraceRequest(ts / 1000, n_in, n_out, ids))
    if not kept:
        raise WorkloadFileError(path, f"no request in the window (start_s {start_s:g}, duration_s "
                                      f"{duration_s if duration_s is not None else 'all'}) of its {lines} requests")
    return Trace(path=path, requests=tuple(kept), block_size=block_size, lines=lines,
                 span_s=((last_ms or 0) - (first_ms or 0)) / 1000)


def trace_specs(trace: Trace, *, speedup: float | None = 1.0, count: int | None = None) -> list[RequestSpec]:
    """The window's requests in order (`count`: the first that many, cycling if more), each prompt its
    blocks (a request without `hash_ids` gets tokens of its own); timed at `speedup` (None: untimed)."""
    requests = trace.requests
    n = count if count is not None else len(requests)
    t0 = requests[0].timestamp_s
    specs = []
    for i in range(n):
        r = requests[i % len(requests)]
        blocks = tuple((f"h{b}", length) for b, length in
                       zip(r.hash_ids, block_lengths(r.input_length, len(r.hash_ids), trace.block_size), strict=True))
        # a cycled request arrives one window later, so the schedule keeps its rate
        lap = (i // len(requests)) * (trace.window_span_s + (trace.window_span_s / max(len(requests) - 1, 1)))
        arrival = None if speedup is None else (r.timestamp_s - t0 + lap) / speedup
        specs.append(RequestSpec(blocks=blocks, own_tokens=r.input_length - sum(n for _, n in blocks),
                                 output_tokens=r.output_length, arrival_s=arrival))
    return specs
