"""Small workload files in the formats users bring, made here (no hub): what the shipped `sharegpt` and
`trace` experiments replay on the quickstart's llama-server.

- `sharegpt.json`: conversations of from/value, prompts and answers of lognormal length (a long tail),
  some of several rounds, a few without an answer (skipped, as `vllm bench serve` skips them).
- `prompts.jsonl`: one `{"prompt", "output_tokens"}` a line (`vllm bench serve --dataset-name custom`).
- `trace.jsonl`: Mooncake format with 64-token blocks: sessions behind one of three system prompts,
  each turn resending the session's history (a growing prefix) after think time, and one-off long
  prompts; about 3 requests/s.

`python -m autotuner.workloads.samples OUT_DIR` writes all three (deterministic: the same bytes every time).
"""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path
from typing import Any

from autotuner.workloads.words import WORDS

TRACE_BLOCK = 64


def _text(rng: random.Random, words: int) -> str:
    out, since = [], 0
    for _ in range(words):
        out.append(rng.choice(WORDS))
        since += 1
        if since > 6 and rng.random() < 0.12:
            out[-1] += rng.choice(".,?")
            since = 0
    return " ".join(out)


def _lognormal(rng: random.Random, median: float, sigma: float, low: int, high: int) -> int:
    return max(low, min(high, round(math.exp(rng.gauss(math.log(median), sigma)))))


def sharegpt(rng: random.Random, n: int = 200) -> list[dict[str, Any]]:
    convs = []
    for k in range(n):
        turns = []
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            turns.append({"from": "human", "value": _text(rng, _lognormal(rng, 90, 0.7, 8, 700))})
            turns.append({"from": "gpt", "value": _text(rng, _lognormal(rng, 70, 0.6, 8, 300))})
        if k % 40 == 7:
            turns = turns[:1]  # asked, never answered: skipped
        convs.append({"id": f"sample-{k}", "conversations": turns})
    return convs


def prompts(rng: random.Random, n: int = 200) -> list[dict[str, Any]]:
    return [{"prompt": _text(rng, _lognormal(rng, 120, 0.6, 8, 800)), "output_tokens": _lognormal(rng, 64, 0.5, 8, 256)}
            for _ in range(n)]


def trace(rng: random.Random, sessions: int = 14, one_offs: int = 8) -> list[dict[str, Any]]:
    next_id = iter(range(1, 10**9))
    systems = [[next(next_id) for _ in range(blocks)] for blocks in (4, 2, 6)]  # 256, 128, 384 tokens
    rows: list[tuple[float, dict[str, Any]]] = []
    start = 0.0
    for _ in range(sessions):
        start += rng.expovariate(0.9)
        history = list(rng.choice(systems))
        t = start
        for _turn in range(rng.randint(2, 4)):
            user = rng.randint(20, 150)  # the new message: full blocks, then a partial last one
            ids = history + [next(next_id) for _ in range(math.ceil(user / TRACE_BLOCK))]
            length = TRACE_BLOCK * len(history) + user
            out = _lognormal(rng, 48, 0.5, 12, 160)
            rows.append((t, {"input_length": length, "output_length": out, "hash_ids": ids}))
            # The next turn resends all of it and the answer: the message's full blocks are shared, while
            # its partial last block and the answer fill new blocks (a partial block's id is never reused).
            full = user // TRACE_BLOCK
            rest = user - full * TRACE_BLOCK + out
            history = ids[:len(history) + full] + [next(next_id) for _ in range(math.ceil(rest / TRACE_BLOCK))]
            t += rng.uniform(2.0, 6.0)  # think time
    span = max(r[0] for r in rows)
    for _ in range(one_offs):  # retrieval-style long prompts, nothing shared
        length = rng.randint(500, 870)
        ids = [next(next_id) for _ in range(math.ceil(length / TRACE_BLOCK))]
        rows.append((rng.uniform(0, span), {"input_length": length, "output_length": _lognormal(rng, 32, 0.4, 8, 96),
                                            "hash_ids": ids}))
    rows.sort(key=lambda r: r[0])
    return [{"timestamp": round(t * 1000), **row} for t, row in rows]


def write(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "sharegpt.json": json.dumps(sharegpt(random.Random(1)), indent=1) + "\n",
        "prompts.jsonl": "".join(json.dumps(p) + "\n" for p in prompts(random.Random(2))),
        "trace.jsonl": "".join(json.dumps(r) + "\n" for r in trace(random.Random(3))),
    }
    paths = []
    for name, text in files.items():
        path = out / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        paths.append(path)
    return paths


if __name__ == "__main__":
    for p in write(Path(sys.argv[1] if len(sys.argv) > 1 else "workloads")):
        print(p)
