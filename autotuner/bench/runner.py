"""Runs one load level: send a workload's requests at a concurrency limit and/or request rate, measure.

`run_level` (async) sends `warmup_requests` unmeasured requests, then all `workload.num_prompts`
requests (or as many as start within `duration_s`), and returns the level's `LevelResult` with the raw
`RequestRecord`s:

- max_concurrency=N: at most N requests in flight (N coroutines, each sending its next request as soon
  as the previous one ends: a closed loop, like `vllm bench serve --max-concurrency`).
- request_rate=R: requests arrive as a Poisson process of R requests/s (exponential gaps drawn from
  `seed`; the first request goes at once); inf or None sends them all at once. With both, arrivals
  wait for a free slot, as in vLLM.
- workers=K (`run_level_sync`, or `run_level` which hands off to it): K processes, each with its own
  event loop, share the requests round-robin, the concurrency (N split as evenly as possible) and the
  rate (R/K each: K independent Poisson processes of rate R/K add up to one of rate R). They start
  the measured phase together after their warm-ups; perf_counter_ns is CLOCK_MONOTONIC, one clock for
  every process on Linux, so their records merge as they are.

Each process watches itself over the measured phase (`_ClientWatch`): its event loop thread's CPU time and how late its
event loop wakes from a short sleep, so a level the load generator limited is marked (metrics.py).

One HTTP/1.1 `httpx.AsyncClient` (client.make_client) per process: no proxies from the environment,
as many connections as requests may be in flight. `format_level` prints a result the way `vllm bench
serve` does.

This module must never decide what a result means (objective.py), stop a sweep (sweep.py) or print.
"""

from __future__ import annotations

import asyncio
import json
import math
import multiprocessing
import queue
import time
from dataclasses import dataclass, replace
from time import perf_counter_ns
from typing import Any

import httpx

from autotuner.bench.client import RequestRecord, make_client, stream_request
from autotuner.bench.metrics import LatencyStats, LevelResult, usage_note
from autotuner.workloads import arrivals
from autotuner.workloads.plan import LevelPlan, body
from autotuner.workloads.sessions import SessionPlan
from autotuner.workloads.synthetic import ENDPOINT_PATHS, Workload, build_payloads, warmup_workload

WORKER_START_TIMEOUT_S = 120.0  # spawning, importing and warming up one worker process
LAG_PERIOD_S = 0.01  # how often the client's loop checks how late it wakes


class _ClientWatch:
    """The load generator's own load over a measured phase: CPU seconds of the event loop's thread per
    wall second (that thread sends, reads and parses every request; a server in the same process, as in
    tests, or the metrics sampler run on threads of their own and do not count), and how late the loop
    woke from each `LAG_PERIOD_S` sleep (a busy loop wakes late)."""

    def __init__(self) -> None:
        self.lags_ms: list[float] = []
        self._task: asyncio.Task[None] | None = None
        self._cpu0 = self._wall0 = 0.0
        self.cpu = math.nan

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            t = loop.time()
            await asyncio.sleep(LAG_PERIOD_S)
            self.lags_ms.append(max(0.0, (loop.time() - t - LAG_PERIOD_S) * 1e3))

    def start(self) -> None:
        self._cpu0, self._wall0 = time.thread_time(), time.perf_counter()
        self._task = asyncio.ensure_future(self._watch())

    def stop(self) -> None:
        wall = time.perf_counter() - self._wall0
        self.cpu = (time.thread_time() - self._cpu0) / wall if wall > 0 else math.nan
        if self._task is not None:
            self._task.cancel()


@dataclass(frozen=True)
class _Plan:
    """Everything one process needs to run its share of a level (picklable, for worker processes)."""

    url: str
    endpoint: str
    bodies: tuple[bytes, ...]
    warmup_bodies: tuple[bytes, ...]
    max_concurrency: int | None
    arrivals_s: tuple[float, ...] | None  # when each body is due, from the measured phase's start (None: at once)
    offered_rate: float | None  # the requests/s that schedule offers
    timeout_s: float
    duration_s: float | None = None  # no request starts after this long into the measured phase


