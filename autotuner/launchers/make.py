"""`make_launcher`: the experiment's `launcher` name -> a launcher checked ready to start trials."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from autotuner.config import ConfigError, Experiment
from autotuner.launchers._base import Launcher

LAUNCHERS = ("process", "docker")


def make_launcher(exp: Experiment, *, state_dir: Path | None = None,
                  progress: Callable[[str], None] | None = None) -> Launcher:
    """The experiment's launcher, ready to start trials. Raises ConfigError with what to do otherwise.

    `state_dir` holds the process launcher's pidfiles (default: the user cache); `progress` receives
    lines while an image is pulled.
    """
    cfg = exp.config
    if cfg.launcher == "process":
        from autotuner.launchers.process import ProcessLauncher
        from autotuner.util import paths

        return ProcessLauncher(state_dir or paths.cache_dir() / "processes")
    if cfg.launcher == "docker":
        from autotuner.util.extras import MissingExtra, require

        try:
            require("docker", "docker", "launcher 'docker'")
        except MissingExtra as e:
            raise ConfigError(f"{exp.source}: field 'launcher': {e}") from None
        from autotuner.launchers.docker import DockerLauncher, DockerSetupError

        if cfg.docker is None:
            raise ConfigError(f"{exp.source}: field 'docker': missing: launcher 'docker' needs a docker "
                              "section naming at least the image (docker: {image: ...})")
        try:
            launcher = DockerLauncher(cfg.docker, model_path=exp.model_path, base_dir=exp.source.parent)
            launcher.prepare(progress)
        except DockerSetupError as e:
            raise ConfigError(f"{exp.source}: {e}") from None
        return launcher
    raise ConfigError(f"{exp.source}: field 'launcher': unknown launcher '{cfg.launcher}' "
                      f"(launchers: {', '.join(LAUNCHERS)})")
