"""The load generator: workloads, the streaming client, metric math and load levels.

Importing this package is cheap (httpx only); nothing here starts a server or touches the network.
"""

from autotuner.bench.client import LoadgenTransport, RequestRecord, make_client, stream_request
from autotuner.bench.metrics import LatencyStats, LevelResult
from autotuner.bench.runner import format_level, run_level, run_level_sync
from autotuner.workloads.synthetic import Workload, build_payloads, build_prompts

__all__ = [
    "LatencyStats",
    "LevelResult",
    "LoadgenTransport",
    "RequestRecord",
    "Workload",
    "build_payloads",
    "build_prompts",
    "format_level",
    "make_client",
    "run_level",
    "run_level_sync",
    "stream_request",
]