def _plan(base_url: str, model: str, workload: Workload | LevelPlan, *, max_concurrency: int | None,
          request_rate: float | None, warmup_requests: int, seed: int, timeout_s: float,
          duration_s: float | None = None, speedup: float | None = None, arrival: arrivals.Pattern = "poisson",
          burstiness: float = 1.0, warmup: LevelPlan | None = None) -> _Plan:
    if max_concurrency is not None and max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1 or None, got {max_concurrency}")
    if request_rate is not None and not request_rate > 0:
        raise ValueError(f"request_rate must be > 0 (inf: all at once) or None, got {request_rate}")
    if warmup_requests < 0:
        raise ValueError(f"warmup_requests must be >= 0, got {warmup_requests}")
    if duration_s is not None and not duration_s > 0:
        raise ValueError(f"duration_s must be > 0 or None, got {duration_s}")
    # Encode once, here: JSON encoding is not part of what a request costs the server.
    if isinstance(workload, LevelPlan):
        if warmup_requests:
            raise ValueError("a level plan brings its warm-up as a plan of its own (warmup=), not warmup_requests")
        path, bodies = workload.path, tuple(json.dumps(p).encode() for p in workload.bodies)
        warm = tuple(json.dumps(p).encode() for p in warmup.bodies) if warmup is not None else ()
    else:
        path, bodies = workload.path, tuple(json.dumps(p).encode() for p in build_payloads(workload, model))
        # Prompts no measured request sends: no prefix-cache head start (workload.warmup_workload).
        warm = tuple(json.dumps(p).encode() for p in build_payloads(warmup_workload(workload, warmup_requests), model)
                     ) if warmup_requests else ()
    offered = None
    if speedup is not None:
        if not isinstance(workload, LevelPlan) or workload.arrivals_s is None:
            raise ValueError("a speed-up replays a trace's own times: this workload has none")
        replay = tuple(arrivals.scaled(workload.arrivals_s, speedup))
        due: tuple[float, ...] | None = replay
        offered = arrivals.offered_rate(replay, gap_first=False)
    elif request_rate is None or math.isinf(request_rate):
        due = None
    else:
        scheduled = tuple(arrivals.schedule(len(bodies), request_rate, seed=seed, pattern=arrival,
                                            burstiness=burstiness))
        due, offered = scheduled, arrivals.offered_rate(scheduled, gap_first=True)
    return _Plan(url=base_url.rstrip("/") + path, endpoint=workload.endpoint, bodies=bodies, warmup_bodies=warm,
                 max_concurrency=max_concurrency, arrivals_s=due, offered_rate=offered, timeout_s=timeout_s,
                 duration_s=duration_s)


def _connections_needed(plan: _Plan) -> int:
    n = max(len(plan.bodies), len(plan.warmup_bodies), 1)
    return min(plan.max_concurrency, n) if plan.max_concurrency else n


async def _send_all(client: httpx.AsyncClient, plan: _Plan, bodies: tuple[bytes, ...],
                    max_concurrency: int | None, arrivals_s: tuple[float, ...] | None,
                    deadline_ns: int | None = None) -> list[RequestRecord | None]:
    """Send `bodies` under the given limits, each at its arrival time if any (offsets from now); records
    in the order of `bodies`, each with when it was due. After `deadline_ns` no request starts (those in
    flight finish): the unsent ones' records stay None."""
    records: list[RequestRecord | None] = [None] * len(bodies)
    url, endpoint, timeout_s = plan.url, plan.endpoint, plan.timeout_s

    def late() -> bool:
        return deadline_ns is not None and perf_counter_ns() >= deadline_ns

    async def send(i: int, due_ns: int | None = None) -> None:
        record = await stream_request(client, url, bodies[i], endpoint=endpoint, timeout_s=timeout_s)  # type: ignore[arg-type]  # plan.endpoint: a str validated upstream
        record.due_ns = due_ns
        records[i] = record

    if arrivals_s is None:
        if max_concurrency is None or max_concurrency >= len(bodies):
            await asyncio.gather(*(send(i) for i in range(len(bodies))))
        else:
            # Closed loop: each of max_concurrency coroutines takes the next request when it is free.
            next_index = iter(range(len(bodies)))

            async def loop() -> None:
                for i in next_index:
                    if late():
                        return
                    await send(i)

            await asyncio.gather(*(loop() for _ in range(max_concurrency)))
    else:
        slots = asyncio.Semaphore(max_concurrency) if max_concurrency else None

        async def arrive(i: int, due_ns: int) -> None:
            if slots is None:
                return await send(i, due_ns)
            async with slots:  # waiting here is the client's queue time (start_ns - due_ns)
                await send(i, due_ns)

        tasks = []
        loop_ = asyncio.get_running_loop()
        start_s, start_ns = loop_.time(), perf_counter_ns()
        for i, offset_s in enumerate(arrivals_s[:len(bodies)]):
            # Absolute schedule: sleeping late once does not shift every later arrival.
            delay_s = start_s + offset_s - loop_.time()
            if delay_s > 0:
                await asyncio.sleep(delay_s)
            if late():
                break
            tasks.append(asyncio.ensure_future(arrive(i, start_ns + int(offset_s * 1e9))))
        await asyncio.gather(*tasks)
    return records


