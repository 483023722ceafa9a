"""`--parallel`: how trials are shared among the workers, and that a signal to the parent reaches them."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from autotuner.node.workers import run_workers, split


def test_trials_are_split_as_evenly_as_they_go():
    assert split(9, 3) == [3, 3, 3]
    assert split(10, 3) == [4, 3, 3]
    assert split(2, 3) == [1, 1, 0]  # a worker with nothing to do is not started


def test_a_sigterm_to_the_parent_reaches_every_worker_and_their_codes_come_back(tmp_path):
    # Each worker exits 130 on SIGTERM (as the tuner does after stopping its engine).
    code = ("import signal, sys, time, pathlib; "
            "signal.signal(signal.SIGTERM, lambda *a: sys.exit(130)); "
            f"pathlib.Path({str(tmp_path)!r}, sys.argv[1]).touch(); time.sleep(60)")
    notes: list[str] = []
    before = signal.getsignal(signal.SIGTERM)

    def stop_once_both_run() -> None:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=stop_once_both_run, daemon=True).start()
    t = time.monotonic()
    result = run_workers(lambda name, n: [sys.executable, "-c", code, name], 5, 2, notes.append)
    assert result == 130 and time.monotonic() - t < 60
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w1", "w2"]
    assert notes == ["2 workers on one study: w1 runs 3 trial(s), w2 runs 2 trial(s)"]
    assert signal.getsignal(signal.SIGTERM) == before  # the parent's own handler is back


def test_the_runs_exit_code_from_the_workers():
    from autotuner.node.workers import exit_code

    assert exit_code([0, 0, 0]) == 0
    assert exit_code([0, 130, -signal.SIGTERM]) == 130  # interrupted, however each one ended
    assert exit_code([0, -signal.SIGKILL]) == 128 + signal.SIGKILL  # a worker killed (OOM) is a failure
    assert exit_code([130, 2]) == 2  # a real failure beats an interruption
