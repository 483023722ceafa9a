"""Where a study's requests come from: synthetic lengths (distributions, prefix groups), datasets
(ShareGPT, JSONL), traces (Mooncake), multi-turn sessions. Each `Source` gives the warm-up and every
level requests of their own, the same in every trial; `plan.render` makes them request bodies exact in
the served model's tokens. Pure but for reading workload files: no connection, no clock, no engine.
"""

from autotuner.workloads.errors import WorkloadFileError
from autotuner.workloads.lengths import Lengths
from autotuner.workloads.plan import LevelPlan, RequestSpec, Sampling, Vocabulary, render
from autotuner.workloads.sessions import Session, SessionPlan
from autotuner.workloads.source import DatasetSource, SessionSource, Shape, Source, SyntheticSource, TraceSource

__all__ = [
    "DatasetSource",
    "Lengths",
    "LevelPlan",
    "RequestSpec",
    "Sampling",
    "Session",
    "SessionPlan",
    "SessionSource",
    "Shape",
    "Source",
    "SyntheticSource",
    "TraceSource",
    "Vocabulary",
    "WorkloadFileError",
    "render",
]
