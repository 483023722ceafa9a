"""Where a study's requests come from: one `Source` per workload kind, each giving the warm-up and every
load level its own requests, the same in every trial (so every config is measured on the same prompts).

- `SyntheticSource`: lengths from distributions, prefix groups (synthetic.synthetic_specs).
- `DatasetSource`: a dataset's prompts in a fixed order; the warm-up takes the first, each level the
  next `num_prompts`, so no prompt is sent twice to one server while the file lasts (then it wraps,
  and the plan says so).
- `TraceSource`: a trace's window, replayed by every level on the trace's own timestamps (at the level's
  speed-up) or at the level's concurrency or rate; each level's blocks are its own tokens (same reuse
  within the level, none across levels: no level warms another's prefix cache).

`shape` says what the requests are (lengths, longest, prefix reuse, offered rate) before any launch:
what the feasibility rules and the report read. Pure but for reading the workload file.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from autotuner.workloads import arrivals
from autotuner.workloads.dataset import Dataset, dataset_specs
from autotuner.workloads.lengths import Lengths
from autotuner.workloads.plan import RequestSpec
from autotuner.workloads.sessions import Session, dataset_sessions, generated_sessions, session_shape
from autotuner.workloads.synthetic import synthetic_specs
from autotuner.workloads.trace import Trace, trace_specs

WARMUP = "warmup"
SHAPE_SAMPLE = 4096  # synthetic requests a stream that show a workload's shape


def level_stream(step: int, again: bool = False) -> str:
    """The name of level `step`'s requests (its second measurement has its own): the one spelling of it."""
    return f"level-{step}-again" if again else f"level-{step}"


def level_warmup_stream(step: int) -> str:
    """The unmeasured requests that warm level `step` at its own load."""
    return f"level-{step}-warmup"


@dataclass(frozen=True)
class Shape:
    """What a workload's requests are, in tokens (None where a length is not known before a launch)."""

    kind: str
    requests: int
    input_tokens: tuple[int, ...]  # of the requests whose prompt length is known
    output_tokens: tuple[int, ...]
    prefix_reuse: float  # share of prompt tokens a perfect prefix cache could serve (leading blocks seen before)
    offered_rate: float | None = None  # requests/s of the trace's own schedule
    notes: tuple[str, ...] = field(default=())
    messages: int = 1  # chat messages in the longest request (a session's turn holds the history's)

    @property
    def longest_request(self) -> int | None:
        """The most tokens one request needs in the context (prompt and answer), where known."""
        if not self.input_tokens or len(self.input_tokens) != len(self.output_tokens):
            return None
        return max(i + o for i, o in zip(self.input_tokens, self.output_tokens, strict=True))

    @property
    def mean_request(self) -> float | None:
        if not self.input_tokens or len(self.input_tokens) != len(self.output_tokens):
            return None
        return statistics.fmean(i + o for i, o in zip(self.input_tokens, self.output_tokens, strict=True))

    @property
    def longest_output(self) -> int:
        return max(self.output_tokens, default=0)


def prefix_reuse(specs: Sequence[RequestSpec]) -> float:
    """The share of prompt tokens in leading blocks an earlier request of `specs` already sent."""
    seen: set[tuple[str, ...]] = set()
    reused = total = 0
    for s in specs:
        path: tuple[str, ...] = ()
        leading = True
        for key, length in s.blocks:
            path += (key,)
            if leading and path in seen:
                reused += length
            else:
                leading = False
            seen.add(path)
        total += s.input_tokens or 0
    return reused / total if total else 0.0


def describe_lengths(values: Sequence[int]) -> str:
    if not values:
        return "unknown until the server's tokenizer counts them"
    q = statistics.quantiles(values, n=100, method="inclusive") if len(values) > 1 else [values[0]] * 99
    return (f"mean {statistics.fmean(values):.0f}, p50 {q[49]:.0f}, p90 {q[89]:.0f}, p99 {q[98]:.0f}, "
            f"max {max(values)}")


