"""The seam to AIConfigurator: finds the Python it is installed in and asks `aic_worker.py` there.

AIConfigurator is an optional extra with heavy dependencies, so it may live in its own virtual
environment, one per pinned version under the user cache (`<cache>/aiconfigurator-<version>/`); the
tuner's own Python is used when it imports aiconfigurator itself. Each question is one short process
(JSON in, JSON out). Everything the advisor decides is in `performance_model.py` and `aic_inputs.py`;
this module only runs the worker and turns its failures into `CannotEstimate` with one line.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotuner.advisors import AdviceError
from autotuner.util import paths

WORKER = Path(__file__).with_name("aic_worker.py")
TIMEOUT_S = 600.0  # a whole space's estimates, at about 10 ms each, with room for a slow disk


class CannotEstimate(AdviceError):
    """Why the performance model steps aside: one line, said once."""


@dataclass(frozen=True)
class Estimate:
    tokens_per_s: float | None = None  # output tokens per second of one engine (None: not estimated)
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    memory_gb: float | None = None
    kv_short: bool = False  # the batch needs more KV cache than the memory share leaves: requests queue
    oom: str | None = None  # predicted not to fit: never worth a launch
    error: str | None = None  # it could not estimate this point


@dataclass(frozen=True)
class Coverage:
    version: str  # aiconfigurator's
    systems: dict[str, dict[str, list[str]]]  # system -> backend -> database versions
    models: list[str] = field(default_factory=list)  # Hugging Face ids it bundles a config.json for


def find_python() -> str | None:
    """The Python to run the worker with: the pinned venv (or one named by environment), else our own."""
    if python := paths.aic_python():
        return str(python)
    return sys.executable if importlib.util.find_spec("aiconfigurator") else None


class AicRunner:
    """Asks AIConfigurator through its worker. `python`: None finds it (find_python)."""

    def __init__(self, python: str | None = None, timeout_s: float = TIMEOUT_S):
        self.python = python or find_python()
        self.timeout_s = timeout_s

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.python is None:
            raise CannotEstimate(f"AIConfigurator is not installed (pip install 'autotuner[aiconfigurator]', or "
                                 f"aiconfigurator=={paths.AIC_VERSION} into {paths.aic_venv()})")
        try:
            done = subprocess.run([self.python, str(WORKER)], input=json.dumps(request), capture_output=True,
                                  text=True, timeout=self.timeout_s)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise CannotEstimate(f"AIConfigurator did not answer ({type(e).__name__}: {e})") from None
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise CannotEstimate(f"AIConfigurator failed: {last[:200]}")
        answer: dict[str, Any] = json.loads(done.stdout)
        return answer

    def describe(self) -> Coverage:
        d = self._ask({"op": "describe"})
        return Coverage(version=d["version"], systems=d["systems"], models=d["models"])

    def covered(self, model: str, system: str, backend: str, backend_versions: Sequence[str]) -> str | None:
        """The first of `backend_versions` whose support matrix covers the model (aggregated serving)."""
        answer: str | None = self._ask({"op": "support", "model": model, "system": system, "backend": backend,
                                        "backend_versions": list(backend_versions)})["version"]
        return answer

    def estimate(self, model: str, system: str, backend: str, backend_version: str,
                 points: Sequence[dict[str, Any]]) -> list[Estimate]:
        d = self._ask({"op": "estimate", "model": model, "system": system, "backend": backend,
                       "backend_version": backend_version, "points": list(points)})
        return [Estimate(**r) for r in d["results"]]
