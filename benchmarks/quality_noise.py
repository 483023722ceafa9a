"""What the quality gate measures for configs that change nothing numerical, and for ones that do.

The gate's default bar (`quality:` in an experiment; autotuner/quality.py) must pass every config that
computes the same model the same way up to floating-point order (threads, slots, batch sizes, batching,
context size, a second launch of the defaults) and fail the ones that change the numbers (quantized KV
cache, quantized weights). This script launches each config of llama-server on the quickstart model (and
on the same weights written as q8_0 and q4_0 by the project's model writer), has it answer the gate's
prompt set exactly as a trial does (`quality.collect`: same prompts, greedy, same count), compares each
with the first launch of the defaults (`quality.compare`), and prints agreement, mean first divergence,
log-prob delta, and the gate's time.

    .venv/bin/python benchmarks/quality_noise.py [--repeats 3] [--concurrency 1] [--prompts 16] [--max-tokens 32]

It measures; it never asserts. Random weights make near-ties between logits common, so a tiny numerical
difference flips a greedy token more often than on a trained model: a bar that passes the neutral configs
here is, if anything, strict.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from autotuner import quality  # noqa: E402  # after the path insert above
from autotuner.config import QualityConfig  # noqa: E402
from autotuner.engines.llamacpp import LlamaCppEngine  # noqa: E402
from autotuner.launchers.process import ProcessLauncher  # noqa: E402
from autotuner.models.tiny_gguf import write_tiny_llama_gguf  # noqa: E402
from autotuner.util import paths  # noqa: E402
from benchmarks.measure_landscape import launched  # noqa: E402

NEUTRAL: list[tuple[str, dict[str, Any]]] = [
    ("-t 1", {"threads": 1}),
    ("-np 1", {"parallel": 1}),
    ("-np 16", {"parallel": 16}),
    ("-b 512 -ub 128", {"batch_size": 512, "ubatch_size": 128}),
    ("-nocb", {"cont_batching": False}),
    ("-c 4096", {"ctx_size": 4096}),
    ("-no-kvu", {"kv_unified": False}),
    ("-fa on", {"flash_attn": "on"}),
    ("-fa off", {"flash_attn": "off"}),
]
CHANGING: list[tuple[str, dict[str, Any]]] = [
    ("-ctk q8_0", {"cache_type_k": "q8_0"}),
    ("-fa on -ctk q8_0 -ctv q8_0", {"flash_attn": "on", "cache_type_k": "q8_0", "cache_type_v": "q8_0"}),
    ("-ctk q4_0", {"cache_type_k": "q4_0"}),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="launches of the defaults (the first is the reference)")
    parser.add_argument("--concurrency", type=int, default=QualityConfig().concurrency)
    parser.add_argument("--prompts", type=int, default=QualityConfig().prompts)
    parser.add_argument("--max-tokens", type=int, default=QualityConfig().max_tokens)
    parser.add_argument("--model", type=Path, default=REPO / "models" / "quickstart.gguf")
    args = parser.parse_args()
    binary = paths.llama_server_binary()
    if binary is None or not args.model.exists():
        print("needs llama-server and models/quickstart.gguf: run scripts/setup.sh first", file=sys.stderr)
        return 2
    settings = quality.Settings(prompts=args.prompts, max_tokens=args.max_tokens, endpoint="completions",
                                concurrency=args.concurrency)
    bar = QualityConfig(prompts=args.prompts, max_tokens=args.max_tokens, concurrency=args.concurrency)
    engine = LlamaCppEngine()
    with tempfile.TemporaryDirectory(prefix="quality-noise-") as tmp:
        work = Path(tmp)
        launcher = ProcessLauncher(work / "procs")
        models = {"f16": args.model.resolve()}
        for q in ("q8_0", "q4_0"):  # the quickstart's weights (small, seed 0), quantized
            models[q] = write_tiny_llama_gguf(work / f"quickstart-{q}.gguf", size="small", seed=0, quant=q)
        runs: list[tuple[str, str, dict[str, Any], Path]] = [
            *[("defaults", f"defaults #{i + 1}", {}, models["f16"]) for i in range(args.repeats)],
            *[("neutral", label, p, models["f16"]) for label, p in NEUTRAL],
            *[("changing", label, p, models["f16"]) for label, p in CHANGING],
            *[("changing", f"weights {q}", {}, models[q]) for q in ("q8_0", "q4_0")],
        ]
        reference: quality.Answers | None = None
        seconds: list[float] = []
        print(f"{args.prompts} prompts x {args.max_tokens} tokens, {args.concurrency} at a time; bar: agreement >= "
              f"{bar.min_token_agreement}, log-prob delta <= {bar.max_logprob_delta}")
        print(f"{'kind':9} {'config':28} {'agree':>6} {'1st div':>8} {'Δlogprob':>9} {'gate s':>7} {'verdict':>8}")
        for kind, label, params, model in runs:
            with launched(params, engine, launcher, str(binary), model, work) as (handle, name):
                if handle is None:
                    print(f"{kind:9} {label:28} did not start: {name}")
                    continue
                t = time.perf_counter()
                answers = asyncio.run(quality.collect(handle.base_url, name, settings, 300.0))
                seconds.append(time.perf_counter() - t)
            if reference is None:
                reference = answers
                print(f"{kind:9} {label:28} {'(the reference)':>24} {seconds[-1]:7.1f}")
                continue
            score = quality.compare(reference, answers)
            passes = quality.judge(score, bar) is None
            delta = f"{score.logprob_delta:.4f}" if score.logprob_delta is not None else "-"
            print(f"{kind:9} {label:28} {score.token_agreement:6.2f} {score.first_divergence:8.1f} {delta:>9} "
                  f"{seconds[-1]:7.1f} {'pass' if passes else 'FAIL':>8}")
        med = statistics.median(seconds)
        print(f"gate time per launch: median {med:.1f} s (range {min(seconds):.1f}-{max(seconds):.1f}); its share of a "
              "trial is in each trial's timings (quality_s against total_s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
