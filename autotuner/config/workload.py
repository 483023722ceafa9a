"""The experiment's `workload:`: what the load generator sends, as a file says it.

Synthetic by default (lengths in tokens, fixed or from a distribution, optional prefix groups), or a
`dataset` (ShareGPT, JSONL of prompts) or a `trace` (Mooncake JSONL) named by path, relative to the
experiment file. `source` reads the file (once per process: traces can be large) and gives the
workloads package's `Source`; a bad file is a ConfigError naming file, line and field.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from autotuner.config._base import ConfigError, _Strict
from autotuner.workloads.dataset import Dataset, read_dataset
from autotuner.workloads.errors import WorkloadFileError
from autotuner.workloads.lengths import Lengths
from autotuner.workloads.plan import Sampling
from autotuner.workloads.source import DatasetSource, SessionSource, Source, SyntheticSource, TraceSource
from autotuner.workloads.trace import BLOCK_SIZE, Trace, read_trace

DEFAULT_PROMPTS = 64  # measured requests a level, unless the experiment or a trace's window says


class LengthsConfig(_Strict):
    """A length distribution in tokens: {dist: normal, mean: 360, stddev: 120, min: 16, max: 900}."""

    dist: Literal["fixed", "uniform", "normal", "lognormal"] = Field(
        "fixed", description="fixed (mean), uniform (min..max), normal (mean, stddev), lognormal (mean is the "
                             "median, stddev that of the log, e.g. 0.6).")
    mean: float | None = Field(None, ge=1, description="The value (fixed), the mean (normal), the median (lognormal).")
    stddev: float = Field(0.0, ge=0, description="The spread: of the values (normal), of their log (lognormal).")
    min: int = Field(1, ge=1, description="Every draw is clamped to [min, max].")
    max: int | None = Field(None, ge=1, description="The upper clamp (uniform: the upper end).")

    @model_validator(mode="after")
    def _complete(self) -> LengthsConfig:
        if self.dist == "uniform" and self.max is None:
            raise ValueError("a uniform length needs min and max")
        if self.dist != "uniform" and self.mean is None:
            raise ValueError(f"a {self.dist} length needs mean")
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self

    def lengths(self) -> Lengths:
        return Lengths(self.dist, mean=self.mean or self.min, stddev=self.stddev, min=self.min, max=self.max)


def _lengths(value: int | LengthsConfig) -> Lengths:
    return Lengths.fixed(value) if isinstance(value, int) else value.lengths()


class SamplingConfig(_Strict):
    """The sampling parameters every request carries."""

    temperature: float = Field(0.0, ge=0, description="Sent with every request (0: greedy).")
    top_p: float | None = Field(None, gt=0, le=1, description="Sent when set.")
    ignore_eos: bool = Field(True, description="Ask for exactly the output length (the server never stops "
                                               "early); false lets the model end its answers.")


class DatasetConfig(_Strict):
    """Prompts (and output lengths) from a file of the user's."""

    path: Path = Field(description="ShareGPT JSON (or JSONL) or JSONL of prompts, relative to the experiment file.")
    format: Literal["sharegpt", "jsonl"] = Field(
        description="sharegpt: conversations of from/value (first human turn, its answer's length); jsonl: "
                    "prompt|text|texts|messages and optional output_tokens|output_length|max_tokens per line.")
    max_output_len: int | None = Field(None, gt=0, description="Cap on a request's output tokens.")


class TraceConfig(_Strict):
    """Requests replayed from a trace: their lengths, shared prefix blocks and arrival times."""

    path: Path = Field(description="Mooncake-format JSONL (timestamp ms, input_length, output_length, hash_ids), "
                                   "relative to the experiment file.")
    format: Literal["mooncake"] = Field("mooncake", description="The trace's format.")
    block_size: int = Field(BLOCK_SIZE, gt=0, description="Tokens per hash_ids block.")
    start_s: float = Field(0.0, ge=0, description="The window replayed starts this long after the trace's first "
                                                  "request.")
    duration_s: float | None = Field(None, gt=0, description="The window's length (default: to the end).")


class SessionsConfig(_Strict):
    """Multi-turn sessions: each turn sent with the history and the answers the server gave (chat)."""

    turns: PositiveInt | LengthsConfig = Field(3, description="Turns a session: a number or a distribution (generated "
                                                      "sessions; a dataset's conversations have their own).")
    think_time_s: float = Field(0.0, ge=0, description="Pause between an answer and the next turn.")
    max_turns: int | None = Field(None, gt=0, description="At most this many turns of a dataset's conversation.")


