"""How long one request may take at a load level, when the experiment does not fix it.

A request that times out is a failed request, and a level with too many of them fails the trial, so a
fixed timeout fails every config slower than some rate it never meant to set (900 s at concurrency 1024
and 512 tokens out: any config under ~580 tok/s). Instead, the timeout follows the level's load and
the rate the config has just shown (its warm-up, then each level it measured):

- at concurrency C the server shares its rate T between C requests: one takes about C x output_len / T;
- at a request rate, queued work can reach the whole level's: its requests x output_len / T.

Three times that, between MIN_S and MAX_S (a rate shown at a low load says little about a much higher
one, and one hung request must not hold a level for hours); FIRST_S while the config has shown no rate
yet. An SLO on the whole request (`e2e_ms_*`) caps it at three times its limit: a request that slow
fails the SLO anyway. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

MIN_S = 120.0
MAX_S = 3600.0  # at concurrency 1024 and 512 tokens out: fails only configs under ~150 tok/s
FIRST_S = 600.0  # before the config has shown a rate (no warm-up): generous, as the old fixed default was not
SAFETY = 3.0


def request_timeout(fixed: float | None, *, load_key: str, load: float, num_prompts: int, output_len: float,
                    tok_per_s: float | None, slo: Mapping[str, float], duration_s: float | None = None) -> float:
    """Seconds one request may take at this level (`fixed`: the experiment's, as is)."""
    if fixed:
        return fixed
    if not tok_per_s or tok_per_s <= 0:
        timeout = FIRST_S
    else:
        if load_key == "max_concurrency":
            in_flight = min(load, num_prompts)
        else:
            in_flight = min(num_prompts, load * duration_s) if duration_s else num_prompts
        timeout = max(MIN_S, SAFETY * in_flight * output_len / tok_per_s)
    caps = [SAFETY * limit / 1000 for name, limit in slo.items() if name.startswith("e2e_ms_")]
    return max(MIN_S, min([timeout, MAX_S, *caps]))
