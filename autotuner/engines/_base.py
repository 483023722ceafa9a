"""The engine seam: a sampled configuration -> the exact launch of one inference server.

An engine adapter is pure: it knows flag names, defaults, environment variables, the health path and
what a startup failure looks like in the engine's log, and it never starts, reads or writes anything.
Values from the search space only ever reach the flag declared for their param (`Flag`), so a search
space cannot smuggle arbitrary arguments into the server.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar


@dataclass(frozen=True)
class LaunchSpec:
    """Everything a launcher needs to start one server; argv is a list, never a shell string."""

    argv: list[str]
    port: int
    served_model_name: str
    health_path: str = "/health"
    env: dict[str, str] = field(default_factory=dict)
    image: str | None = None
    # Environment that only changes what the server logs, not how it runs: left out of command_line().
    log_env: dict[str, str] = field(default_factory=dict)
    # Passed to the server, never printed: command_line() shows NAME="$NAME" instead of the value.
    secret_env: dict[str, str] = field(default_factory=dict, repr=False)

    def command_line(self) -> str:
        env = [f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items())]
        env += [f'{k}="${k}"' for k in sorted(self.secret_env)]
        return " ".join([*env, shlex.join(self.argv)])


@dataclass(frozen=True)
class LaunchContext:
    """What a launch needs besides the params: where the model is and where to listen."""

    model_path: Path
    served_model_name: str
    port: int
    host: str = "127.0.0.1"
    binary: str | None = None  # the engine's executable, for a local process
    extra_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Flag:
    """How one param reaches the command line.

    `flag VALUE` for values; for booleans `on`/`off` are the flags to pass for True/False (None: pass
    nothing). `choices`, when set, is the engine's own list of accepted values.
    """

    flag: str | None = None
    on: str | None = None
    off: str | None = None
    default: Any = None
    choices: tuple[Any, ...] | None = None
    help: str = ""

    def render(self, value: Any) -> list[str]:
        if isinstance(value, bool) and (self.on or self.off):
            chosen = self.on if value else self.off
            return [chosen] if chosen else []
        if self.flag is None:
            raise ValueError("flag has no value form")
        return [self.flag, str(value).lower() if isinstance(value, bool) else str(value)]


class EngineError(ValueError):
    """A search space or experiment asks the engine for something it does not have."""


class Engine:
    """Base of the engine adapters: a table of params -> flags, and the rules that go with it."""

    name: ClassVar[str]
    flags: ClassVar[Mapping[str, Flag]]

    def check_space(self, param_names: list[str], choices: Mapping[str, list[Any]]) -> None:
        """Raise EngineError for a param this engine does not know, or a value it does not accept."""
        for name in param_names:
            if name not in self.flags:
                raise EngineError(
                    f"'{name}' is not a {self.name} param (known: {', '.join(sorted(self.flags))})"
                )
        for name, values in choices.items():
            allowed = self.flags[name].choices
            bad = [v for v in values if allowed is not None and v not in allowed]
            if bad:
                raise EngineError(f"'{name}': {bad[0]!r} is not accepted by {self.name} (accepted: {list(allowed)})")

    def tuning_args(self, params: Mapping[str, Any]) -> list[str]:
        args: list[str] = []
        for name, value in params.items():
            args += self.flags[name].render(value)
        return args

    def infeasible(self, params: Mapping[str, Any], context: Mapping[str, Any]) -> list[str]:
        """Rules this config breaks before any launch (empty: launchable). `context` holds workload facts."""
        return []

    def build(self, params: Mapping[str, Any], ctx: LaunchContext) -> LaunchSpec:
        raise NotImplementedError

    def classify_failure(self, log_tail: str) -> tuple[str | None, str | None]:
        """Why a server failed, read from its log: (class such as `oom` or `bad-flag`, the telling line).
        Either may be None when the log does not say."""
        return None, None

    def version_argv(self, binary: str) -> list[str]:
        return [binary, "--version"]

    def parse_version(self, output: str) -> str:
        return output.strip().splitlines()[0] if output.strip() else "unknown"


_ENGINES: dict[str, type[Engine]] = {}


def register(cls: type[Engine]) -> type[Engine]:
    _ENGINES[cls.name] = cls
    return cls


def get_engine(name: str) -> Engine:
    from autotuner.engines import llamacpp  # noqa: F401  (registers itself)

    try:
        return _ENGINES[name]()
    except KeyError:
        raise EngineError(f"unknown engine '{name}' (engines: {', '.join(sorted(_ENGINES))})") from None
