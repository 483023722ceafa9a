"""`autotuner run --dry-run`: the first N configs a study would try, as the exact commands it would launch.

Samples like a real run (the baseline first, then the experiment's `enqueue` list, then the study's
sampler with its seed) from a throw-away in-memory study, and for each config prints either the launch
command — the `docker run` line when the launcher is docker, the environment and argv otherwise — or
the rules it breaks (`infeasible`), exactly as the tuner would check them. Nothing is started, and the
experiment's own study storage, MLflow store and results folder are not touched, so a GPU experiment can
be inspected on a machine without GPUs or the model. (A real run learns from measured results, so its
samples after the first few differ.)
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable

import optuna
from optuna.trial import TrialState

from autotuner.advisors import StudySoFar, complete, engine_rules
from autotuner.advisors.aic_runner import CannotEstimate
from autotuner.advisors.performance_model import PerformanceModel, performance_model
from autotuner.config import Experiment
from autotuner.config.feasibility import feasibility_context, workload_shape
from autotuner.config.space import SearchSpace
from autotuner.core.launch import planned
from autotuner.core.study import make_sampler, startup_trials
from autotuner.engines._base import Engine, value_text
from autotuner.launchers._base import env_words, gpu_env
from autotuner.workloads.source import shape_lines

DRY_RUN_PORT = 8000


def dry_run(exp: Experiment, engine: Engine, n: int, echo: Callable[[str], None], binary: str | None = None) -> int:
    """Print the first `n` sampled configs of `exp`; returns how many of them were infeasible."""
    cfg = exp.config
    space = SearchSpace(exp.space)
    source = cfg.workload.source(exp.source.parent, cfg.load.max_steps)
    facts = feasibility_context(exp, source)
    known = [k for k in ("num_attention_heads", "num_key_value_heads", "num_hidden_layers", "num_experts")
             if k in facts]
    echo(f"# dry run of {exp.source}: engine {cfg.engine}, launcher {cfg.launcher}, {cfg.hardware.gpus} GPU(s); "
         f"first {n} configs of study '{cfg.study_name}' ({cfg.study.sampler}, seed {cfg.study.seed})")
    if known:
        echo("# model facts from config.json: " + ", ".join(f"{k}={facts[k]}" for k in known))
    else:
        echo(f"# no config.json at {exp.model_path}: rules on heads, layers and experts are not checked")
    footprint = None
    if cfg.executor == "ray":
        from autotuner.models.facts import host_footprint

        footprint = host_footprint(exp.model_path)
        echo(f"# executor ray: each trial a Ray task on one node of the cluster at {cfg.ray.address or 'RAY_ADDRESS'} "
             "(the engine and its load generator there); what each asks is below")
    echo(f"# workload: {cfg.workload.describe()}")
    for line in shape_lines(workload_shape(exp, source)):
        echo(f"#   {line}")
    for entry in cfg.advisors:
        if not isinstance(entry, str):  # a language model: asked during the study, never by a dry run
            echo(f"# advisor llm: {entry.llm.model} at {entry.llm.base_url} ({entry.llm.api}), asked whenever the "
                 "queue is empty; its proposals are checked against the space before any launch")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(directions=cfg.objective.all_directions,
                                sampler=make_sampler(cfg.study.sampler, cfg.study.seed, startup_trials(n)))
    if cfg.study.baseline:
        study.enqueue_trial({}, user_attrs={"baseline": True})
    for params in cfg.enqueue:
        study.enqueue_trial(dict(params), user_attrs={"enqueued": True})
    so_far = StudySoFar(trials=[], space=space, load_key=cfg.load.kind, max_load=cfg.load.max_load,
                        cpus=cfg.hardware.cpus or os.cpu_count() or 1, gpus=cfg.hardware.gpus,
                        metric=cfg.objective.metric, direction=cfg.objective.direction, defaults=engine.defaults(),
                        workload=facts)
    model = _performance_model(exp, engine, echo)
    # What the advisors start from, in the experiment's order (earlier studies: the storage is not read).
    for entry in cfg.advisors:
        proposals = engine_rules.advise(engine, so_far) if entry == "engine" else \
            model.propose(so_far) if entry == "performance-model" and model else []
        for p in proposals:
            study.enqueue_trial(complete(p.params, space, so_far.defaults), user_attrs={"proposed_by": entry,
                                                                                        "reason": p.reason})
    rows = []
    for _ in range(n):
        trial = study.ask()
        baseline = bool(trial.user_attrs.get("baseline"))
        params = {} if baseline else space.suggest(trial)
        rows.append((trial, params, space.broken_constraints(params) + engine.infeasible(params, facts)))
        # Failed trials teach the sampler nothing: it samples as it would before any result came in.
        study.tell(trial, state=TrialState.FAIL)
    predicted = model.predict([p for _, p, _ in rows]) if model else [None] * len(rows)
    infeasible = 0
    for (trial, params, broken), guess in zip(rows, predicted, strict=True):
        title = "baseline: engine defaults" if trial.user_attrs.get("baseline") else \
            " ".join(f"{k}={_show(v)}" for k, v in params.items())
        echo("")
        echo(f"# trial {trial.number}: {title or '(defaults)'}")
        if trial.user_attrs.get("proposed_by"):
            echo(f"#   by {trial.user_attrs['proposed_by']}: {trial.user_attrs['reason']}")
        if broken:
            infeasible += 1
            for rule in broken:
                echo(f"#   infeasible: {rule}")
        else:  # the trial's launch, the Docker launcher's host port left to the daemon as in a trial
            if guess and model and trial.user_attrs.get("proposed_by") != "performance-model":
                echo(f"#   {model.reason(guess)}")
            if cfg.executor == "ray":
                from autotuner.executors.placement import config_need, spread_refused

                want = config_need(engine, cfg, params, [], footprint)
                # No cluster is joined here: where no node holds it, the launch spreads or is infeasible.
                wider = (f" (on a cluster whose nodes have fewer GPUs: spread over nodes, {engine.name}'s Ray "
                         "backend)" if want.gpus > 1 and spread_refused(engine, cfg) is None else "")
                echo(f"#   on Ray: asks {want.describe()}{wider}")
            echo(planned(exp, engine, params, port=DRY_RUN_PORT, binary=binary).command)
    echo("")
    echo(f"# {n - infeasible} launchable, {infeasible} infeasible (an infeasible config costs no launch)")
    return infeasible


def _performance_model(exp: Experiment, engine: Engine, echo: Callable[[str], None]) -> PerformanceModel | None:
    """The performance-model advisor when the experiment lists it and it can estimate; else None (said why)."""
    if "performance-model" not in exp.config.advisors:
        return None
    model = performance_model(exp, engine, None, None)  # the GPU: hardware.gpu_system (a dry run may run anywhere)
    try:
        echo(f"# advisor performance-model: predictions by {model.label}, a prior, not a measurement")
    except CannotEstimate as e:
        echo(f"# advisor performance-model steps aside: {e}")
        return None
    return model


def _show(value: object) -> str:
    return shlex.quote(value) if isinstance(value, str) else value_text(value)



def preflight_plan(exp: Experiment, gpus: list[int], binary: str | None, echo: Callable[[str], None]) -> None:
    """The GPU preflight's commands as a real run would start them: in a container of the image (GPUs
    as the trials get them, no network), or on the host confined to the GPUs."""
    from autotuner.node.gpu_preflight import host_python, plan_lines, probes

    cfg = exp.config
    ids = ",".join(map(str, gpus))
    on_ray = cfg.executor == "ray"  # each GPU node's check holds that node's GPUs, as Ray hands them out
    if cfg.launcher == "docker" and cfg.docker is not None:
        image = cfg.docker.image

        def render(argv: tuple[str, ...]) -> str:
            return shlex.join(["docker", "run", "--rm", "--init", "--network", "none", "--gpus", f'"device={ids}"',
                               "--entrypoint", argv[0], image, *argv[1:]])
        where = f"in image {image}"
        argvs = {p.name: p.argv for p in probes("python3")}
    else:
        def render(argv: tuple[str, ...]) -> str:
            return ("" if on_ray else env_words(gpu_env(gpus))) + shlex.join(argv)
        where = "on this host"
        argvs = {p.name: p.argv for p in probes(host_python(binary))}
    if on_ray:
        node = "each node of the Ray cluster with GPUs, all of them"
        where = f"on {node}" if where == "on this host" else f"{where}, on {node}"
    for line in plan_lines(where, lambda probe: render(argvs[probe.name])):
        echo(line)
