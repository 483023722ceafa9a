"""Metric math: the RequestRecords of one load level -> a `LevelResult` (latency percentiles, throughput).

Definitions follow vLLM's `vllm bench serve` (vllm/benchmarks/serve.py, calculate_metrics), so numbers
can be compared with what users already know:

- Only completed requests (no error) enter latencies and token totals; failed ones are counted.
- TTFT  = first content chunk - request start.
- E2E   = end of the stream ([DONE]) - request start. (vLLM stops at the last chunk with choices; the
  difference is the usage chunk, in the same network read as the last token with the servers we know.)
- TPOT  = (E2E - TTFT) / (output_tokens - 1), for requests with more than one output token.
- ITL   = gaps between consecutive content chunks, pooled over all completed requests. A chunk may carry
  several tokens (and chunks that arrived in one network read share a time), so ITL and TPOT differ.
- Throughputs divide by the level's wall duration (first request sent -> last one finished).
- Steady-state output throughput (`output_tok_per_s_steady`): the output tokens that arrived between the
  first request sent and the last one sent, over that window. The drain (the last requests finishing
  with nothing sent after them, fewer in flight than the level asks) is left out; warm-up requests are
  never in a level. A chunk's tokens are the request's output tokens shared evenly over its chunks.
  NaN when the window is under a quarter of the level (all requests sent at once: no steady state).
- The client's own load (`client_cpu`, `client_lag_ms_*`): the CPU the load generator's busiest process
  used over the measured phase (1.0 = one core), and how late its event loop woke from a short sleep.
  A loop that is late delays every timestamp it takes; a process at a full core, or a loop late past
  CLIENT_LAG_MS at p99, is the client's limit (`client_limited`).
- usage_missing_rate = share of completed requests whose stream carried no `usage`: their output tokens
  are counted content chunks (a chunk may carry several tokens), so token figures may be too low.
- Goodput (`goodput`) = completed requests that meet every per-request SLO / duration, as
  `vllm bench serve --goodput` counts it (see `goodput` for how SLO names map to per-request checks).
- Percentiles interpolate linearly between order statistics, like numpy.percentile's default.

A statistic without samples (e.g. TTFT when every request failed) is NaN, never 0: a 0 ms latency
would look like the best configuration ever. In `to_json` NaN becomes None (JSON has no NaN).

This module is pure: no I/O, no clock, no globals; the same records always give the same result.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from typing import Any

from autotuner.bench.client import RequestRecord

MAX_ERROR_SAMPLES = 5  # distinct error messages a LevelResult keeps (with their counts)
# On an open schedule (a rate or a trace, no concurrency limit) a request leaves late only when the
# client's event loop falls behind: past this p99 lateness the level measured the load generator. One
# core keeps a 50 req/s replay within 1.3 ms at p99 (benchmarks/traffic_loadgen.py): 200 ms is a client
# far past its capacity, not a busy machine. The same bound holds for the loop's own wake-ups at any
# level: a loop 200 ms late (p99) stamps every token that late, whether its own work or other
# processes taking its core (the quickstart's loop, beside a 2-thread engine on 2 cores: ~4 ms).
CLIENT_LAG_MS = 200.0
CLIENT_LIMITED = "client_limited"
# A load generator loop busy this share of a core or more was saturated: its loop, not the server,
# set when requests left and when chunks were read (one event loop uses at most one core).
CLIENT_CPU_LIMIT = 0.9
STEADY_MIN_SHARE = 0.25  # a steady window shorter than this share of the level is no steady state
_NS_PER_MS = 1e6
_STAT_NAMES = ("mean", "p50", "p90", "p99", "max")
_LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """The p-th percentile (0..100) of ascending values, linearly interpolated; NaN when empty."""
    n = len(sorted_values)
    if n == 0:
        return math.nan
    rank = (n - 1) * p / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, n - 1)
    frac = rank - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


@dataclass(frozen=True)
class LatencyStats:
    """Summary of one latency distribution, in milliseconds (NaN when count == 0)."""

    count: int = 0
    mean: float = math.nan
    p50: float = math.nan
    p90: float = math.nan
    p99: float = math.nan
    max: float = math.nan

    @classmethod
    def of(cls, values_ms: Iterable[float]) -> LatencyStats:
        values = sorted(values_ms)
        if not values:
            return cls()
        return cls(count=len(values), mean=math.fsum(values) / len(values), p50=percentile(values, 50),
                   p90=percentile(values, 90), p99=percentile(values, 99), max=values[-1])


def request_latencies(rec: RequestRecord) -> tuple[float, float | None, float | None]:
    """(E2E, TTFT, TPOT) of one completed request in ms; TTFT None without content, TPOT None with at
    most one output token (see the module docstring)."""
    e2e_ms = (rec.end_ns - rec.start_ns) / _NS_PER_MS
    if rec.first_token_ns is None:
        return e2e_ms, None, None
    ttft_ms = (rec.first_token_ns - rec.start_ns) / _NS_PER_MS
    tpot_ms = (e2e_ms - ttft_ms) / (rec.output_tokens - 1) if rec.output_tokens > 1 else None
    return e2e_ms, ttft_ms, tpot_ms


@dataclass(frozen=True)
class LevelResult:
    """What one load level measured. `max_concurrency` / `request_rate` say which level it was
    (None: unlimited / all requests at once)."""

    max_concurrency: int | None
    request_rate: float | None
    duration_s: float
    completed: int
    failed: int
    input_tokens: int
    output_tokens: int
    request_per_s: float
    output_tok_per_s: float
    total_tok_per_s: float
    ttft_ms: LatencyStats
    tpot_ms: LatencyStats
    itl_ms: LatencyStats
    e2e_ms: LatencyStats
    # message -> count, for the first MAX_ERROR_SAMPLES distinct messages
    error_samples: dict[str, int] = field(default_factory=dict)
    usage_missing: int = 0  # completed requests whose token counts were not reported by the server
    # A schedule's levels (a rate, a trace): the rate it offered, and how late requests left the client
    # (waiting for a concurrency slot, or an event loop that fell behind): its queue time.
    offered_rate: float | None = None
    queue_ms: LatencyStats = field(default_factory=lambda: LatencyStats())
    output_tok_per_s_steady: float = math.nan  # see the module docstring
    steady_s: float = math.nan  # the steady window's length
    client_cpu: float = math.nan  # the busiest load-generator process's CPU over the level (1.0 = one core)
    client_lag_ms: LatencyStats = field(default_factory=lambda: LatencyStats())  # its event loop's lateness

    @property
    def error_rate(self) -> float:
        total = self.completed + self.failed
        return self.failed / total if total else math.nan

    @property
    def usage_missing_rate(self) -> float:
        return self.usage_missing / self.completed if self.completed else math.nan

    @classmethod
    def from_records(cls, records: Sequence[RequestRecord], duration_s: float, *,
                     max_concurrency: int | None = None, request_rate: float | None = None,
                     offered_rate: float | None = None, client_cpu: float = math.nan,
                     client_lag_ms: Iterable[float] = ()) -> LevelResult:
        """Compute the level's metrics from its records and wall duration (see the module docstring)."""
        ttfts: list[float] = []
        tpots: list[float] = []
        itls: list[float] = []
        e2es: list[float] = []
        errors: dict[str, int] = {}
        completed = failed = input_tokens = output_tokens = usage_missing = 0
        for rec in records:
            if rec.error is not None:
                failed += 1
                if rec.error in errors or len(errors) < MAX_ERROR_SAMPLES:
                    errors[rec.error] = errors.get(rec.error, 0) + 1
                continue
            completed += 1
            input_tokens += rec.prompt_tokens
            output_tokens += rec.output_tokens
            usage_missing += not rec.usage_reported
            e2e_ms, ttft_ms, tpot_ms = request_latencies(rec)
            e2es.append(e2e_ms)
            if ttft_ms is not None:
                ttfts.append(ttft_ms)
            if tpot_ms is not None:
                tpots.append(tpot_ms)
            itls.extend((b - a) / _NS_PER_MS for a, b in pairwise(rec.chunk_times_ns))
        rate = (lambda x: x / duration_s) if duration_s > 0 else (lambda x: math.nan)
        queued = [(r.start_ns - r.due_ns) / _NS_PER_MS for r in records if r.due_ns is not None]
        steady_tokens, steady_s = steady_window(records)
        return cls(
            max_concurrency=max_concurrency,
            request_rate=request_rate,
            duration_s=duration_s,
            completed=completed,
            failed=failed,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            request_per_s=rate(completed),
            output_tok_per_s=rate(output_tokens),
            total_tok_per_s=rate(input_tokens + output_tokens),
            ttft_ms=LatencyStats.of(ttfts),
            tpot_ms=LatencyStats.of(tpots),
            itl_ms=LatencyStats.of(itls),
            e2e_ms=LatencyStats.of(e2es),
            error_samples=errors,
            usage_missing=usage_missing,
            offered_rate=offered_rate,
            queue_ms=LatencyStats.of(queued),
            output_tok_per_s_steady=steady_tokens / steady_s if steady_s >= STEADY_MIN_SHARE * duration_s > 0
            else math.nan,
            steady_s=steady_s,
            client_cpu=client_cpu,
            client_lag_ms=LatencyStats.of(client_lag_ms),
        )

    def metrics(self) -> dict[str, float]:
        """Flat metric names with units, e.g. {"output_tok_per_s": ..., "ttft_ms_p99": ...}."""
        out: dict[str, float] = {
            "output_tok_per_s": self.output_tok_per_s,
            "total_tok_per_s": self.total_tok_per_s,
            "request_per_s": self.request_per_s,
            "output_tok_per_s_steady": self.output_tok_per_s_steady,
        }
        for name in _LATENCIES:
            stats: LatencyStats = getattr(self, name)
            for stat in _STAT_NAMES:
                out[f"{name}_{stat}"] = getattr(stats, stat)
        out.update(
            error_rate=self.error_rate,
            usage_missing_rate=self.usage_missing_rate,
            completed=float(self.completed),
            failed=float(self.failed),
            duration_s=self.duration_s,
            input_tokens=float(self.input_tokens),
            output_tokens=float(self.output_tokens),
        )
        if self.offered_rate is not None:
            out["offered_rate"] = self.offered_rate
        if self.queue_ms.count:
            out.update(queue_ms_p50=self.queue_ms.p50, queue_ms_p99=self.queue_ms.p99, queue_ms_max=self.queue_ms.max)
        if self.client_lag_ms.count:
            out.update(client_cpu=self.client_cpu, client_lag_ms_p99=self.client_lag_ms.p99,
                       client_lag_ms_max=self.client_lag_ms.max)
        if self.queue_ms.count or self.client_lag_ms.count:
            out[CLIENT_LIMITED] = float(self.client_limited)
        return out

    @property
    def client_limited(self) -> bool:
        """The client, not the server, set the pace: a load-generator event loop used a full core (see
        CLIENT_CPU_LIMIT), woke late, or let requests of an open schedule leave late (see CLIENT_LAG_MS).
        Under a concurrency limit, waiting for a free slot is the server's doing and counts as queue time."""
        return self.client_cpu >= CLIENT_CPU_LIMIT or self.late_loop or self.late_schedule

    @property
    def late_loop(self) -> bool:
        return self.client_lag_ms.count > 0 and self.client_lag_ms.p99 > CLIENT_LAG_MS

    @property
    def late_schedule(self) -> bool:
        return self.max_concurrency is None and self.queue_ms.count > 0 and self.queue_ms.p99 > CLIENT_LAG_MS

    def client_note(self) -> str | None:
        """Why the level does not count when the client limited it, else None."""
        return client_limit_note(self.metrics())

    def to_json(self) -> dict[str, Any]:
        """A strict-JSON-serialisable dict (NaN and inf -> None); `from_json` reverses it."""
        return _nan_to_none(asdict(self))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LevelResult:
        data = dict(data)
        for name in (*_LATENCIES, "queue_ms", "client_lag_ms"):
            if name not in data:  # a result stored before the field existed
                continue
            raw = data[name]
            stats = {k: (math.nan if raw[k] is None else float(raw[k])) for k in _STAT_NAMES}
            data[name] = LatencyStats(count=int(raw["count"]), **stats)
        for name in ("duration_s", "request_per_s", "output_tok_per_s", "total_tok_per_s", "output_tok_per_s_steady",
                     "steady_s", "client_cpu"):
            if name in data and data[name] is None:
                data[name] = math.nan
        return cls(**data)


