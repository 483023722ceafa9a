"""A LaunchSpec as a `docker run` command line: what a user pastes on a GPU machine, and what the Docker
launcher runs.

Pure: renders an argv list, never runs Docker. The server inside the container must listen on 0.0.0.0
(the spec's `--host`); its port is published on the host's loopback only.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from autotuner.engines._base import LaunchSpec


def docker_run_argv(spec: LaunchSpec, *, image: str | None = None, gpus: int = 0, volumes: Sequence[str] = (),
                    name: str | None = None, labels: Mapping[str, str] | None = None,
                    publish_host: str = "127.0.0.1", detach: bool = False) -> list[str]:
    """`docker run` for `spec`: the spec's argv[0] becomes the entrypoint, the rest its arguments.

    `image` overrides `spec.image`; `gpus` > 0 adds `--gpus N` and `--ipc=host` (PyTorch's workers share
    tensors through /dev/shm, which Docker limits to 64 MB otherwise); `volumes` are `-v` values as they
    are (host:container[:ro])."""
    image = image or spec.image
    if not image:
        raise ValueError("no image: the experiment's docker.image is unset and the engine names none")
    argv = ["docker", "run", "--rm", "--init"]
    if detach:
        argv.append("--detach")
    if name:
        argv += ["--name", name]
    for key, value in sorted((labels or {}).items()):
        argv += ["--label", f"{key}={value}"]
    if gpus > 0:
        argv += ["--gpus", str(gpus), "--ipc=host"]
    argv += ["-p", f"{publish_host}:{spec.port}:{spec.port}"]
    for volume in volumes:
        argv += ["-v", volume]
    for key, value in sorted({**spec.log_env, **spec.env}.items()):
        argv += ["-e", f"{key}={value}"]
    argv += ["--entrypoint", spec.argv[0], image, *spec.argv[1:]]
    return argv


def docker_run_line(spec: LaunchSpec, **kwargs) -> str:
    """`docker_run_argv` as one shell line a user can paste."""
    return shlex.join(docker_run_argv(spec, **kwargs))
