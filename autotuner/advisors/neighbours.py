"""The `neighbours` advisor: one knob at a time from the best config so far, as an engineer tunes.

Around the best completed trial it proposes the configs that differ in one param by one notch: the next
choice up or down a categorical list, the other value of a bool, the next step (or doubling, on a log
scale) of a number. Params are visited in the space's order, nearest moves first; each proposal is new
or the driver skips it (measured, running, refused), and a new best re-centres the walk. It takes every
other slot at most (only when the last launch was not its own), so the sampler keeps exploring the
space between its moves. Pure over the study so far.
"""

from __future__ import annotations

from typing import Any

from autotuner.advisors import Proposal, StudySoFar
from autotuner.config import BoolParam, CategoricalParam, FloatParam, IntParam


class Neighbours:
    name = "neighbours"

    def propose(self, study: StudySoFar) -> list[Proposal]:
        best = study.best()
        if best is None or best.baseline or (study.trials and study.trials[-1].proposed_by == self.name):
            return []
        proposals = []
        for name, spec in study.space.config.params.items():
            if name not in best.params:
                continue
            for value in notches(spec, best.params[name]):
                proposals.append(Proposal({**best.params, name: value},
                                          f"#{best.number} is the best so far: {name} {best.params[name]} -> "
                                          f"{value}, one knob at a time"))
        return proposals


def notches(spec: Any, value: Any) -> list[Any]:
    """The values one notch from `value`: up first, then down (none past the param's ends)."""
    if isinstance(spec, BoolParam):
        return [not value]
    if isinstance(spec, CategoricalParam):
        if value not in spec.choices:
            return []
        i = spec.choices.index(value)
        return [spec.choices[j] for j in (i + 1, i - 1) if 0 <= j < len(spec.choices)]
    assert isinstance(spec, (IntParam, FloatParam))
    if spec.log and value > 0:
        up, down = value * 2, value / 2
    else:  # an eighth of the range (the space's own step at least): a move that can show in a measurement
        step = max(spec.step or 0, (spec.high - spec.low) / 8)
        up, down = value + step, value - step
    if isinstance(spec, IntParam):
        up, down = int(round(up)), int(round(down))
    return [v for v in (up, down) if spec.low <= v <= spec.high and v != value]
