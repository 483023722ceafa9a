"""The `earlier-studies` advisor: a warm start from finished studies in the same storage.

Each other study of the same engine whose winner was confirmed proposes that winner, closest first: same
machine (CPU model, GPU names and count), then same workload and load. A winner whose params do not fit
this study's space is left out. Read once per run: other studies do not change under us. Which trial
won a study, and by how much, is the study's rule (`core.study.confirmed_winner`), handed in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optuna

from autotuner.advisors import Proposal, StudySoFar

# A study -> its confirmed winner (not the baseline): (trial number, gain over the defaults or None); None
# when it has none.
ConfirmedWinner = Callable[[optuna.Study], "tuple[int, float | None] | None"]


class EarlierStudies:
    name = "earlier-studies"

    def __init__(self, storage: str, study_name: str, engine: str, host: dict[str, Any], settings: dict[str, Any],
                 confirmed_winner: ConfirmedWinner):
        self.storage, self.study_name, self.engine = storage, study_name, engine
        self.confirmed_winner = confirmed_winner
        self.host, self.settings = host, settings
        self._found: list[tuple[int, Proposal]] | None = None

    def propose(self, study: StudySoFar) -> list[Proposal]:
        if self._found is None:
            self._found = self._winners()
        return [p for _, p in sorted(self._found, key=lambda sp: -sp[0]) if study.space.contains(p.params) is None]

    def _winners(self) -> list[tuple[int, Proposal]]:
        found = []
        for name in optuna.get_all_study_names(self.storage):
            if name == self.study_name:
                continue
            other = optuna.load_study(study_name=name, storage=self.storage)
            attrs = other.user_attrs
            if (attrs.get("environment") or {}).get("engine") != self.engine or len(other.directions) > 1:
                continue
            if (won := self.confirmed_winner(other)) is None:
                continue
            number, gain = won
            closeness, why = self._closeness(attrs)
            over = f", {gain:+.0%} over its defaults" if gain is not None else ""
            reason = f"the confirmed winner of study '{name}' ({why}{over})"
            found.append((closeness, Proposal(dict(other.trials[number].params), reason)))
        return found

    def _closeness(self, attrs: dict[str, Any]) -> tuple[int, str]:
        host = (attrs.get("environment") or {}).get("host") or {}
        settings = attrs.get("settings") or {}
        same_machine = all(host.get(k) == self.host.get(k) for k in ("cpu_model", "gpu_names", "gpu_count"))
        same_work = all(settings.get(k) == self.settings.get(k) for k in ("workload", "load", "model"))
        why = ", ".join(["same machine" if same_machine else "another machine",
                         "same workload" if same_work else "another workload"])
        return 2 * same_machine + same_work, why
