"""The one place that calls AIConfigurator: run as a script by the Python it is installed in.

AIConfigurator (the optional extra `autotuner[aiconfigurator]`) pulls in pandas, matplotlib, bokeh and
pyarrow; it may live in its own virtual environment, so this file imports only the standard library and
aiconfigurator, never autotuner. It reads one JSON request on stdin and writes one JSON answer on stdout:

    {"op": "describe"}  ->  {"version", "systems": {system: {backend: [versions]}}, "models": [ids]}
    {"op": "support", "model", "system", "backend", "backend_versions"}  ->  {"version": the first covered | null}
    {"op": "estimate", "model", "system", "backend", "backend_version", "points": [keywords]}
        ->  {"results": [{"tokens_per_s", "ttft_ms", "tpot_ms", "memory_gb", "kv_short"} | {"oom": why} |
             {"error": why}]}
"""

from __future__ import annotations

import json
import logging
import sys
from importlib import metadata
from typing import Any


def describe() -> dict[str, Any]:
    from aiconfigurator.sdk.common import get_default_models  # type: ignore[import-not-found]
    from aiconfigurator.sdk.perf_database import get_supported_databases  # type: ignore[import-not-found]

    systems = {s: {b: list(v) for b, v in backends.items()} for s, backends in get_supported_databases().items()}
    return {"version": metadata.version("aiconfigurator"), "systems": systems, "models": sorted(get_default_models())}


def support(req: dict[str, Any]) -> dict[str, Any]:
    from aiconfigurator.cli.api import cli_support  # type: ignore[import-not-found]

    for version in req["backend_versions"]:
        agg, _ = cli_support(req["model"], req["system"], backend=req["backend"], backend_version=version)
        if agg:
            return {"version": version}
    return {"version": None}


def estimate(req: dict[str, Any]) -> dict[str, Any]:
    from aiconfigurator.cli.api import cli_estimate  # type: ignore[import-not-found]

    results: list[dict[str, Any]] = []
    for point in req["points"]:
        try:
            r = cli_estimate(req["model"], req["system"], mode="agg", backend_name=req["backend"],
                             backend_version=req["backend_version"], **point)
        except Exception as e:  # one point it cannot estimate is that point's answer, not the batch's
            text = " ".join(str(e).split())[:300]
            results.append({"oom": text} if text.startswith("OOM") else {"error": f"{type(e).__name__}: {text}"})
            continue
        results.append({"tokens_per_s": r.tokens_per_second, "ttft_ms": r.ttft, "tpot_ms": r.tpot,
                        "memory_gb": r.memory, "kv_short": r.kv_cache_warning is not None})
    return {"results": results}


def main() -> int:
    logging.disable(logging.WARNING)  # its warnings would drown the one line the tuner shows
    req = json.load(sys.stdin)
    ops = {"describe": lambda: describe(), "support": lambda: support(req), "estimate": lambda: estimate(req)}
    json.dump(ops[req["op"]](), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