async def _run_plan(plan: _Plan, client: httpx.AsyncClient | None,
                    ready: Any = None) -> tuple[list[RequestRecord | None], int, int, _ClientWatch]:
    """Warm up, (wait for the other workers), then the measured phase: (records, start_ns, end_ns, the
    client's own load); a record is None for a request a `duration_s` bound left unsent."""
    own_client = client is None
    if client is None:
        client = make_client(_connections_needed(plan), plan.timeout_s)
    try:
        if plan.warmup_bodies:
            await _send_all(client, plan, plan.warmup_bodies, plan.max_concurrency, None)
        if ready is not None:
            ready()  # blocks until every worker is warm: nothing else runs on this loop meanwhile
        watch = _ClientWatch()
        watch.start()
        start_ns = perf_counter_ns()
        deadline_ns = start_ns + int(plan.duration_s * 1e9) if plan.duration_s else None
        try:
            records = await _send_all(client, plan, plan.bodies, plan.max_concurrency, plan.arrivals_s, deadline_ns)
        finally:
            end_ns = perf_counter_ns()
            watch.stop()
    finally:
        if own_client:
            await client.aclose()
    return records, start_ns, end_ns, watch


async def run_level(
    base_url: str,
    model: str,
    workload: Workload | LevelPlan,
    *,
    max_concurrency: int | None = None,
    request_rate: float | None = None,
    speedup: float | None = None,
    arrival: arrivals.Pattern = "poisson",
    burstiness: float = 1.0,
    warmup_requests: int = 0,
    warmup: LevelPlan | None = None,
    seed: int = 0,
    timeout_s: float = 300.0,
    duration_s: float | None = None,
    client: httpx.AsyncClient | None = None,
    workers: int = 1,
) -> tuple[LevelResult, list[RequestRecord]]:
    """Run one load level against `base_url` (e.g. "http://127.0.0.1:8080") and measure it.

    `duration_s`: no request starts after this long (those in flight finish), so a level ends after
    `workload.num_prompts` requests or about `duration_s`, whichever comes first; the records are the
    requests sent, in order. `client`: reuse an AsyncClient (it must allow max_concurrency connections);
    by default one is made and closed here. `workers` > 1 runs `run_level_sync` in a thread (and so
    ignores `client`). Request failures are in the result (failed, error_samples), never raised.
    """
    options = dict(max_concurrency=max_concurrency, request_rate=request_rate, speedup=speedup, arrival=arrival,
                   burstiness=burstiness, warmup_requests=warmup_requests, warmup=warmup, seed=seed,
                   timeout_s=timeout_s, duration_s=duration_s)
    if workers > 1:
        return await asyncio.to_thread(run_level_sync, base_url, model, workload, workers=workers, **options)  # type: ignore[arg-type]
    plan = _plan(base_url, model, workload, **options)  # type: ignore[arg-type]
    records, start_ns, end_ns, watch = await _run_plan(plan, client)
    return _result(records, start_ns, end_ns, max_concurrency, request_rate, plan.offered_rate,
                   client_cpu=watch.cpu, client_lag_ms=watch.lags_ms)


def _result(records: list[RequestRecord | None], start_ns: int, end_ns: int, max_concurrency: int | None,
            request_rate: float | None, offered_rate: float | None = None, *, client_cpu: float = math.nan,
            client_lag_ms: list[float] | tuple[float, ...] = ()) -> tuple[LevelResult, list[RequestRecord]]:
    sent = [r for r in records if r is not None]
    result = LevelResult.from_records(sent, (end_ns - start_ns) / 1e9, max_concurrency=max_concurrency,
                                      request_rate=request_rate, offered_rate=offered_rate,
                                      client_cpu=client_cpu, client_lag_ms=client_lag_ms)
    return result, sent