def histogram(values: Sequence[int], bins: int = 8, width: int = 30) -> list[str]:
    """A text histogram of lengths, one line a bin: `  128-255 | ####### 12`."""
    if not values:
        return []
    low, high = min(values), max(values)
    step = max(1, -(-(high - low + 1) // bins))
    counts = [0] * bins
    for v in values:
        counts[min((v - low) // step, bins - 1)] += 1
    top = max(counts)
    bar = lambda c: "#" * max(1 if c else 0, round(width * c / top))  # noqa: E731
    return [f"  {low + k * step:>6}-{low + (k + 1) * step - 1:<6} | {bar(c)} {c}" for k, c in enumerate(counts)]


def shape_lines(shape: Shape, histogram_bins: int = 6) -> list[str]:
    """What the workload's requests are, for a person: lengths, reuse, rate, and a prompt-length histogram."""
    lines = [f"prompt tokens: {describe_lengths(shape.input_tokens)}",
             f"output tokens: {describe_lengths(shape.output_tokens)}",
             f"prefix reuse: {shape.prefix_reuse:.0%} of prompt tokens are a prefix an earlier request of the level "
             "sent (what a prefix cache can serve)"]
    if shape.longest_request is not None:
        lines.append(f"longest request: {shape.longest_request} tokens, prompt and output (what a slot's context "
                     "must hold)")
    if shape.offered_rate is not None:
        lines.append(f"arrivals: {shape.offered_rate:.2f} requests/s on the trace's own schedule (at 1x)")
    lines += [*shape.notes]
    if shape.input_tokens:
        lines += ["prompt tokens, histogram:", *histogram(list(shape.input_tokens), bins=histogram_bins)]
    return lines


class Source(Protocol):
    kind: str
    timed: bool  # its requests carry arrival times (a trace)

    def specs(self, stream: str, n: int) -> list[RequestSpec]: ...

    def shape(self, streams: Sequence[str], n: int) -> Shape: ...


def _shape(kind: str, specs: Sequence[RequestSpec], **extra: object) -> Shape:
    known = [s.input_tokens for s in specs]
    inputs = tuple(k for k in known if k is not None)
    return Shape(kind=kind, requests=len(specs), input_tokens=inputs,
                 output_tokens=tuple(s.output_tokens for s in specs), prefix_reuse=prefix_reuse(specs), **extra)  # type: ignore[arg-type]


@dataclass
class SyntheticSource:
    input_len: Lengths
    output_len: Lengths
    prefix_len: int = 0
    prefix_groups: int = 1
    seed: int = 0
    kind: str = "synthetic"
    timed: bool = False

    def specs(self, stream: str, n: int) -> list[RequestSpec]:
        return synthetic_specs(n, input_len=self.input_len, output_len=self.output_len, prefix_len=self.prefix_len,
                               prefix_groups=self.prefix_groups, seed=self.seed, stream=stream)

    def shape(self, streams: Sequence[str], n: int) -> Shape:
        # Lengths are drawn alike in every stream: a few thousand show the shape (a level of 100,000
        # requests would cost seconds here), and a bounded distribution's longest is its bound.
        n = min(n, SHAPE_SAMPLE)
        specs = [s for stream in streams for s in self.specs(stream, n)]
        shape = _shape(self.kind, specs)
        # reuse within one level: the prefix groups, seen by the level's own requests
        return replace(shape, prefix_reuse=prefix_reuse(self.specs(streams[0], n)) if streams else 0.0)


@dataclass
class DatasetSource:
    """Slices of the dataset in file order: the warm-up's first, then level k's and its re-measurement's."""

    dataset: Dataset
    default_output: int
    warmup: int = 0
    max_output: int | None = None
    token_counts: dict[str, int] = field(default_factory=dict)
    kind: str = "dataset"
    timed: bool = False

    def start(self, stream: str, n: int) -> int:
        if stream == "warmup" or stream.endswith("-warmup"):
            return 0  # warm-ups take the first prompts: never measured, they may be sent again
        k, again = stream_index(stream)
        return self.warmup + (2 * k + again) * n

    def wraps(self, stream: str, n: int) -> bool:
        """Whether the stream reaches past the file's end (then prompts are sent again)."""
        return self.start(stream, n) + n > len(self.dataset.entries)

    def specs(self, stream: str, n: int) -> list[RequestSpec]:
        entries = self.dataset.entries
        first = self.start(stream, n)
        picked = [entries[(first + k) % len(entries)] for k in range(n)]
        return dataset_specs(picked, default_output=self.default_output, token_counts=self.token_counts,
                             max_output=self.max_output)

    def shape(self, streams: Sequence[str], n: int) -> Shape:
        specs = [s for stream in streams for s in self.specs(stream, n)]
        notes = (f"{self.dataset.skipped} conversations without a human turn and an answer skipped",) \
            if self.dataset.skipped else ()
        return _shape(self.kind, specs, notes=notes)


def stream_index(stream: str) -> tuple[int, int]:
    """("level-3-again") -> (3, 1); "" or "level-0" -> (0, 0): a level's place among the streams."""
    if not stream:
        return 0, 0
    parts = stream.split("-")
    if parts[0] != "level" or len(parts) < 2 or not parts[1].isdigit():
        raise ValueError(f"not a level stream: {stream!r}")
    return int(parts[1]), int(parts[-1] == "again")


@dataclass
class TraceSource:
    trace: Trace
    kind: str = "trace"
    timed: bool = True

    def specs(self, stream: str, n: int) -> list[RequestSpec]:
        # the stream's salt (Renderer) keeps each level's blocks its own; the order and times are the trace's
        return trace_specs(self.trace, speedup=1.0, count=n)

    def shape(self, streams: Sequence[str], n: int) -> Shape:
        specs = self.specs(streams[0] if streams else "", n)
        offsets = [s.arrival_s or 0.0 for s in specs]
        return _shape(self.kind, specs, offered_rate=arrivals.offered_rate(offsets, gap_first=False))

    @property
    def path(self) -> Path:
        return self.trace.path


@dataclass
class SessionSource:
    """Multi-turn sessions (workloads/sessions.py): generated, or a dataset's conversations in its order."""

    turns: Lengths
    input_len: Lengths
    output_len: Lengths
    think_s: float = 0.0
    seed: int = 0
    dataset: DatasetSource | None = None
    max_turns: int | None = None
    kind: str = "sessions"
    timed: bool = False

    def sessions(self, stream: str, n: int) -> list[Session]:
        if self.dataset is not None:
            d = self.dataset
            entries = d.dataset.entries
            first = d.start(stream, n)
            picked = [entries[(first + k) % len(entries)] for k in range(n)]
            return dataset_sessions(picked, token_counts=d.token_counts, default_output=d.default_output,
                                    max_output=d.max_output, max_turns=self.max_turns)
        return generated_sessions(n, turns=self.turns, input_len=self.input_len, output_len=self.output_len,
                                  seed=self.seed, stream=stream)

    def specs(self, stream: str, n: int) -> list[RequestSpec]:
        """Every turn's new message (what the quality of a session's lengths is judged by)."""
        return [t for s in self.sessions(stream, n) for t in s.turns]

    def shape(self, streams: Sequence[str], n: int) -> Shape:
        prompts, outputs, reuse = session_shape([s for stream in streams for s in self.sessions(stream, n)])
        turns = f"{self.turns.describe()} turns"
        if self.dataset is not None:
            turns = "a conversation's rounds" + (f" (at most {self.max_turns})" if self.max_turns else "")
        if len(prompts) != len(outputs) or not prompts:
            outputs = [t.output_tokens for stream in streams for t in self.specs(stream, n)]
        longest = max((len(x.turns) for stream in streams for x in self.sessions(stream, n)), default=1)
        return Shape(kind=self.kind, requests=len(outputs), input_tokens=tuple(prompts), output_tokens=tuple(outputs),
                     prefix_reuse=reuse, messages=2 * longest - 1,
                     notes=(f"sessions of {turns}, each turn sent with the history and the answers the server gave, "
                            f"{self.think_s:g} s think time between turns",))
