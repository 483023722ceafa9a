"""Each engine's rules for the `engine` advisor (what an engineer who knows it tries first, and the next
step a trial's evidence points at), dispatched by engine name: the engines themselves know flags, not
advice, and import nothing from here."""

from __future__ import annotations

from collections.abc import Callable

from autotuner.advisors import Proposal, StudySoFar
from autotuner.advisors.engine_rules import llamacpp, sglang, vllm
from autotuner.advisors.engine_rules.sizes import at_least
from autotuner.engines._base import Engine

__all__ = ["RULES", "advise", "at_least"]

RULES: dict[str, Callable[[Engine, StudySoFar], list[Proposal]]] = {
    "llamacpp": llamacpp.advise,
    "vllm": vllm.advise,
    "sglang": sglang.advise,
}


def advise(engine: Engine, study: StudySoFar) -> list[Proposal]:
    """The rules of `engine` (none for an engine without any, e.g. a test's fake one)."""
    rules = RULES.get(engine.name)
    return rules(engine, study) if rules else []