class WorkloadConfig(_Strict):
    """What the load generator sends: synthetic prompts, a dataset, a trace, or multi-turn sessions."""

    endpoint: Literal["completions", "chat"] = Field(
        "completions", description="The OpenAI-compatible endpoint requests go to (/v1/completions or "
                                   "/v1/chat/completions).")
    num_prompts: int | None = Field(None, gt=0, description="Measured requests per load level, the most it sends "
                                                            "(default 64; a trace: its window's requests).")
    duration_s: float | None = Field(
        None, gt=0, description="Bound each load level by time too: no request starts after this many seconds "
                                "(those in flight finish). A level ends after num_prompts requests or about "
                                "duration_s, whichever comes first; every config gets the same prompts in order.")
    input_len: PositiveInt | LengthsConfig = Field(
        128, description="Prompt tokens: a number, or a distribution {dist, mean, stddev, min, max}.")
    output_len: PositiveInt | LengthsConfig = Field(
        64, description="Generated tokens per request: a number or a distribution (a dataset: its default).")
    warmup_requests: int = Field(4, ge=0, description="Unmeasured requests sent before each trial.")
    level_warmup: bool = Field(True, description="Before each concurrency level after the first, as many unmeasured "
                                                 "requests as its concurrency, at that concurrency: a level's batch "
                                                 "sizes are warm before they count.")
    request_timeout_s: float | None = Field(
        None, gt=0, description="Seconds one request may take (unset: from each level's load and the rate the "
                                "config just showed, and the SLO; see autotuner/core/timeouts.py).")
    seed: int = Field(0, description="Seed of the prompts; the warm-up and each load level draw their own "
                                     "prompts from it, the same in every trial, never one sent before.")
    shared_prefix_len: int = Field(
        0, ge=0, description="Tokens at the start of every prompt shared with others of its prefix group: "
                             "prefix reuse on purpose, the same for every config (0: none).")
    prefix_groups: int = Field(1, ge=1, description="Distinct shared prefixes (e.g. system prompts); each request "
                                                    "draws one.")
    sampling: SamplingConfig = Field(SamplingConfig(), description="Sampling parameters sent with every request.")
    tokenize: bool = Field(True, description="Make prompts of words that are one token each on the served model "
                                             "(asked of its tokenize endpoint), so lengths are exact in its tokens.")
    dataset: DatasetConfig | None = Field(None, description="Prompts from a dataset file instead of synthetic ones.")
    trace: TraceConfig | None = Field(None, description="Requests (lengths, shared blocks, times) from a trace file.")
    sessions: SessionsConfig | None = Field(
        None, description="Multi-turn sessions (endpoint chat): num_prompts sessions a level, input_len and "
                          "output_len per turn, or a ShareGPT dataset's conversations.")

    @model_validator(mode="after")
    def _consistent(self) -> WorkloadConfig:
        if self.dataset and self.trace:
            raise ValueError("give a dataset or a trace, not both")
        if self.sessions and self.endpoint != "chat":
            raise ValueError("sessions send the history as chat messages: set endpoint: chat")
        if self.sessions and self.trace:
            raise ValueError("a trace's sessions are in its hash_ids already: sessions take generated turns or a "
                             "ShareGPT dataset")
        if (self.dataset or self.trace) and (self.shared_prefix_len or self.prefix_groups > 1):
            raise ValueError("shared_prefix_len and prefix_groups shape synthetic prompts: a dataset or trace "
                             "brings its own")
        fixed = self.input_lengths.longest if self.input_lengths.kind == "fixed" else None
        if self.shared_prefix_len and fixed is not None and self.shared_prefix_len >= fixed:
            raise ValueError(f"shared_prefix_len ({self.shared_prefix_len}) must be below input_len ({fixed}): "
                             "each prompt needs tokens of its own")
        return self

    @property
    def input_lengths(self) -> Lengths:
        return _lengths(self.input_len)

    @property
    def output_lengths(self) -> Lengths:
        return _lengths(self.output_len)

    @property
    def sampling_params(self) -> Sampling:
        return Sampling(self.sampling.temperature, self.sampling.top_p, self.sampling.ignore_eos)

    @property
    def kind(self) -> str:
        return "sessions" if self.sessions else "dataset" if self.dataset else "trace" if self.trace else "synthetic"

    def describe(self) -> str:
        """One line: where the requests come from and how they are sent."""
        s = self.sampling
        how = (f"{self.endpoint}, temperature {s.temperature:g}" + (f", top_p {s.top_p:g}" if s.top_p else "")
               + (", exact output lengths (ignore_eos)" if s.ignore_eos else ", the model may stop early"))
        if self.trace:
            t = self.trace
            window = ((f", from {t.start_s:g} s" if t.start_s else "")
                      + (f", {t.duration_s:g} s of it" if t.duration_s else ""))
            return f"trace {t.path} ({t.format}, {t.block_size}-token blocks{window}); {how}"
        if self.sessions:
            turns = self.sessions.turns
            what = (f"the conversations of {self.dataset.path}" if self.dataset
                    else f"{turns if isinstance(turns, int) else turns.lengths().describe()} turns of "
                         f"{self.input_lengths.describe()} tokens, answers of {self.output_lengths.describe()}")
            return (f"sessions, {self.prompts} a level: {what}, {self.sessions.think_time_s:g} s think time, "
                    f"each turn with the history; {how}")
        if self.dataset:
            return f"dataset {self.dataset.path} ({self.dataset.format}), {self.prompts} requests a level; {how}"
        prefix = (f", a shared prefix of {self.shared_prefix_len} tokens in {self.prefix_groups} group(s)"
                  if self.shared_prefix_len else "")
        return (f"synthetic, {self.prompts} requests a level, prompts of {self.input_lengths.describe()} tokens, "
                f"outputs of {self.output_lengths.describe()} tokens{prefix}; {how}")

    @property
    def prompts(self) -> int:
        """Requests one level sends (a trace's: see `count`)."""
        return self.num_prompts or DEFAULT_PROMPTS

    def count(self, base: Path) -> int:
        """Requests one level sends: num_prompts, or a trace window's requests when num_prompts is not set."""
        if self.trace and self.num_prompts is None:
            return len(self.read_trace(base).requests)
        return self.prompts

    def read_trace(self, base: Path) -> Trace:
        assert self.trace is not None
        t = self.trace
        limit = self.num_prompts
        path = (base / t.path).resolve()
        return _read_trace(path, _version(path), t.block_size, t.start_s, t.duration_s, limit)

    def read_dataset(self, base: Path, levels: int) -> Dataset:
        assert self.dataset is not None
        # the warm-up's and every level's own prompts (twice: a level may be measured again), no more
        path = (base / self.dataset.path).resolve()
        return _read_dataset(path, _version(path), self.dataset.format,
                             self.warmup_requests + 2 * levels * self.prompts)

    def source(self, base: Path, levels: int) -> Source:
        """The workload's requests (`base`: the experiment file's folder; `levels`: the most a trial measures)."""
        if self.trace:
            return TraceSource(self.read_trace(base))
        if self.sessions:
            turns = self.sessions.turns
            data = None
            if self.dataset:
                data = DatasetSource(self.read_dataset(base, levels), default_output=self.output_lengths.longest or 64,
                                     warmup=self.warmup_requests, max_output=self.dataset.max_output_len)
            return SessionSource(Lengths.fixed(turns) if isinstance(turns, int) else turns.lengths(),
                                 self.input_lengths, self.output_lengths, self.sessions.think_time_s, self.seed,
                                 data, self.sessions.max_turns)
        if self.dataset:
            return DatasetSource(self.read_dataset(base, levels), default_output=self.output_lengths.longest or 64,
                                 warmup=self.warmup_requests, max_output=self.dataset.max_output_len)
        return SyntheticSource(self.input_lengths, self.output_lengths, self.shared_prefix_len, self.prefix_groups,
                               self.seed)

    def check_file(self, base: Path, levels: int) -> None:
        """Read the workload file now, so a bad one is a ConfigError before anything starts."""
        try:
            self.source(base, levels)
        except WorkloadFileError as e:
            field = "workload.trace.path" if self.trace else "workload.dataset.path"
            hint = ("; scripts/setup.sh writes the sample files" if "workloads/" in str(e.path) and e.line is None
                    else "")
            raise ConfigError(f"{e} (from {field}){hint}") from None
        except ValueError as e:  # a rule between the workload's own fields
            raise ConfigError(f"field 'workload': {e}") from None


def _version(path: Path) -> int:
    """The file's modification time: a file changed since it was read is read again."""
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0  # missing or unreadable: the reader names the error


@functools.lru_cache(maxsize=4)
def _read_trace(path: Path, version: int, block_size: int, start_s: float, duration_s: float | None,
                limit: int | None) -> Trace:
    return read_trace(path, block_size=block_size, start_s=start_s, duration_s=duration_s, limit=limit)


@functools.lru_cache(maxsize=4)
def _read_dataset(path: Path, version: int, fmt: str, limit: int) -> Dataset:
    return read_dataset(path, fmt, limit=limit)  # type: ignore[arg-type]