def client_limit_note(metrics: Mapping[str, float]) -> str | None:
    """Why a level's metrics do not count when the load generator limited it (LevelResult.client_limited)."""
    if not metrics.get(CLIENT_LIMITED):
        return None
    if metrics.get("client_cpu", 0.0) >= CLIENT_CPU_LIMIT:
        return (f"the load generator's event loop used {metrics['client_cpu']:.0%} of a core: it, not the server, "
                "limited the level (raise load.workers)")
    if metrics.get("client_lag_ms_p99", 0.0) > CLIENT_LAG_MS:
        return (f"the load generator's event loop woke {metrics['client_lag_ms_p99']:.0f} ms late (p99): it, not "
                "the server, limited the level (raise load.workers, or leave the client a core of its own)")
    return (f"the load generator sent requests {metrics.get('queue_ms_p99', math.nan):.0f} ms late (p99) on an open "
            "schedule: it, not the server, limited the level (raise load.workers)")


def usage_note(result: LevelResult) -> str | None:
    """A warning when some requests came without a `usage` chunk, else None."""
    if not result.usage_missing:
        return None
    return (f"{result.usage_missing} of {result.completed} requests came without usage: their token counts are "
            "counted chunks (a chunk may carry several tokens), so token throughput may read low")


def steady_window(records: Sequence[RequestRecord]) -> tuple[float, float]:
    """(output tokens that arrived, seconds) between the first request sent and the last one sent (see
    the module docstring); (0, 0) with fewer than two requests sent at different times."""
    if not records:
        return 0.0, 0.0
    begin, end = min(r.start_ns for r in records), max(r.start_ns for r in records)
    if end <= begin:
        return 0.0, 0.0
    tokens = 0.0
    for r in records:
        if r.ok and r.chunk_times_ns:
            inside = sum(begin <= t <= end for t in r.chunk_times_ns)
            tokens += r.output_tokens * inside / len(r.chunk_times_ns)
    return tokens, (end - begin) / 1e9


