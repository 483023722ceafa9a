"""The engine's own view of a measurement: its Prometheus `/metrics`, sampled while the load runs.

Three parts, kept apart:

- `parse_prometheus(text)` turns the text exposition format into `{name: value}` (pure). Series that
  differ only by labels are added up (vLLM labels every series with the model and engine index), and
  histogram/summary series (`_bucket`, `_sum`, `_count`, quantiles) are left out: a sampler wants
  gauges and counters.
- `ENGINE_METRICS` maps each engine's names onto one vocabulary (`kv_cache_usage` as a 0..1 ratio,
  `requests_running`, `requests_waiting`, `preemptions_total`, `generation_tokens_total`, ...), so the
  report reasons about every engine alike. Names come from the engines' sources: llama.cpp
  tools/server/server-task.cpp (`llamacpp:` prefix; it reports no KV-cache usage and counts generated
  tokens only when a request finishes), vLLM v1 metrics (`vllm:`), SGLang (`sglang:`).
- `ServerMetricsSampler` polls `/metrics` every `interval_s` on the event loop of the measurement
  (one small GET; the load generator's requests are unaffected) and keeps `Sample`s; `summarize`
  (pure) turns the samples of one load level into `server_*` metrics: mean and max of each gauge, the
  increase of each counter.

A server without `/metrics`, or one that answers garbage, yields no samples, never an error: the
measurement is what matters, this is commentary on it.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import httpx

DEFAULT_INTERVAL_S = 0.5

# canonical name -> (source name, kind, scale to canonical units)
_Source = tuple[str, str, float]
ENGINE_METRICS: dict[str, dict[str, _Source]] = {
    "llamacpp": {
        "requests_running": ("llamacpp:requests_processing", "gauge", 1.0),
        "requests_waiting": ("llamacpp:requests_deferred", "gauge", 1.0),
        "busy_slots_per_decode": ("llamacpp:n_busy_slots_per_decode", "gauge", 1.0),
        "generation_tokens_total": ("llamacpp:tokens_predicted_total", "counter", 1.0),
        "prompt_tokens_total": ("llamacpp:prompt_tokens_total", "counter", 1.0),
        "decode_calls_total": ("llamacpp:n_decode_total", "counter", 1.0),
    },
    "vllm": {
        "kv_cache_usage": ("vllm:kv_cache_usage_perc", "gauge", 1.0),  # a 0..1 ratio despite the name
        "requests_running": ("vllm:num_requests_running", "gauge", 1.0),
        "requests_waiting": ("vllm:num_requests_waiting", "gauge", 1.0),
        "preemptions_total": ("vllm:num_preemptions_total", "counter", 1.0),
        "generation_tokens_total": ("vllm:generation_tokens_total", "counter", 1.0),
        "prompt_tokens_total": ("vllm:prompt_tokens_total", "counter", 1.0),
    },
    "sglang": {
        "kv_cache_usage": ("sglang:token_usage", "gauge", 1.0),
        "requests_running": ("sglang:num_running_reqs", "gauge", 1.0),
        "requests_waiting": ("sglang:num_queue_req", "gauge", 1.0),
        "generation_tokens_total": ("sglang:generation_tokens_total", "counter", 1.0),
        "prompt_tokens_total": ("sglang:prompt_tokens_total", "counter", 1.0),
    },
}

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


def canonical(engine: str, raw: Mapping[str, float]) -> dict[str, float]:
    """One engine's parsed metrics -> the canonical names (those the engine exposes)."""
    out = {}
    for name, (source, _kind, scale) in ENGINE_METRICS.get(engine, {}).items():
        if source in raw:
            out[name] = raw[source] * scale
    return out


def kinds(engine: str) -> dict[str, str]:
    return {name: kind for name, (_s, kind, _x) in ENGINE_METRICS.get(engine, {}).items()}


@dataclass(frozen=True)
class Sample:
    t_s: float  # seconds since the sampler started
    values: dict[str, float]  # canonical names


def summarize(samples: Sequence[Sample], engine: str) -> dict[str, float]:
    """The samples of one load level -> `server_<name>_mean` / `_max` for gauges, `server_<name>` (the
    increase over the level) for counters, plus `server_samples` (0 when a level was too short to sample)."""
    if not samples:
        return {"server_samples": 0.0}
    out: dict[str, float] = {"server_samples": float(len(samples))}
    for name, kind in kinds(engine).items():
        values = [s.values[name] for s in samples if name in s.values]
        if not values:
            continue
        if kind == "counter":
            out[f"server_{name.removesuffix('_total')}"] = max(values[-1] - values[0], 0.0)
        else:
            out[f"server_{name}_mean"] = math.fsum(values) / len(values)
            out[f"server_{name}_max"] = max(values)
    return out


@dataclass
class ServerMetricsSampler:
    """Polls `<base_url>/metrics` every `interval_s` while `running`; `mark()` splits samples by level.

    Use inside the measurement's event loop:

        sampler = ServerMetricsSampler(base_url, "vllm"); sampler.start()
        ... sampler.mark() before each level ...
        await sampler.stop()
    """

    base_url: str
    engine: str
    interval_s: float = DEFAULT_INTERVAL_S
    samples: list[Sample] = field(default_factory=list)
    marks: list[int] = field(default_factory=list)
    polls: int = 0
    failures: int = 0
    poll_cpu_s: float = 0.0  # CPU time this process spent polling and parsing
    wall_start_ms: int = 0  # wall clock (ms since the epoch) at start(), for metric timestamps
    _task: asyncio.Task | None = None
    _t0: float = 0.0

    def start(self) -> None:
        self._t0 = time.perf_counter()
        self.wall_start_ms = int(time.time() * 1000)
        self._task = asyncio.get_running_loop().create_task(self._run())

    def mark(self) -> None:
        """The next samples belong to a new load level."""
        self.marks.append(len(self.samples))

    def level_samples(self, index: int) -> list[Sample]:
        if index >= len(self.marks):
            return []
        end = self.marks[index + 1] if index + 1 < len(self.marks) else len(self.samples)
        return self.samples[self.marks[index]:end]

    async def stop(self) -> None:
        if self._task is None:
            return
        self._task.cancel()
        try:
            await self._task
        except (asyncio.CancelledError, Exception):
            pass
        self._task = None

    async def sample_once(self, client: httpx.AsyncClient) -> Sample | None:
        self.polls += 1
        c0 = time.process_time()
        try:
            response = await client.get(self.base_url.rstrip("/") + "/metrics")
            if response.status_code != 200:
                self.failures += 1
                return None
            values = canonical(self.engine, parse_prometheus(response.text))
        except (httpx.HTTPError, UnicodeDecodeError):
            self.failures += 1
            return None
        finally:
            self.poll_cpu_s += time.process_time() - c0
        if not values:
            return None
        sample = Sample(time.perf_counter() - self._t0, values)
        self.samples.append(sample)
        return sample

    async def _run(self) -> None:
        async with httpx.AsyncClient(timeout=max(self.interval_s * 4, 2.0), trust_env=False) as client:
            while True:
                started = time.perf_counter()
                await self.sample_once(client)
                await asyncio.sleep(max(self.interval_s - (time.perf_counter() - started), 0.05))
