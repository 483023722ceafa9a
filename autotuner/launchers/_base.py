"""The launcher seam: run a LaunchSpec, say when it is ready, hand over its logs, stop it.

Contract every launcher keeps (one conformance suite runs over all of them):
- `context` turns the tuner's host view of a launch (model path, port, binary) into the one the server
  sees, before the engine adapter builds the spec: identity for a local process; for a container the
  model under its mount point, the container's port, the image's binary. Adapters stay unaware.
- `start` returns at once; a server that cannot even be started raises `LaunchError`, leaving nothing
  behind. Readiness is `wait_ready`, which also watches the server: an exit while starting raises
  `EngineExited` within a second, not at the timeout.
- `stop` is safe to call twice and on a server that already died.
- `reap` removes what a killed tuner left behind for one study, and nothing else.
- `Handle.tags` and `Handle.artifacts` are what the tracker records for the launch (a container's image
  and id, the `docker run` line that reproduces it).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

from autotuner.config import Experiment
from autotuner.engines._base import LaunchContext, LaunchSpec


class NotReady(Exception):
    """The server does not answer yet (a launcher's liveness check may raise it to skip the probe)."""


def wait_healthy(url: str, timeout_s: float, *, check: Callable[[], None], log_tail: Callable[[], str],
                 poll_s: float = 0.1) -> None:
    """Poll `url` until it answers 200. Before each probe `check()` raises EngineExited when the server
    is gone (so an exit fails at once, not at the timeout) or NotReady when it cannot be reached yet.
    Raises StartupTimeout, with `log_tail()`, after `timeout_s`."""
    def probe(client: httpx.Client) -> None:
        check()
        try:
            if client.get(url).status_code == 200:
                return
        except httpx.TransportError:
            pass
        raise NotReady

    with httpx.Client(timeout=2.0, trust_env=False) as client:
        try:
            for attempt in Retrying(stop=stop_after_delay(timeout_s), wait=wait_fixed(poll_s),
                                    retry=retry_if_exception_type(NotReady)):
                with attempt:
                    probe(client)
        except RetryError:
            raise StartupTimeout(f"server not ready after {timeout_s:g} s", log_tail()) from None


class LaunchError(Exception):
    """The server did not come up. `failure_class` says how; `log_tail` shows the server's last words."""

    failure_class = "launch-failed"

    def __init__(self, message: str, log_tail: str = ""):
        super().__init__(message)
        self.log_tail = log_tail


class EngineExited(LaunchError):
    failure_class = "exited-at-start"

    def __init__(self, message: str, exit_code: int | None, log_tail: str = "", oom_killed: bool = False):
        super().__init__(message, log_tail)
        self.exit_code = exit_code
        self.oom_killed = oom_killed
        if oom_killed:  # the kernel's OOM killer leaves no line in the server's own log
            self.failure_class = "oom"


class StartupTimeout(LaunchError):
    failure_class = "startup-timeout"


class PortTaken(LaunchError):
    """Another program answers on the launch's port (taken between choosing it and the server's bind)."""

    failure_class = "port-taken"


@dataclass
class Handle:
    """A started server: where to reach it and how to find it again."""

    spec: LaunchSpec
    base_url: str
    log_path: Path
    pid: int | None = None
    container_id: str | None = None
    info: dict[str, Any] = field(default_factory=dict)  # the launcher's own state
    tags: dict[str, str] = field(default_factory=dict)  # recorded with the trial (MLflow tags)
    artifacts: dict[str, str] = field(default_factory=dict)  # file name -> text, recorded with the trial


class Launcher(Protocol):
    def context(self, host: LaunchContext) -> LaunchContext: ...
    def start(self, spec: LaunchSpec, log_path: Path, labels: dict[str, str]) -> Handle: ...
    def wait_ready(self, handle: Handle, timeout_s: float) -> None: ...
    def is_running(self, handle: Handle) -> bool: ...
    def logs(self, handle: Handle, lines: int = 40) -> str: ...
    def stop(self, handle: Handle) -> None: ...
    def reap(self, labels: dict[str, str]) -> list[str]: ...


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the OS picks it; a short race with other programs remains)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def gpu_env(gpu_ids: Sequence[int]) -> dict[str, str]:
    """What confines a process to `gpu_ids`, nvidia-smi's indices: CUDA numbers GPUs the same way only in
    PCI bus order (its default puts the fastest first, which differs on a box of mixed GPUs)."""
    if not gpu_ids:
        return {}
    return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpu_ids))}


def env_words(env: dict[str, str]) -> str:
    """`env` as the words in front of a shell command ("" for none)."""
    return "".join(f"{k}={v} " for k, v in env.items())


def tail(path: Path, lines: int = 40) -> str:
    """The last lines of a log file, without reading a large file whole."""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def this_owner() -> str:
    """Who starts engines here: host, PID and the process's start time (a reused PID is not us)."""
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{process_start_time(pid)}"


def owner_alive(owner: str | None) -> bool:
    """Whether the tuner that started an engine still runs (only knowable on this host)."""
    if not owner:
        return False
    host, _, rest = owner.partition(":")
    pid, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another host's worker: not ours to judge
    return process_start_time(int(pid)) == start


def process_start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot, or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def launch_context(exp: Experiment, *, port: int, binary: str | None) -> LaunchContext:
    """The launch as the tuner's host sees it: the model, the served name, the port, the engine's binary,
    and the experiment's fixed engine_args, GPUs and environment."""
    cfg = exp.config
    return LaunchContext(model_path=exp.model_path, served_model_name=cfg.model.name, port=port, binary=binary,
                         extra_args=tuple(cfg.engine_args), gpus=cfg.hardware.gpus, extra_env=tuple(cfg.env.items()))
