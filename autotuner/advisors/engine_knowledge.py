"""The `engine` advisor: what an engineer who knows the engine tries first, and the next step a trial's
evidence points at. The rules themselves are each adapter's (`Engine.advise`, next to its flags)."""

from __future__ import annotations

import math

from autotuner.advisors import Proposal, StudySoFar
from autotuner.engines._base import Engine


class EngineKnowledge:
    name = "engine"

    def __init__(self, engine: Engine):
        self.engine = engine

    def propose(self, study: StudySoFar) -> list[Proposal]:
        return self.engine.advise(study)


def at_least(value: float) -> int:
    """The smallest power of two >= value: slot counts that cover a load without splitting hairs."""
    return 1 << max(math.ceil(value) - 1, 0).bit_length()