def _split(total: int | None, parts: int) -> list[int | None]:
    if total is None:
        return [None] * parts
    return [total // parts + (1 if k < total % parts else 0) for k in range(parts)]


def _worker_main(plan: _Plan, barrier: Any, results: Any, index: int) -> None:
    """Entry point of a worker process: run its plan, put (index, records, start_ns, end_ns, (cpu, lags), None)."""
    try:
        records, start_ns, end_ns, watch = asyncio.run(
            _run_plan(plan, None, ready=lambda: barrier.wait(WORKER_START_TIMEOUT_S)))
        results.put((index, [r.to_json() if r else None for r in records], start_ns, end_ns,
                     (watch.cpu, watch.lags_ms), None))
    except BaseException as exc:  # reported to the parent, which raises
        barrier.abort()
        results.put((index, None, 0, 0, None, f"{type(exc).__name__}: {exc}"))


def run_level_sync(
    base_url: str,
    model: str,
    workload: Workload | LevelPlan,
    *,
    max_concurrency: int | None = None,
    request_rate: float | None = None,
    speedup: float | None = None,
    arrival: arrivals.Pattern = "poisson",
    burstiness: float = 1.0,
    warmup_requests: int = 0,
    warmup: LevelPlan | None = None,
    seed: int = 0,
    timeout_s: float = 300.0,
    duration_s: float | None = None,
    workers: int = 1,
) -> tuple[LevelResult, list[RequestRecord]]:
    """`run_level` from synchronous code, optionally over `workers` processes (see the module docstring).

    Raises RuntimeError if a worker process dies (a load generator bug, not a server failure).
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    options = dict(max_concurrency=max_concurrency, request_rate=request_rate, speedup=speedup, arrival=arrival,
                   burstiness=burstiness, warmup_requests=warmup_requests, warmup=warmup, seed=seed,
                   timeout_s=timeout_s, duration_s=duration_s)
    count = len(workload) if isinstance(workload, LevelPlan) else workload.num_prompts
    workers = min(workers, count, max_concurrency or count)
    if workers == 1:
        return asyncio.run(run_level(base_url, model, workload, **options))  # type: ignore[arg-type]
    plan = _plan(base_url, model, workload, **options)  # type: ignore[arg-type]
    concurrencies = _split(max_concurrency, workers)
    # Every worker keeps the one schedule: request i is due at arrivals_s[i] from the common start.
    plans = [
        replace(plan, bodies=plan.bodies[k::workers], warmup_bodies=plan.warmup_bodies[k::workers],
                max_concurrency=concurrencies[k], arrivals_s=plan.arrivals_s[k::workers] if plan.arrivals_s else None)
        for k in range(workers)
    ]
    # spawn, not fork: the caller may have threads (a fake server, MLflow) that fork would copy broken.
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(workers)
    results = ctx.Queue()
    procs = [ctx.Process(target=_worker_main, args=(plans[k], barrier, results, k), daemon=True,
                         name=f"autotuner-loadgen-{k}") for k in range(workers)]
    for p in procs:
        p.start()
    outputs: dict[int, tuple[list[dict[str, Any]], int, int, tuple[float, list[float]]]] = {}
    failures: list[str] = []
    try:
        while len(outputs) + len(failures) < workers:
            try:
                index, recs, start_ns, end_ns, load, failure = results.get(timeout=1.0)
            except queue.Empty:
                # A worker that died without reporting (killed, out of memory) must not hang the level.
                if any(p.exitcode not in (None, 0) for p in procs):
                    failures.append("a worker process died: exit codes " + str([p.exitcode for p in procs]))
                    break
                continue
            if failure is not None:
                failures.append(f"worker {index}: {failure}")
            else:
                outputs[index] = (recs, start_ns, end_ns, load)
    finally:
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.terminate()
    if failures:
        raise RuntimeError("load generator worker failed: " + "; ".join(failures))
    records: list[RequestRecord | None] = [None] * len(plan.bodies)
    for k, (recs, _, _, _) in outputs.items():
        records[k::workers] = [RequestRecord.from_json(r) if r else None for r in recs]
    start_ns = min(o[1] for o in outputs.values())
    end_ns = max(o[2] for o in outputs.values())
    # The busiest worker is the one that could have limited the level; every worker's lateness counts.
    return _result(records, start_ns, end_ns, max_concurrency, request_rate, plan.offered_rate,
                   client_cpu=max(o[3][0] for o in outputs.values()),
                   client_lag_ms=[lag for o in outputs.values() for lag in o[3][1]])


def _fmt(value: float, spec: str = ".2f") -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def format_level(result: LevelResult) -> str:
    """A human-readable block, laid out like `vllm bench serve`'s result."""
    width = 50
    lines = [" Serving Benchmark Result ".center(width, "=")]

    def row(label: str, value: str) -> None:
        lines.append(f"{label:<40} {value:<10}")

    row("Maximum request concurrency:", "unlimited" if result.max_concurrency is None else str(result.max_concurrency))
    row("Traffic request rate (req/s):", "inf" if result.request_rate is None else _fmt(result.request_rate))
    row("Successful requests:", str(result.completed))
    row("Failed requests:", str(result.failed))
    row("Benchmark duration (s):", _fmt(result.duration_s))
    row("Total input tokens:", str(result.input_tokens))
    row("Total generated tokens:", str(result.output_tokens))
    row("Request throughput (req/s):", _fmt(result.request_per_s))
    row("Output token throughput (tok/s):", _fmt(result.output_tok_per_s))
    row("Total token throughput (tok/s):", _fmt(result.total_tok_per_s))
    sections = (("Time to First Token", "TTFT", result.ttft_ms),
                ("Time per Output Token (excl. 1st token)", "TPOT", result.tpot_ms),
                ("Inter-token Latency", "ITL", result.itl_ms),
                ("End-to-end Latency", "E2EL", result.e2e_ms))
    for title, short, stats in sections:
        lines.append(title.center(width, "-"))
        s: LatencyStats = stats
        row(f"Mean {short} (ms):", _fmt(s.mean))
        row(f"Median {short} (ms):", _fmt(s.p50))
        row(f"P90 {short} (ms):", _fmt(s.p90))
        row(f"P99 {short} (ms):", _fmt(s.p99))
        row(f"Max {short} (ms):", _fmt(s.max))
    if note := usage_note(result):
        lines.append(f"note: {note}")
    if result.error_samples:
        lines.append(" Errors ".center(width, "-"))
        for message, count in result.error_samples.items():
            lines.append(f"{count:>6} x {message}")
    lines.append("=" * width)
    return "\n".join(lines)


async def _send_sessions(client: httpx.AsyncClient, url: str, model: str, plan: SessionPlan,
                         max_concurrency: int | None, timeout_s: float) -> list[RequestRecord]:
    """Every session of `plan`, at most `max_concurrency` at once: each turn sent with the history and
    the answers the server gave, after the think time; a failed turn ends its session."""
    records: list[RequestRecord] = []
    order = iter(range(len(plan.sessions)))

    async def one(i: int) -> None:
        history: list[dict[str, str]] = []
        for k, (user, max_tokens) in enumerate(plan.sessions[i], 1):
            if k > 1 and plan.think_s:
                await asyncio.sleep(plan.think_s)
            request = body("chat", model, user, max_tokens, plan.sampling)
            request["messages"] = [*history, {"role": "user", "content": user}]
            answer: list[str] = []
            record = await stream_request(client, url, json.dumps(request).encode(), endpoint="chat",
                                          timeout_s=timeout_s, text=answer)
            record.session, record.turn = i, k
            records.append(record)
            if not record.ok:
                return
            history += [{"role": "user", "content": user}, {"role": "assistant", "content": "".join(answer)}]

    async def loop() -> None:
        for i in order:
            await one(i)

    await asyncio.gather(*(loop() for _ in range(min(max_concurrency or len(plan.sessions), len(plan.sessions)))))
    return records


async def run_sessions(base_url: str, model: str, plan: SessionPlan, *, max_concurrency: int | None = None,
                       warmup: SessionPlan | None = None, timeout_s: float = 300.0,
                       ) -> tuple[LevelResult, list[RequestRecord]]:
    """One load level of multi-turn sessions (workloads/sessions.py) on /v1/chat/completions: `max_concurrency`
    sessions in flight (a closed loop: the next session starts when one ends). The result counts every
    turn as a request; `session_metrics` adds TTFT by turn and the sessions' own durations."""
    url = base_url.rstrip("/") + ENDPOINT_PATHS["chat"]
    slots = min(max_concurrency or len(plan.sessions), max(len(plan.sessions), 1))
    async with make_client(slots, timeout_s) as client:
        if warmup is not None and warmup.sessions:
            await _send_sessions(client, url, model, warmup, max_concurrency, timeout_s)
        watch = _ClientWatch()
        watch.start()
        start_ns = perf_counter_ns()
        try:
            records = await _send_sessions(client, url, model, plan, max_concurrency, timeout_s)
        finally:
            end_ns = perf_counter_ns()
            watch.stop()
    records.sort(key=lambda r: (r.session or 0, r.turn or 0))
    return _result(list(records), start_ns, end_ns, max_concurrency, None, client_cpu=watch.cpu,
                   client_lag_ms=watch.lags_ms)