# SLO metric prefix -> the per-request latency it limits (index into request_latencies' tuple).
_PER_REQUEST_SLO = {"e2e_ms_": 0, "ttft_ms_": 1, "tpot_ms_": 2}


DROPPED_BEFORE = "dropped_before_remeasure"  # requests the server dropped in a level's first measurement


def dropped_only(records: Sequence[RequestRecord], max_error_rate: float) -> int:
    """How many requests were dropped (RequestRecord.dropped) when those alone, and no other failure, took
    the level over `max_error_rate`; else 0."""
    failed = [r for r in records if not r.ok]
    if not failed or len(failed) / len(records) <= max_error_rate or not all(r.dropped for r in failed):
        return 0
    return len(failed)


GOODPUT = "goodput_req_per_s"  # the level metric goodput() gives (it needs the SLO, so LevelResult lacks it)


def goodput(records: Sequence[RequestRecord], duration_s: float, slo: Mapping[str, float]) -> float:
    """Requests per second that met every SLO, as `vllm bench serve --goodput` counts them (its
    calculate_metrics): good completed requests / the level's duration.

    A level SLO limits a statistic (`ttft_ms_p99: 2000`); goodput applies its limit to each request:
    `ttft_ms_*` -> the request's TTFT, `tpot_ms_*` -> its TPOT (0 with one output token, as in vLLM),
    `e2e_ms_*` -> its end-to-end latency, whatever the statistic (mean, p50, p99, ...). Two limits on one
    latency (ttft_ms_p50 and ttft_ms_p99): the tighter applies. `itl_ms_*` and `error_rate` have no
    per-request meaning (vLLM's goodput takes ttft, tpot and e2el only) and are left out; a failed request
    is never good. Without per-request limits every completed request is good (goodput = request_per_s).
    """
    if not duration_s > 0:
        return math.nan
    limits: dict[int, float] = {}
    for name, limit in slo.items():
        for prefix, index in _PER_REQUEST_SLO.items():
            if name.startswith(prefix):
                limits[index] = min(limit, limits.get(index, math.inf))
    good = 0
    for rec in records:
        if rec.error is not None:
            continue
        latencies = request_latencies(rec)
        if rec.first_token_ns is not None and latencies[2] is None:
            latencies = (latencies[0], latencies[1], 0.0)  # one output token: no time per further token
        good += all((x := latencies[i]) is not None and x <= limit for i, limit in limits.items())
    return good / duration_s


