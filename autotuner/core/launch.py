"""One configuration of an experiment, as it is launched: the one LaunchContext and LaunchSpec builder
for trials, the dry run, the winner's exports, the report and `autotuner best`.

What differs between those callers is data, never a second builder: the port, the engine's binary, the
launcher's view of the launch (in a container: the mounted model, the container port, the image's
binary), and the secrets (their values for a trial, their names for a command written down). So the
winner's command carries the study's GPUs (vLLM's CPU build only where `hardware.gpus` is 0), its
environment, image and model path exactly as its trials were launched.

`planned` is a launch written down without a launcher: the engine's command line for a process study,
the `docker run` line the Docker launcher would run for a docker study. With a `kernels:` section every
launch also gets the environment that points it at its MoE shard's tuned kernel configs. `docker_argv` renders any study
as a container (a process study in the engine's image).

Pure: reads the experiment, never starts anything.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from autotuner.config import DockerConfig, Experiment
from autotuner.engines._base import Engine, LaunchContext, LaunchSpec
from autotuner.launchers._base import launch_context
from autotuner.launchers.docker_command import Gpus, Mount, container_context, docker_run_argv, mounts
from autotuner.stages import kernels

EXPORT_PORT = 8080  # the winner's command listens here, not on the tuner's throw-away port



def launch_spec(exp: Experiment, engine: Engine, params: Mapping[str, Any], *, port: int, binary: str | None,
                view: Callable[[LaunchContext], LaunchContext] = lambda ctx: ctx,
                secrets: Mapping[str, str] | None = None) -> LaunchSpec:
    """The engine's launch of `params`, as the server sees it through `view` (a launcher's `context`), with
    the experiment's environment (over the engine's) and `secrets` (name -> value)."""
    spec = engine.build(params, view(launch_context(exp, port=port, binary=binary)))
    # The kernel stage's tuned configs for this config's MoE shard; a folder the params name wins.
    tuned = kernels.trial_env(exp, engine, params)
    return replace(spec, env={**tuned, **spec.env, **exp.config.env}, secret_env={**spec.secret_env, **(secrets or {})})


def planned_gpus(exp: Experiment, engine: Engine, params: Mapping[str, Any], settings: DockerConfig) -> Gpus:
    """The GPUs of one launch on a node of its own: on a GPU experiment as many as the config needs (what
    the pool leases a trial: TP x PP x DP, or every declared GPU), else the docker section's."""
    if exp.config.hardware.gpus:
        return engine.gpus_needed(params, exp.config.engine_args) or exp.config.hardware.gpus
    return settings.gpus


@dataclass(frozen=True)
class Launch:
    """A launch written down: its spec as the server sees it, and its `docker run` argv when the study
    runs its engine in a container."""

    spec: LaunchSpec
    docker: list[str] | None = None

    @property
    def command(self) -> str:
        """What starts the same server where the study ran it (secrets by name only)."""
        return shlex.join(self.docker) if self.docker else self.spec.command_line()


def planned(exp: Experiment, engine: Engine, params: Mapping[str, Any], *, port: int, binary: str | None,
            host_port: int | None = None) -> Launch:
    """`params` launched as the study launches them: the host command (launcher process) on `port`, or
    the Docker launcher's `docker run` line, published at `host_port` (None: a port the daemon picks)."""
    if exp.config.launcher == "docker" and exp.config.docker is not None:
        c = in_container(exp, engine, params, port=port)
        return Launch(c.spec, docker_run_argv(c.settings, c.mounted, c.spec, gpus=c.gpus, host_port=host_port))
    return Launch(launch_spec(exp, engine, params, port=port, binary=binary, secrets=_secret_names(exp)))


@dataclass(frozen=True)
class InContainer:
    """A launch in the engine's image, as the pieces a container runtime needs (docker run, Kubernetes)."""

    settings: DockerConfig
    mounted: list[Mount]
    spec: LaunchSpec  # as the server in the container sees it
    gpus: Gpus


def in_container(exp: Experiment, engine: Engine, params: Mapping[str, Any], *, port: int,
                 image: str | None = None, version: str = "latest") -> InContainer:
    """`params` in a container: a docker study's exactly as its launcher runs it (`image` replacing its
    image); a process study's in `image`, else the engine's (its spec's, else the adapter's default_image)."""
    settings = exp.config.docker if exp.config.launcher == "docker" else None
    if settings is None:
        engine_image = engine.build(params, launch_context(exp, port=port, binary=None)).image
        default = engine_image or engine.default_image.format(
            version=image_tag(version), engine=engine.name)
        # PyTorch's workers share tensors through /dev/shm, which Docker limits to 64 MB otherwise.
        settings = DockerConfig(image=default, ipc_host=exp.config.hardware.gpus > 0)
    settings = settings.model_copy(update={"image": image}) if image else settings
    mounted = mounts(settings, exp.model_path, exp.source.parent)
    spec = launch_spec(exp, engine, params, port=port, binary=None, secrets=_secret_names(exp),
                       view=lambda ctx: container_context(settings, mounted, ctx))
    return InContainer(settings, mounted, spec, planned_gpus(exp, engine, params, settings))


def docker_argv(exp: Experiment, engine: Engine, params: Mapping[str, Any], *, host_port: int,
                image: str | None = None, version: str = "latest") -> list[str]:
    """`docker run` for `params` (see `in_container`), published on `host_port`."""
    c = in_container(exp, engine, params, port=host_port, image=image, version=version)
    return docker_run_argv(c.settings, c.mounted, c.spec, gpus=c.gpus, host_port=host_port)


def image_tag(version: str) -> str:
    """An image tag from an engine version: '0.5.0-dev+0c1e570' -> '0.5.0-dev-0c1e570'."""
    tag = "".join(c if c.isalnum() or c in "._-" else "-" for c in version)
    return tag.strip(".-")[:128] or "latest"


def _secret_names(exp: Experiment) -> dict[str, str]:
    # A command written down names its secrets and never holds their values (LaunchSpec.command_line).
    return dict.fromkeys(exp.config.secret_env, "")
