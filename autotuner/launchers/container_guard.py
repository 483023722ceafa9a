"""A guard beside each container a Docker launch creates: a small process that dies with the process that
created the container (PR_SET_PDEATHSIG) and removes the container as it goes.

A container is no child of the tuner: a tuner killed with SIGKILL, or a Ray task whose node's raylet died,
would leave its engine running, holding GPUs, until the study's next launch there reaps it by label. The
guard ends it at once. `dismiss` ends the guard without a word (SIGKILL: no handler runs) before the
launcher stops the container itself, with its graceful timeout.

Run as `python -m autotuner.launchers.container_guard CONTAINER_ID PARENT_PID`; it reads the daemon's
address as the launcher did (DOCKER_HOST, inherited).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import NoReturn

from autotuner.util.parent_death import SUPPORTED, signal_on_parent_death


def _on_parent_death() -> None:  # runs in the child between fork and exec
    # Blocked until the guard's handler is in place (the mask survives exec): a parent that dies while the
    # guard is still starting leaves the signal pending, not the guard killed with the container left.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    signal_on_parent_death(signal.SIGTERM)  # SIGTERM, not SIGKILL: the guard acts on it


def guard(container_id: str) -> subprocess.Popen[bytes] | None:
    """Start the guard of `container_id` (None where the platform cannot tie it to this process)."""
    if not SUPPORTED:
        return None
    return subprocess.Popen([sys.executable, "-m", __name__, container_id, str(os.getpid())],
                            preexec_fn=_on_parent_death, start_new_session=True,  # not the terminal's Ctrl-C
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def dismiss(process: subprocess.Popen[bytes] | None) -> None:
    """End a guard without removing its container (the launcher stops that itself)."""
    if process is not None and process.poll() is None:
        process.kill()
        process.wait()


def _remove(container_id: str) -> NoReturn:
    import docker
    from docker.errors import DockerException

    try:
        docker.from_env().containers.get(container_id).remove(force=True)
    except DockerException:  # gone already, or no daemon to ask: nothing more this process can do
        pass
    os._exit(0)


def main(argv: list[str]) -> None:
    container_id, parent = argv[0], int(argv[1])
    signal.signal(signal.SIGTERM, lambda *_: _remove(container_id))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # one sent meanwhile is handled now
    if os.getppid() != parent:  # the parent died before the guard could be told of it
        _remove(container_id)
    while True:
        signal.pause()


if __name__ == "__main__":
    main(sys.argv[1:])