def _nan_to_none(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None  # NaN: no samples; inf (only a request_rate): all at once, which None also means
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    return obj


def session_metrics(records: Sequence[RequestRecord]) -> dict[str, float]:
    """A level of multi-turn sessions beyond its requests: TTFT and prompt tokens by turn (turn n's
    prompt holds every earlier turn and answer), and how long whole sessions took, think time included
    (only sessions whose every turn completed: a failed turn ends its session)."""
    turns: dict[int, list[RequestRecord]] = {}
    sessions: dict[int, list[RequestRecord]] = {}
    for r in records:
        if r.turn is None or r.session is None:
            continue
        turns.setdefault(r.turn, []).append(r)
        sessions.setdefault(r.session, []).append(r)
    out: dict[str, float] = {}
    for k, recs in sorted(turns.items()):
        ok = [r for r in recs if r.ok]
        ttft = LatencyStats.of(t for r in ok if (t := request_latencies(r)[1]) is not None)
        out[f"ttft_ms_p50_turn{k}"], out[f"ttft_ms_mean_turn{k}"] = ttft.p50, ttft.mean
        if ok:
            out[f"prompt_tokens_mean_turn{k}"] = math.fsum(r.prompt_tokens for r in ok) / len(ok)
    whole = [s for s in sessions.values() if all(r.ok for r in s)]  # a failed turn ends its session
    durations = LatencyStats.of((max(r.end_ns for r in s) - min(r.start_ns for r in s)) / _NS_PER_MS for s in whole)
    if sessions:
        out.update(sessions=float(len(sessions)), sessions_completed=float(len(whole)),
                   session_ms_mean=durations.mean, session_ms_p50=durations.p50, session_ms_p99=durations.p99)
    return out
