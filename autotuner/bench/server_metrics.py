"""The engine's own view of a measurement: its Prometheus `/metrics`, sampled while the load runs.

Three parts, kept apart:

- `parse_prometheus(text)` turns the text exposition format into `{name: value}` (pure). Series that
  differ only by labels are added up (vLLM labels every series with the model and engine index), and
  histogram/summary series (`_bucket`, `_sum`, `_count`, quantiles) are left out: a sampler wants
  gauges and counters.
- each engine adapter (`server_metrics`, handed to the sampler: this module knows no engine) maps its
  names onto one vocabulary (`kv_cache_usage` as a 0..1 ratio, `requests_running`, `requests_waiting`,
  `preemptions_total`, `generation_tokens_total`, ...), so the report reasons about every engine alike.
  Names come from the engines' sources: llama.cpp tools/server/server-task.cpp (`llamacpp:` prefix; it
  reports no KV-cache usage and counts generated tokens only when a request finishes), vLLM v1 metrics
  (`vllm:`), SGLang (`sglang:`).
- `ServerMetricsSampler` polls `/metrics` every `interval_s` on a thread of its own, off the
  measurement's event loop, and keeps `Sample`s; `server_summary` (pure) turns the samples of one load level
  into `server_*` metrics: mean and max of each gauge, the increase of each counter over the level.

A server without `/metrics`, or one that answers garbage, yields no samples, never an error: the
measurement is what matters, this is commentary on it.
"""

from __future__ import annotations

import asyncio
import functools
import http.client
import math
import re
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

DEFAULT_INTERVAL_S = 0.5

# An engine's /metrics series by canonical name: (its own name, "gauge" or "counter", scale). Each engine
# adapter publishes its own (`Engine.server_metrics`); whoever builds a sampler hands them over.
Series = Mapping[str, tuple[str, str, float]]


_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+\d+)?\s*$")
_SKIPPED_SUFFIXES = ("_bucket", "_sum", "_count", "_created")


def parse_prometheus(text: str) -> dict[str, float]:
    """Prometheus text format -> {metric name: value}, label sets added up; histograms left out."""
    kinds: dict[str, str] = {}
    out: dict[str, float] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split()
            if len(parts) >= 4 and parts[1] == "TYPE":
                kinds[parts[2]] = parts[3]
            continue
        m = _LINE.match(line)
        if not m:
            continue
        name, labels, value_text = m.group(1), m.group(2) or "", m.group(3)
        base = next((name[: -len(s)] for s in _SKIPPED_SUFFIXES if name.endswith(s)), None)
        if base is not None and kinds.get(base) in ("histogram", "summary", "gaugehistogram"):
            continue
        if kinds.get(name) == "summary" or 'quantile="' in labels:
            continue
        try:
            value = float(value_text)
        except ValueError:
            continue
        if math.isnan(value):
            continue
        out[name] = out.get(name, 0.0) + value
    return out


def canonical(series: Series, raw: Mapping[str, float]) -> dict[str, float]:
    """One engine's parsed metrics -> the canonical names (those the engine exposes)."""
    out = {}
    for name, (source, _kind, scale) in series.items():
        if source in raw:
            out[name] = raw[source] * scale
    return out


@functools.cache
def _selector(sources: frozenset[str]) -> re.Pattern[bytes]:
    names = sorted(sources, key=len, reverse=True)
    alternatives = b"|".join(re.escape(n.encode()) for n in names) or b"(?!)"
    return re.compile(rb"^(" + alternatives + rb")(?:\{[^\n]*\})?[ \t]+(\S+)", re.M)


def read_canonical(series: Series, text: bytes) -> dict[str, float]:
    """`canonical(series, parse_prometheus(text))`, cheaply: one C-level regex scan picks the engine's
    series out of a page of hundreds of lines (a poll holds the GIL, so it must be short)."""
    raw: dict[str, float] = {}
    for m in _selector(frozenset(source for source, _k, _s in series.values())).finditer(text):
        try:
            value = float(m.group(2))
        except ValueError:
            continue
        if not math.isnan(value):
            name = m.group(1).decode()
            raw[name] = raw.get(name, 0.0) + value
    return canonical(series, raw)


def kinds(series: Series) -> dict[str, str]:
    return {name: kind for name, (_s, kind, _x) in series.items()}


@dataclass(frozen=True)
class Sample:
    t_s: float  # seconds since the sampler started
    values: dict[str, float]  # canonical names
    boundary: bool = False  # taken at a level's start or end (counters only: see ServerMetricsSampler)


def server_summary(samples: Sequence[Sample], series: Series) -> dict[str, float]:
    """The samples of one load level -> `server_<name>_mean` / `_max` for gauges (samples taken under
    load only, not at the level's boundaries), `server_<name>` (the increase over the level) for counters,
    `server_prefix_cache_hit_rate` (hit / queried prompt tokens, where the engine counts both), plus
    `server_samples` (samples under load; 0 when a level was too short to sample)."""
    inside = [s for s in samples if not s.boundary]
    out: dict[str, float] = {"server_samples": float(len(inside))}
    for name, kind in kinds(series).items():
        if kind == "counter":
            values = [s.values[name] for s in samples if name in s.values]
            if len(values) >= 2:
                out[f"server_{name.removesuffix('_total')}"] = max(values[-1] - values[0], 0.0)
            continue
        values = [s.values[name] for s in inside if name in s.values]
        if values:
            out[f"server_{name}_mean"] = math.fsum(values) / len(values)
            out[f"server_{name}_max"] = max(values)
    queries = out.get("server_prefix_cache_queries")
    if queries:
        out["server_prefix_cache_hit_rate"] = out.get("server_prefix_cache_hits", 0.0) / queries
    return out


