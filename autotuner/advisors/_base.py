"""The advisors' seam: what an advisor reads (`StudySoFar`), what it gives (`Proposal`), how it says it
has nothing (`AdviceError`), and how a proposal is fitted to the space (`complete`). See __init__.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from autotuner.bench.limits import Limit, binding_limit
from autotuner.config.space import SearchSpace

if TYPE_CHECKING:  # the driver hands advisors its typed trial records; they never import the core
    from autotuner.core.record import TrialView


class AdviceError(Exception):
    """Why an advisor has no proposal this time, in one line (the driver says it once): an endpoint that did
    not answer, or answered something that is not proposals; a model that cannot estimate this study."""


@dataclass(frozen=True)
class Proposal:
    params: dict[str, Any]  # the values that matter to the advisor; `complete` fits them to the space
    reason: str  # one line: why this config, from what evidence
    refused: str | None = None  # why the advisor's own check refused it (the driver says so, launches nothing)


@dataclass(frozen=True)
class StudySoFar:
    trials: list[TrialView]  # launched trials, oldest first (no re-proposals)
    space: SearchSpace
    load_key: str  # max_concurrency or request_rate
    max_load: float  # the highest load a trial measures
    cpus: int  # cores the engine may use
    gpus: int
    metric: str
    direction: str
    trials_left: int | None = None  # this run's remaining budget, when known
    defaults: Mapping[str, Any] = field(default_factory=dict)  # the engine's own default per param
    # The requests every trial sends (config/feasibility.feasibility_context): longest_request and
    # mean_request in tokens, prefix_reuse (0..1), where known.
    workload: Mapping[str, Any] = field(default_factory=dict)

    def completed(self) -> list[TrialView]:
        return [t for t in self.trials if t.state == "COMPLETE" and t.value is not None]

    def best(self) -> TrialView | None:
        """The best completed trial by its own value (what the evidence rules read; not the winner rule)."""
        done = self.completed()
        if not done:
            return None
        pick = max if self.direction == "maximize" else min
        return pick(done, key=lambda t: t.value)  # type: ignore[arg-type,return-value]  # completed: values set


    def limit(self, trial: TrialView) -> Limit:
        """What bound the trial at the level it was scored by (bench.limits)."""
        metrics = trial.scored_metrics(self.metric, self.direction)
        return binding_limit(metrics) if metrics else Limit("unknown", "no level measured")

    def latest_failure(self, failure_class: str) -> TrialView | None:
        """The newest trial of a tuned config (not the defaults) that failed so."""
        return next((t for t in reversed(self.trials)
                     if t.state == "FAIL" and t.failure_class == failure_class and not t.baseline), None)

    def proposed_by(self, name: str) -> list[TrialView]:
        return [t for t in self.trials if t.proposed_by == name]


class Advisor(Protocol):
    name: str

    def propose(self, study: StudySoFar) -> list[Proposal]: ...


def complete(proposal: Mapping[str, Any], space: SearchSpace, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The proposal fitted to the space, with the engine's defaults where the space allows them exactly;
    any param left without a value is the sampler's to choose when the trial runs."""
    allowed = {k: v for k, v in defaults.items() if k in space.names and space.contains({k: v}) is None}
    return space.fit({**allowed, **proposal})
