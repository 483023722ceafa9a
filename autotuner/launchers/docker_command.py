"""A launch in a container, on paper: the mounts, how the server sees the launch from inside, its
environment, and the one `docker run` line for it.

Pure: never reaches a daemon. The Docker launcher starts its containers from these same answers, and the
dry run, the winner's exports and the launcher's own `docker-run.txt` all render their `docker run` line
with `docker_run_argv`, so a line a user pastes starts what the study started: same image, entrypoint
(the spec's argv[0], whatever the image's own entrypoint is), environment, GPUs, mounts and limits.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path, PurePosixPath

from autotuner.config import DockerConfig
from autotuner.engines._base import LaunchContext, LaunchSpec

Mount = tuple[Path, PurePosixPath, bool]  # host source, container target, read-only
Gpus = str | int | Sequence[int | str] | None  # docker.gpus: "all", a count, device ids; None: no GPU

# A model path that is not on this machine (a GPU experiment read on a laptop) is a file only when it has
# a known weights suffix: model folders are often named with dots (Llama-3.1-8B).
MODEL_FILE_SUFFIXES = (".gguf", ".safetensors", ".bin", ".pt", ".pth")


def is_model_folder(path: Path) -> bool:
    return path.is_dir() or (not path.exists() and path.suffix.lower() not in MODEL_FILE_SUFFIXES)


def mounts(settings: DockerConfig, model_path: Path | None, base_dir: Path = Path(".")) -> list[Mount]:
    """The model first, read-only under `settings.model_dir` (a folder whole, a file with its folder, so that
    split GGUFs and tokenizers beside it come along), then `settings.volumes` (relative to `base_dir`)."""
    found: list[Mount] = []
    if model_path is not None:
        model = model_path.resolve()
        root = PurePosixPath(settings.model_dir)
        found.append((model, root / model.name, True) if is_model_folder(model) else (model.parent, root, True))
    for v in settings.volumes:
        found.append(((base_dir / v.host).resolve(), PurePosixPath(v.container), v.read_only))
    return found


def container_path(mounted: Sequence[Mount], path: Path) -> Path:
    """Where a host path is inside the container; a path under no mount is taken as the image's own."""
    resolved = path.resolve()
    for source, target, _ in mounted:
        if resolved == source or source in resolved.parents:
            return Path(target / resolved.relative_to(source))
    return path


def container_context(settings: DockerConfig, mounted: Sequence[Mount], host: LaunchContext) -> LaunchContext:
    """The launch as the server in the container sees it: mounted model, the image's binary, and the
    container port on 0.0.0.0 (on the host's network: the host's port, loopback only)."""
    model = container_path(mounted, host.model_path)
    if settings.network_host:
        return replace(host, model_path=model, binary=settings.binary)
    return replace(host, model_path=model, host="0.0.0.0", port=settings.container_port, binary=settings.binary)


def container_gpus(spec: LaunchSpec, settings: DockerConfig) -> Gpus:
    """The GPUs a container gets: the pool's lease, else what the docker section says."""
    return list(spec.gpu_ids) or settings.gpus


def environment(spec: LaunchSpec, settings: DockerConfig) -> dict[str, str | None]:
    """The container's environment; None marks a variable passed by name only (secrets, `pass_env`): its
    value comes from the caller's environment and is never written down."""
    env: dict[str, str | None] = {**spec.log_env, **spec.env, **settings.env}
    env.update(dict.fromkeys([*spec.secret_env, *settings.pass_env]))
    return env


def docker_run_argv(settings: DockerConfig, mounted: Sequence[Mount], spec: LaunchSpec, *, gpus: Gpus,
                    host_port: int | None, image: str | None = None, name: str | None = None,
                    labels: Mapping[str, str] | None = None) -> list[str]:
    """`docker run` for `spec` (foreground, removed on exit): argv[0] is the entrypoint, the rest its
    arguments. The port is published on 127.0.0.1 at `host_port` (None: one the daemon picks), or the
    server shares the host's network. `image` overrides `settings.image`."""
    argv = ["docker", "run", "--rm", "--init"]
    if name:
        argv += ["--name", name]
    for key, value in sorted((labels or {}).items()):
        argv += ["--label", f"{key}={value}"]
    if settings.network_host:
        argv += ["--network", "host"]
    else:
        argv += ["-p", f"127.0.0.1:{host_port or ''}:{spec.port}"]
    if settings.ipc_host:
        argv += ["--ipc", "host"]
    if settings.shm_size:
        argv += ["--shm-size", settings.shm_size]
    if settings.memory:
        argv += ["--memory", settings.memory, "--memory-swap", settings.memory]
    if gpus is not None and gpus != []:
        # docker's --gpus is CSV: a list of ids needs the quotes inside the value.
        argv += ["--gpus", str(gpus) if isinstance(gpus, (str, int)) else '"device=' + ",".join(map(str, gpus)) + '"']
    if spec.cpu_ids:
        argv += ["--cpuset-cpus", ",".join(map(str, spec.cpu_ids))]
    for source, target, read_only in mounted:
        argv += ["-v", f"{source}:{target}" + (":ro" if read_only else "")]
    for name, env_value in sorted(environment(spec, settings).items()):
        argv += ["-e", name if env_value is None else f"{name}={env_value}"]
    if spec.workdir:
        argv += ["-w", spec.workdir]
    return argv + ["--stop-timeout", str(settings.stop_timeout_s), "--entrypoint", spec.argv[0],
                   image or settings.image, *spec.argv[1:]]


def docker_run_line(settings: DockerConfig, mounted: Sequence[Mount], spec: LaunchSpec, **kwargs) -> str:
    """`docker_run_argv` as one shell line a user can paste."""
    return shlex.join(docker_run_argv(settings, mounted, spec, **kwargs))
