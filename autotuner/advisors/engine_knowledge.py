"""The `engine` advisor: what an engineer who knows the engine tries first, and the next step a trial's
evidence points at. The rules are per engine, in advisors/engine_rules/."""

from __future__ import annotations

from autotuner.advisors import Proposal, StudySoFar
from autotuner.advisors.engine_rules import advise
from autotuner.engines._base import Engine


class EngineKnowledge:
    name = "engine"

    def __init__(self, engine: Engine):
        self.engine = engine

    def propose(self, study: StudySoFar) -> list[Proposal]:
        return advise(self.engine, study)
