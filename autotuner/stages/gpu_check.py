"""The GPU preflight as a stage: the probes of `node/gpu_preflight.py` run where the engine will run (in
its image through the Docker launcher, else on the host with the python beside its binary), once before
the first trial. A fault stops the study there (ConfigError, exit 2); what the probes saw is said.

On a Ray cluster the same check runs on each node that declares GPUs, holding all of them
(`executors/ray_nodes.py: on_each_node`), so a node with a broken driver stops the study before its first trial
instead of failing every trial Ray sends there.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, cast

from autotuner.config import ConfigError, Experiment
from autotuner.node import gpu_preflight as gp

if TYPE_CHECKING:
    from autotuner.launchers._base import Launcher
    from autotuner.launchers.docker import DockerLauncher


def where(exp: Experiment) -> str:
    cfg = exp.config
    return f"in image {cfg.docker.image if cfg.docker else '?'}" if cfg.launcher == "docker" else "on this host"


def run(exp: Experiment, launcher: Launcher, binary: str | None, gpus: Sequence[int],
        needed: int | None = None) -> tuple[str, gp.Verdict]:
    """Where the probes ran, and their verdict on `gpus` (`needed`: how many must work, else the
    experiment's hardware.gpus)."""
    cfg = exp.config
    if cfg.launcher == "docker":
        labels = {"autotuner.study": cfg.study_name, "autotuner.role": "preflight"}

        def probe(p: gp.Probe) -> gp.ProbeResult:
            return gp.ProbeResult(p, *cast("DockerLauncher", launcher).run_once(list(p.argv), list(gpus), labels))
        python = "python3"
    else:
        python = gp.host_python(binary)

        def probe(p: gp.Probe) -> gp.ProbeResult:
            return gp.run_on_host(p, gpus, os.environ)
    return where(exp), gp.check(probe, cfg.hardware.gpus if needed is None else needed, python)


def before_first_trial(exp: Experiment, launcher: Launcher, binary: str | None, gpus: Sequence[int],
                       say: Callable[[str], None]) -> None:
    """The check on this machine's `gpus`: a fault raises ConfigError with its fix; else the facts are said."""
    say(f"GPU preflight {where(exp)}, GPU(s) {','.join(map(str, gpus))} ...")
    ran, verdict = run(exp, launcher, binary, gpus)
    if verdict.problems:
        raise ConfigError(gp.failure_text(verdict, ran))
    for fact in verdict.facts:
        say(f"  {fact}")


def on_node(exp: Experiment, binary: str | None, gpus: list[int]) -> tuple[str, gp.Verdict]:
    """A Ray node's check (run there as a task holding the node's `gpus`): each GPU Ray hands out must work."""
    from autotuner.launchers import make_launcher

    return run(exp, make_launcher(exp), binary, gpus, needed=len(gpus))
