"""A real engine adapter for the fake OpenAI server (tests/fake_openai_server.py), so the study driver,
the executor and every rule between them run for real in seconds, without building llama-server.

Its params change what the server really does: `itl_ms` its time between tokens (speed), `capacity`
how many requests it serves at once before answering 503 (an overloaded server), `start_delay_s` how
long it takes to listen (a slow start), `wrong_answers` whether it answers the quality prompts as the
defaults do, `drop_streams` which streamed requests it drops unanswered, `kernel` a choice of which
the server accepts only some values (others: a bad-flag exit).
The process is started by the real ProcessLauncher.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotuner.engines._base import Engine, Flag, LaunchContext, LaunchSpec

SERVER = Path(__file__).resolve().parent / "fake_openai_server.py"
# Its defaults take this long between tokens, as a real server does: an instant server would have the
# load generator's own loop set the pace, and the level would rightly not count (client_limited).
DEFAULT_ITL_MS = 1


class FakeEngine(Engine):
    name = "fake"
    flags = {
        "itl_ms": Flag(flag="--itl-s", help="milliseconds between tokens", default=DEFAULT_ITL_MS),
        "capacity": Flag(flag="--capacity", help="requests served at once; more get 503"),
        "start_delay_s": Flag(flag="--start-delay-s", help="seconds before it listens"),
        "wrong_answers": Flag(on="--wrong-answers", help="answers differ from the defaults'"),
        "kernel": Flag(flag="--kernel", help="fast or safe; any other value is refused at start (bad-flag)"),
        "drop_streams": Flag(flag="--drop-stream", help='"3 20": drop the 3rd and 20th streamed requests'),
    }

    def tuning_args(self, params: Mapping[str, Any]) -> list[str]:
        args = super().tuning_args({k: v for k, v in params.items() if k not in ("itl_ms", "drop_streams")})
        args += ["--itl-s", str(params["itl_ms"] / 1000)] if "itl_ms" in params else []
        return args + [a for n in str(params.get("drop_streams", "")).split() for a in ("--drop-stream", n)]

    def build(self, params: Mapping[str, Any], ctx: LaunchContext) -> LaunchSpec:
        argv = [sys.executable, str(SERVER), "--port", str(ctx.port), "--coarse-timing", "--metrics-lines", "1",
                *self.tuning_args({"itl_ms": DEFAULT_ITL_MS, **params}), *ctx.extra_args]
        return LaunchSpec(argv=argv, port=ctx.port, served_model_name=ctx.served_model_name, health_path="/health")

    def classify_failure(self, log_tail: str, exit_code: int | None = None) -> tuple[str | None, str | None]:
        refused = next((line.strip() for line in log_tail.splitlines() if "error: argument" in line), None)
        return ("bad-flag", refused) if refused else (None, None)

    def version_argv(self, binary: str) -> list[str]:
        return [sys.executable, "--version"]
