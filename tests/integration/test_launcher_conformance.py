"""The launcher contract, checked on real processes: start, ready, logs, early exit, startup timeout,
stop twice, reap. Every launcher must pass the same suite (parametrize `launcher` to add one)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from autotuner.engines._base import LaunchSpec
from autotuner.launchers._base import EngineExited, StartupTimeout, free_port
from autotuner.launchers.process import ProcessLauncher

LABELS = {"autotuner.study": "conformance"}


@pytest.fixture
def launcher(tmp_path):
    return ProcessLauncher(tmp_path / "state")


def python_spec(code: str, port: int, health: str = "/") -> LaunchSpec:
    return LaunchSpec(argv=[sys.executable, "-u", "-c", code], port=port, served_model_name="m", health_path=health)


def http_server(port: int) -> LaunchSpec:
    return LaunchSpec(argv=[sys.executable, "-u", "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                      port=port, served_model_name="m", health_path="/")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is dead for our purposes.
    return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"


def test_start_ready_logs_stop_twice(launcher, tmp_path):
    port = free_port()
    handle = launcher.start(http_server(port), tmp_path / "server.log", LABELS)
    try:
        launcher.wait_ready(handle, timeout_s=20)
        assert launcher.is_running(handle)
        assert handle.base_url == f"http://127.0.0.1:{port}"
        assert "GET / HTTP/1.1" in launcher.logs(handle)  # the readiness probe shows in the server's log
    finally:
        launcher.stop(handle)
    assert not alive(handle.pid)
    launcher.stop(handle)  # safe twice


def test_early_exit_fails_fast_with_code_and_log_tail(launcher, tmp_path):
    spec = python_spec("import time, sys; print('loading'); time.sleep(0.3); print('fatal: no such model'); sys.exit(3)",
                       free_port())
    handle = launcher.start(spec, tmp_path / "server.log", LABELS)
    t = time.monotonic()
    with pytest.raises(EngineExited) as err:
        launcher.wait_ready(handle, timeout_s=60)
    assert time.monotonic() - t < 2.0  # not the 60 s timeout
    assert err.value.exit_code == 3
    assert "fatal: no such model" in err.value.log_tail
    launcher.stop(handle)


def test_startup_timeout_then_stop(launcher, tmp_path):
    spec = python_spec("import time; print('loading forever'); time.sleep(600)", free_port())
    handle = launcher.start(spec, tmp_path / "server.log", LABELS)
    t = time.monotonic()
    with pytest.raises(StartupTimeout, match="not ready after 1 s") as err:
        launcher.wait_ready(handle, timeout_s=1)
    assert 0.9 < time.monotonic() - t < 5
    assert "loading forever" in err.value.log_tail
    launcher.stop(handle)
    assert not alive(handle.pid)


def test_stop_reaches_children_of_the_server(launcher, tmp_path):
    code = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']);"
            "print('child', p.pid, flush=True); time.sleep(600)")
    handle = launcher.start(python_spec(code, free_port()), tmp_path / "server.log", LABELS)
    for _ in range(100):
        if "child" in launcher.logs(handle):
            break
        time.sleep(0.05)
    child = int(launcher.logs(handle).split()[-1])
    launcher.stop(handle)
    time.sleep(0.2)
    assert not alive(child)


def test_reap_kills_only_this_studys_leftovers(tmp_path):
    state = tmp_path / "state"
    ours, theirs = ProcessLauncher(state), ProcessLauncher(state)
    code = "import time; time.sleep(600)"
    a = ours.start(python_spec(code, free_port()), tmp_path / "a.log", LABELS)
    b = theirs.start(python_spec(code, free_port()), tmp_path / "b.log", {"autotuner.study": "other"})
    try:
        # While the tuner that started them lives, nothing is a leftover (another worker's engines).
        assert ProcessLauncher(state).reap(LABELS) == []
        assert alive(a.pid)
        # As after a killed tuner: the owner recorded for `a` is a process that is gone.
        import json
        import subprocess

        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        pidfile = a.info["pidfile"]
        pidfile.write_text(json.dumps({**json.loads(pidfile.read_text()), "owner": gone.pid}))
        reaped = ProcessLauncher(state).reap(LABELS)
        assert reaped == [str(a.pid)]
        a.info["popen"].wait(5)
        assert not alive(a.pid)
        assert alive(b.pid)
        assert ProcessLauncher(state).reap(LABELS) == []
    finally:
        theirs.stop(b)
        ours.stop(a)


def test_server_dies_with_a_killed_tuner(tmp_path):
    """SIGKILL of the tuner leaves no engine behind: the kernel kills it (PR_SET_PDEATHSIG)."""
    import subprocess

    script = (f"import sys, time; sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r});"
              "from pathlib import Path;"
              "from autotuner.launchers.process import ProcessLauncher;"
              "from autotuner.engines._base import LaunchSpec;"
              f"h = ProcessLauncher(Path({str(tmp_path / 'st')!r})).start(LaunchSpec([sys.executable, '-c', 'import time; time.sleep(600)'], 1, 'm'), Path({str(tmp_path / 'x.log')!r}), {{}});"
              "print(h.pid, flush=True); time.sleep(600)")
    tuner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    server_pid = int(tuner.stdout.readline())
    assert alive(server_pid)
    tuner.kill()
    tuner.wait()
    for _ in range(50):
        if not alive(server_pid):
            break
        time.sleep(0.05)
    assert not alive(server_pid)
