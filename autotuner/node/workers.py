"""`autotuner run --parallel N`: N worker processes on one study, side by side on this node.

Each worker is the same `autotuner run` with `--worker wK` and its share of the trials; the study's storage
coordinates them (Optuna hands each trial to one worker, the sampler sees the running ones) and the device
pool gives each trial its own GPUs or cores. Workers run in their own sessions, so a Ctrl-C reaches them
through this process, once per press: the first lets every worker finish its measurement, the second stops
them at once. They get SIGTERM when this process dies.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable, Sequence

from autotuner.util.parent_death import signal_on_parent_death


def split(trials: int, workers: int) -> list[int]:
    """Trials per worker: as even as it gets, the first workers take the remainder."""
    return [trials // workers + (i < trials % workers) for i in range(workers)]


def _term_with_parent() -> None:  # in the worker, between fork and exec
    signal_on_parent_death(signal.SIGTERM)


def exit_code(codes: Sequence[int]) -> int:
    """The run's exit code from the workers': 0 when all succeeded; 130 when every failure was an
    interruption (Ctrl-C, SIGTERM); else the worst. A worker killed by a signal counts as 128 + signal."""
    failed = [128 - c if c < 0 else c for c in codes if c]
    if not failed:
        return 0
    interrupted = {130, 128 + signal.SIGINT, 128 + signal.SIGTERM}
    return 130 if all(c in interrupted for c in failed) else max(c for c in failed if c not in interrupted)


def run_workers(argv: Callable[[str, int], Sequence[str]], trials: int, workers: int,
                note: Callable[[str], None]) -> int:
    """Run the workers to the end; their exit code (130 when interrupted, else the worst)."""
    shares = [(f"w{i + 1}", n) for i, n in enumerate(split(trials, workers)) if n]
    note(f"{len(shares)} workers on one study: " + ", ".join(f"{name} runs {n} trial(s)" for name, n in shares))
    procs: list[subprocess.Popen] = []
    received: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}  # before any worker runs
    try:
        for name, n in shares:
            if received:  # stopped while starting them: the rest never start
                break
            procs.append(subprocess.Popen(list(argv(name, n)), start_new_session=True, preexec_fn=_term_with_parent))
        codes = [p.wait() for p in procs]
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 130 if received and not procs else exit_code(codes)
