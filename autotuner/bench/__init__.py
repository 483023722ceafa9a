"""The load generator: the streaming client and its HTTP transport, metric math and load levels.

Importing this package is cheap (httpx only); nothing here starts a server or touches the network.
"""

from autotuner.bench.client import RequestRecord, make_client, stream_request
from autotuner.bench.metrics import LatencyStats, LevelResult
from autotuner.bench.runner import format_level, run_level, run_level_sync
from autotuner.bench.transport import LoadgenTransport

__all__ = [
    "LatencyStats",
    "LevelResult",
    "LoadgenTransport",
    "RequestRecord",
    "format_level",
    "make_client",
    "run_level",
    "run_level_sync",
    "stream_request",
]