class ServerMetricsSampler:
    """Polls `<base_url>/metrics` every `interval_s` on its own thread; `mark()` starts a load level.

        sampler = ServerMetricsSampler(base_url, engine.server_metrics); sampler.start()
        ... sampler.mark() before each level, sampler.level_samples(i) after it ...
        await sampler.stop()   (or sampler.close() from synchronous code)

    Why a thread, with its own blocking HTTP client: on the measurement's event loop every poll and parse
    held up the loop while the client's socket reads waited, stamping chunk times late. Here the loop
    thread only ever waits for the GIL, and the parser holds it briefly.

    Counters must cover a whole level, however short: `mark()` takes a sample at once (the level's start),
    and `level_samples(i)` of the level under way takes one more (its end). Those boundary samples count
    for counters only (`Sample.boundary`): the server is idle at a boundary, which says nothing about
    its gauges under load. A boundary sample waits for the poller at most `boundary_timeout_s`.
    """

    def __init__(self, base_url: str, series: Series, interval_s: float = DEFAULT_INTERVAL_S):
        self.base_url = base_url
        self.series = series
        self.interval_s = interval_s
        self.samples: list[Sample] = []
        self.marks: list[int] = []
        self.polls = 0
        self.failures = 0
        self.poll_cpu_s = 0.0  # CPU time the polling thread spent polling and parsing
        self.wall_start_ms = 0  # wall clock (ms since the epoch) at start(), for metric timestamps
        self.boundary_timeout_s = max(interval_s * 4, 2.0)
        self._t0 = 0.0
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._boundary_waiters: list[threading.Event] = []

    def start(self) -> None:
        self._t0 = time.perf_counter()
        self.wall_start_ms = int(time.time() * 1000)
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="autotuner-server-metrics", daemon=True)
        self._thread.start()

    def mark(self) -> None:
        """The next samples belong to a new load level (whose first sample is taken now)."""
        with self._lock:
            self.marks.append(len(self.samples))
        self._boundary()

    def forget_level(self) -> None:
        """Drop the level under way and its samples (it is measured again, from a new `mark()`)."""
        self._boundary()  # a poll still under way lands now, to be dropped too
        with self._lock:
            del self.samples[self.marks.pop():]

    def level_samples(self, index: int) -> list[Sample]:
        """The samples of level `index`, from its start up to the next level's (or to now)."""
        if index >= len(self.marks):
            return []
        if index == len(self.marks) - 1:
            self._boundary()  # the level under way ends now, as far as its counters go
        with self._lock:
            end = self.marks[index + 1] if index + 1 < len(self.marks) else len(self.samples)
            return self.samples[self.marks[index]:end]

    async def stop(self) -> None:
        """`close()` without blocking the caller's event loop."""
        await asyncio.to_thread(self.close)

    def close(self) -> None:
        """Stop polling and wait for the thread (safe twice)."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stopping.set()
        self._wake.set()
        thread.join(self.boundary_timeout_s + 1.0)

    def sample_once(self, connection: MetricsConnection, boundary: bool = False) -> Sample | None:
        """One poll (on the calling thread): the sample, or None when the server gave none."""
        self.polls += 1
        c0 = time.thread_time()
        try:
            body = connection.get()
            values = read_canonical(self.series, body) if body is not None else {}
            if body is None:
                self.failures += 1
        finally:
            self.poll_cpu_s += time.thread_time() - c0
        if not values:
            return None
        sample = Sample(time.perf_counter() - self._t0, values, boundary)
        with self._lock:
            self.samples.append(sample)
        return sample

    def _boundary(self) -> None:
        """Have the polling thread take a sample now, and wait for it (not at all when not running)."""
        if self._thread is None:
            return
        done = threading.Event()
        with self._lock:
            self._boundary_waiters.append(done)
        self._wake.set()
        done.wait(self.boundary_timeout_s)

    def _run(self) -> None:
        connection = MetricsConnection(self.base_url, self.boundary_timeout_s)
        try:
            while not self._stopping.is_set():
                with self._lock:
                    waiters, self._boundary_waiters = self._boundary_waiters, []
                started = time.perf_counter()
                self.sample_once(connection, boundary=bool(waiters))
                for done in waiters:
                    done.set()
                if self._boundary_waiters:
                    continue  # asked for another boundary sample meanwhile
                self._wake.wait(max(self.interval_s - (time.perf_counter() - started), 0.0))
                self._wake.clear()
        finally:
            connection.close()


class MetricsConnection:
    """GET <base_url>/metrics over one kept-alive connection (the standard library's http.client: a
    poll costs a fraction of what a full HTTP client's does; no proxies from the environment)."""

    def __init__(self, base_url: str, timeout_s: float):
        url = urllib.parse.urlsplit(base_url)
        self._path = url.path.rstrip("/") + "/metrics"
        cls = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
        self._conn = cls(url.hostname or "127.0.0.1", url.port, timeout=timeout_s)

    def get(self) -> bytes | None:
        """The page, or None (no answer, not 200); a broken connection is opened again next time."""
        try:
            self._conn.request("GET", self._path)
            response = self._conn.getresponse()
            body = response.read()
            return body if response.status == 200 else None
        except (OSError, http.client.HTTPException):
            self._conn.close()
            return None

    def close(self) -> None:
        self._conn.close()
