"""Values an engine build refused: never launched again with that build, whoever proposes them.

A trial that failed as `bad-flag` or `backend` (the engine rejected a flag's value, or a kernel backend it
cannot run) settles more than its own config when its log line names exactly one of the trial's params,
by flag or by value: "--attention-backend: invalid choice 'FLASHINFER'", "Invalid attention backend:
TRITON_MLA". Any config holding that value is then infeasible for this engine version, with the
failure as its reason. A line naming no param, or several, bans nothing (the config alone is settled),
and neither does one naming a value some launch of this version ran with (then the refusal was of a
combination: "FLASHINFER does not support an fp8 KV cache" names only the backend).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from autotuner.core.record import TrialView

REFUSALS = ("bad-flag", "backend")
MIN_VALUE_CHARS = 3  # shorter values ("1", "on") appear in too many log lines to name a param


@dataclass(frozen=True)
class Ban:
    param: str
    value: Any
    trial: int
    failure_class: str
    line: str

    def why(self) -> str:
        return (f"{self.param}={self.value!r} was refused by this engine version in trial #{self.trial} "
                f"({self.failure_class}: {self.line[:160]})")


def learned(trials: Iterable[TrialView], flag_text: Callable[[str, Any], str], engine_version: str | None) -> list[Ban]:
    """The bans the failed trials of this engine version teach. `flag_text(param, value)`: the value as
    the engine's command line writes it (e.g. "--attention-backend FLASHINFER")."""
    this_version = [t for t in trials if t.engine_version in (None, engine_version)]
    # A value some launch ran with is no value the build refuses: the refusal was of a combination.
    worked = {(p, repr(v)) for t in this_version if t.state in ("COMPLETE", "PRUNED") for p, v in t.params.items()}
    bans = []
    for t in this_version:
        if t.state != "FAIL" or t.failure_class not in REFUSALS or t.baseline or not t.failure_reason:
            continue
        named = [(p, v) for p, v in t.params.items() if names(t.failure_reason, flag_text(p, v), v)]
        if len(named) == 1 and (named[0][0], repr(named[0][1])) not in worked:
            bans.append(Ban(named[0][0], named[0][1], t.number, t.failure_class, t.failure_reason))
    return bans


def names(line: str, flag: str, value: Any) -> bool:
    """Whether a log line names this flag (as a whole word) or this value (long enough to be telling)."""
    words = [w for w in flag.split() if w.startswith("-")]
    text = str(value)
    if not isinstance(value, bool) and len(text) >= MIN_VALUE_CHARS and not _number(text):
        words.append(text)
    return any(re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", line, re.IGNORECASE) for w in words)


def broken(params: Mapping[str, Any], bans: Iterable[Ban]) -> list[str]:
    return [b.why() for b in bans if b.param in params and params[b.param] == b.value]


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
