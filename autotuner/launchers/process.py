"""Run an engine as a local process on a loopback port.

Each server runs in its own process group (so stop reaches its children) and is told by the kernel to
die with the tuner (PR_SET_PDEATHSIG), so even a SIGKILLed tuner leaves no engine behind on Linux. A
pidfile per server, tagged with the study's labels, lets `reap` find leftovers anyway (other OSes, a
tuner killed between fork and exec, a child that outlived its server: its session's processes, from
/proc). Never runs through a shell.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from autotuner.engines._base import LaunchContext, LaunchSpec
from autotuner.launchers._base import (
    EngineExited,
    Handle,
    PortTaken,
    gpu_env,
    owner_alive,
    process_start_time,
    tail,
    this_owner,
    wait_healthy,
)
from autotuner.launchers.procfs import listening_inodes, session_listens, session_members
from autotuner.util.parent_death import signal_on_parent_death

_STOP_GRACE_S = 10.0
_FAILURE_TAIL_LINES = 120  # enough to reach the telling line above a crash dump


def _die_with_parent() -> None:  # runs in the child between fork and exec
    signal_on_parent_death(signal.SIGKILL)


def _child_setup(cpu_ids: tuple[int, ...]) -> Callable[[], None]:
    def setup() -> None:
        _die_with_parent()
        if cpu_ids:  # the cores the pool leased: the server and every thread it starts stay on them
            os.sched_setaffinity(0, cpu_ids)
    return setup


class ProcessLauncher:
    """Starts LaunchSpecs as local processes; keeps a pidfile per server under `state_dir`."""

    def __init__(self, state_dir: Path, owner: str | None = None):
        self.state_dir = state_dir
        self.owner = owner or this_owner()

    def context(self, host: LaunchContext) -> LaunchContext:
        return host  # the server sees the host as the tuner does

    def start(self, spec: LaunchSpec, log_path: Path, labels: dict[str, str]) -> Handle:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        if spec.cache_dir:
            Path(spec.cache_dir).mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log:
            proc = subprocess.Popen(
                spec.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, **spec.log_env, **spec.cache_environment(spec.cache_dir or ""), **spec.env,
                     **gpu_env(spec.gpu_ids), **spec.secret_env},
                start_new_session=True, preexec_fn=_child_setup(spec.cpu_ids), cwd=spec.workdir,
            )
        self.state_dir.mkdir(parents=True, exist_ok=True)
        pidfile = self.state_dir / f"{proc.pid}.json"
        pidfile.write_text(json.dumps({"pid": proc.pid, "start": process_start_time(proc.pid), "labels": labels,
                                       "argv0": spec.argv[0], "owner": self.owner}))
        return Handle(spec=spec, base_url=f"http://127.0.0.1:{spec.port}", log_path=log_path, pid=proc.pid,
                      info={"popen": proc, "pidfile": pidfile})

    def is_running(self, handle: Handle) -> bool:
        return handle.info["popen"].poll() is None

    def wait_ready(self, handle: Handle, timeout_s: float) -> None:
        proc: subprocess.Popen = handle.info["popen"]

        port = handle.spec.port
        taken = f"another program listens on port {port}, the one the server was given"

        def check() -> None:
            if (code := proc.poll()) is not None:
                # Gone, and yet another program listens there (not a child of its own): its bind failed.
                if listening_inodes(port) and session_listens(proc.pid, port) is False:
                    raise PortTaken(f"{taken} (the server exited with code {code})", tail(handle.log_path))
                raise EngineExited(f"server exited with code {code} while starting", code,
                                   tail(handle.log_path, _FAILURE_TAIL_LINES))

        wait_healthy(handle.base_url + handle.spec.health_path, timeout_s, check=check,
                     log_tail=lambda: tail(handle.log_path, _FAILURE_TAIL_LINES))
        # The answer must be the server's own: measuring another program's would crown it.
        if session_listens(proc.pid, port) is False:
            raise PortTaken(f"{taken}: it answered the health check", tail(handle.log_path))

    def logs(self, handle: Handle, lines: int = 40) -> str:
        return tail(handle.log_path, lines)

    def stop(self, handle: Handle) -> None:
        proc: subprocess.Popen = handle.info["popen"]
        if proc.poll() is None:
            _kill_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid, signal.SIGKILL)
                proc.wait()
        # Children of the server die with its group; reap any that outlived a server killed by a signal.
        _kill_group(proc.pid, signal.SIGKILL)
        handle.info["pidfile"].unlink(missing_ok=True)

    def reap(self, labels: dict[str, str]) -> list[str]:
        """Kill servers with these labels whose tuner is gone but that still run; return their PIDs."""
        reaped = []
        for pidfile in sorted(self.state_dir.glob("*.json")) if self.state_dir.is_dir() else []:
            try:
                entry = json.loads(pidfile.read_text())
            except (OSError, ValueError):
                continue
            if any(entry.get("labels", {}).get(k) != v for k, v in labels.items()):
                continue
            if owner_alive(entry.get("owner")):
                continue  # its tuner still runs (another worker on this study): not a leftover
            pid = entry["pid"]
            if entry.get("start") and process_start_time(pid) == entry["start"]:
                _kill_group(pid, signal.SIGKILL)
                reaped.append(str(pid))
            elif left := session_members(pid):  # the server died (with its tuner); a child of it lives on
                for member in left:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(member, signal.SIGKILL)
                reaped.append(str(pid))
            pidfile.unlink(missing_ok=True)
        return reaped


def _kill_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
