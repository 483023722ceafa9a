"""The `earlier-studies` advisor: a warm start from finished studies in the same storage.

Each other study of the same engine whose winner was confirmed proposes that winner, closest first: same
machine (CPU model, GPU names and count), then same workload and load. A winner whose params do not fit
this study's space is left out. Read once per run: other studies do not change under us.
"""

from __future__ import annotations

from typing import Any

import optuna

from autotuner.advisors import Proposal, StudySoFar
from autotuner.core.study import verdict


class EarlierStudies:
    name = "earlier-studies"

    def __init__(self, storage: str, study_name: str, engine: str, host: dict[str, Any], settings: dict[str, Any]):
        self.storage, self.study_name, self.engine = storage, study_name, engine
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
            v = verdict(other)
            if v.winner is None or not v.confirmed or v.winner.baseline:
                continue
            closeness, why = self._closeness(attrs)
            gain = f", {v.gain:+.0%} over its defaults" if v.gain is not None else ""
            reason = f"the confirmed winner of study '{name}' ({why}{gain})"
            found.append((closeness, Proposal(dict(other.trials[v.winner.number].params), reason)))
        return found

    def _closeness(self, attrs: dict[str, Any]) -> tuple[int, str]:
        host = (attrs.get("environment") or {}).get("host") or {}
        settings = attrs.get("settings") or {}
        same_machine = all(host.get(k) == self.host.get(k) for k in ("cpu_model", "gpu_names", "gpu_count"))
        same_work = all(settings.get(k) == self.settings.get(k) for k in ("workload", "load", "model"))
        why = ", ".join(["same machine" if same_machine else "another machine",
                         "same workload" if same_work else "another workload"])
        return 2 * same_machine + same_work, why
