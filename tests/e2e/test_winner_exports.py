"""The winner of every experiment under experiments/, exported where its study ran: best-command.sh,
best-docker.sh, report.md, best.json, `autotuner best` and `autotuner report` all carry the study's GPUs,
environment, image and model path exactly as its trials were launched.

GPU studies cannot run here, so each study is a real Optuna study on SQLite holding one COMPLETE trial
of params from the experiment's own space (the feasible one needing the most GPUs), written by the real
StudyArtifacts and read back by the real CLI. What the trial ran is rebuilt the way the tuner launches
it: `autotuner.core.launch.launch_spec` through the experiment's real launcher's `context`, and for a docker
study the `docker run` line the Docker launcher records for it (`docker-run.txt`).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from autotuner.cli import app
from autotuner.config import load_experiment
from autotuner.config.feasibility import feasibility_context
from autotuner.config.space import SearchSpace
from autotuner.core import launch
from autotuner.core.resolved import experiment_from_text, resolved_experiment
from autotuner.core.study import make_sampler, open_study
from autotuner.engines._base import get_engine
from autotuner.launchers.docker import DockerLauncher
from autotuner.launchers.docker_command import container_gpus, docker_run_argv
from autotuner.launchers.process import ProcessLauncher
from autotuner.node.pool import Pool, pack
from autotuner.tracking import MlflowTracker
from autotuner.tracking.artifacts import StudyArtifacts

REPO = Path(__file__).resolve().parents[2]
EXPERIMENTS = sorted((REPO / "experiments").glob("*.yaml"))
# What a host binary was called when the study ran (process studies record it; only rendered, never run).
BINARIES = {"llamacpp": "/opt/llama.cpp/bin/llama-server", "vllm": "/opt/vllm/bin/python"}
TRIAL_PORT = 41234


def test_every_experiment_is_covered():
    assert {p.stem for p in EXPERIMENTS} >= {"glm5-nvfp4-8x-rtx-pro-6000", "vllm-h100-8b", "vllm-cpu", "quickstart",
                                             "quickstart-docker", "pareto"}


def winner_params(exp, engine) -> dict:
    """A feasible config of the experiment's space (its enqueued ones first, then sampled), the one that
    needs the most GPUs: where a launch that loses the study's GPUs shows."""
    space, facts = SearchSpace(exp.space), feasibility_context(exp)
    sampler = optuna.create_study(sampler=make_sampler("random", 0))
    for partial in exp.config.enqueue:  # the rest of an enqueued config is sampled, as in a study
        sampler.enqueue_trial(dict(partial))
    candidates = []
    for _ in range(40):
        trial = sampler.ask()
        candidates.append(space.suggest(trial))
        sampler.tell(trial, 0.0)
    feasible = [p for p in candidates if not space.broken_constraints(p) + engine.infeasible(p, facts)]
    return max(feasible, key=engine.gpus_needed)


def trial_launch(exp, engine, params, binary) -> tuple[list[str] | None, str]:
    """(the `docker run` argv the Docker launcher records, or None for a process study; the command line
    of the spec the server got), built as the tuner builds a trial's launch, on the export port."""
    cfg = exp.config
    docker = cfg.launcher == "docker"
    launcher = (DockerLauncher(cfg.docker, model_path=exp.model_path, base_dir=exp.source.parent) if docker
                else ProcessLauncher(Path("/nonexistent")))
    spec = launch.launch_spec(exp, engine, params, port=launch.EXPORT_PORT, binary=None if docker else binary,
                              view=launcher.context)
    if not docker:
        return None, spec.command_line()
    if cfg.hardware.gpus:  # GPU studies lease their GPUs from the node's pool, as trials do
        pool = Pool.of_gpus(cfg.hardware.gpus)
        spec = replace(spec, gpu_ids=pack(pool.units, set(), pool.need(engine.gpus_needed(params),
                                                                        engine.cpus_needed(params))))
    return docker_run_argv(launcher.settings, launcher.mounts, spec, gpus=container_gpus(spec, launcher.settings),
                           host_port=launch.EXPORT_PORT), spec.command_line()


def environment(argv: list[str]) -> dict[str, str]:
    """The variables a command sets: `-e K=V` of a docker run line, the leading `K=V` of a command line."""
    if argv[0] == "docker":
        pairs = [argv[i + 1] for i, a in enumerate(argv) if a == "-e"]
    else:
        pairs = argv[:next(i for i, a in enumerate(argv) if "=" not in a)]
    return dict(p.split("=", 1) for p in pairs if "=" in p)


def without_gpus(argv: list[str]) -> tuple[list[str], str | None]:
    """argv without its --gpus option, and that option's value."""
    if "--gpus" not in argv:
        return argv, None
    i = argv.index("--gpus")
    return argv[:i] + argv[i + 2:], argv[i + 1]


@pytest.fixture(scope="module")
def tracker(tmp_path_factory) -> MlflowTracker:
    """A real local MLflow store; with no study run open, the artifacts log nothing to it."""
    return MlflowTracker(root=tmp_path_factory.mktemp("mlruns"))


@pytest.fixture(scope="module", params=EXPERIMENTS, ids=lambda p: p.stem)
def study(request, tmp_path_factory, tracker):
    """A finished study of one experiment: one COMPLETE trial, the tuner's files written."""
    d = tmp_path_factory.mktemp(request.param.stem)
    exp = load_experiment(request.param)
    storage = f"sqlite:///{d / 'study.db'}"
    cfg = exp.config.model_copy(update={"study": exp.config.study.model_copy(update={"storage": storage})})
    exp = exp.model_copy(update={"config": cfg})
    engine = get_engine(cfg.engine, exp.space.env_params)
    params = winner_params(exp, engine)
    binary = None if cfg.launcher == "docker" else BINARIES[cfg.engine]
    optuna_study = open_study(cfg, n_levels=1)
    artifacts = StudyArtifacts(optuna_study, exp, engine, tracker, d / "results",
                               binary=binary, engine_version="0.32.0", environment={"engine": cfg.engine})
    artifacts.start()
    optuna_study.enqueue_trial(params)
    trial = optuna_study.ask()
    assert SearchSpace(exp.space).suggest(trial) == params
    trial.set_user_attr("engine_version", "0.32.0")
    optuna_study.tell(trial, [1000.0] * len(cfg.objective.all_directions))
    artifacts.finish()
    return {"dir": d, "exp": exp, "engine": engine, "params": params, "binary": binary, "storage": storage}


def cli(study, *args: str) -> str:
    result = CliRunner().invoke(app, [*args, "--storage", study["storage"], "--study", study["exp"].config.study_name,
                                      "--experiment", str(study["dir"] / "no-such-file.yaml")])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_every_export_of_the_winner_is_the_command_its_trial_ran(study):
    exp, engine, params = study["exp"], study["engine"], study["params"]
    docker, engine_line = trial_launch(exp, engine, params, study["binary"])
    files = study["dir"] / "results"
    command = (files / "best-command.sh").read_text().removeprefix("#!/bin/sh\nexec ").strip()
    exports = {
        "best-command.sh": command,
        "best.json": json.loads((files / "best.json").read_text())["command"],
        "report.md": (files / "report.md").read_text().split("## Run the winner\n\n```sh\n")[1].split("\n```")[0],
        "autotuner best": cli(study, "best").strip(),
        "autotuner report": json.loads(cli(study, "report", "--format", "json"))["command"],
    }
    if docker is None:  # a process study: the engine's own command line, on the export port
        assert exports == dict.fromkeys(exports, engine_line)
        return
    # A docker study: the line the Docker launcher records for the trial, with the GPU count the pool leased
    # it instead of the ids it happened to get.
    trial_argv, trial_gpus = without_gpus(docker)
    for name, text in exports.items():
        argv, gpus = without_gpus(shlex.split(text))
        assert argv == trial_argv, name
        if trial_gpus is None:
            assert gpus is None, name
        else:
            assert trial_gpus == '"device=' + ",".join(map(str, range(int(gpus)))) + '"', name
    assert (files / "best-docker.sh").read_text() == f"#!/bin/sh\nexec {command}\n"
    assert cli(study, "best", "--format", "docker").strip() == command


def test_the_exports_carry_the_studys_gpus_environment_image_and_model(study):
    exp, engine, params = study["exp"], study["engine"], study["params"]
    cfg = exp.config
    command = shlex.split(cli(study, "best"))
    docker = shlex.split((study["dir"] / "results" / "best-docker.sh").read_text().removeprefix("#!/bin/sh\nexec "))
    for argv in (command, docker):
        env = environment(argv)
        assert {k: env.get(k) for k in cfg.env} == cfg.env
        if cfg.engine == "vllm":  # vLLM's CPU build only where the experiment declares no GPU
            assert (env.get("VLLM_TARGET_DEVICE") == "cpu") == (cfg.hardware.gpus == 0)
        if cfg.engine_args:
            assert argv[-len(cfg.engine_args):] == cfg.engine_args
    gpus = docker[docker.index("--gpus") + 1] if "--gpus" in docker else None
    assert gpus == (str(engine.gpus_needed(params) or cfg.hardware.gpus) if cfg.hardware.gpus else None)
    if cfg.engine == "vllm" and engine.gpus_needed(params) > 1:
        assert "--tensor-parallel-size" in command or "--pipeline-parallel-size" in command
    model = exp.model_path.resolve()
    model_flag = "--alias" if cfg.engine == "llamacpp" else "--served-model-name"
    assert docker[docker.index(model_flag) + 1] == cfg.model.name
    path_flag = "--model-path" if cfg.engine == "sglang" else "--model"
    if cfg.launcher == "docker":
        assert command == docker  # the trial ran in a container: its command is the docker run line
        assert cfg.docker.image in docker and docker[docker.index("--entrypoint") + 2] == cfg.docker.image
        in_container = docker[docker.index(path_flag) + 1]
        mounts = [docker[i + 1] for i, a in enumerate(docker) if a == "-v"]
        assert any(in_container.startswith(m.split(":")[1]) and str(model).startswith(m.split(":")[0])
                   for m in mounts)
        for volume in cfg.docker.volumes:
            assert f"{(exp.source.parent / volume.host).resolve()}:{volume.container}:ro" in mounts
    else:
        assert command[command.index(path_flag) + 1] == str(exp.model_path)
        assert study["binary"] in command and "--port" in command
        assert command[command.index("--port") + 1] == str(launch.EXPORT_PORT)


def test_a_study_read_back_mounts_relative_volumes_where_its_trials_did(tmp_path):
    (tmp_path / "kernels").mkdir()
    text = (REPO / "experiments" / "quickstart-docker.yaml").read_text().replace(
        "../search_spaces/", f"{REPO}/search_spaces/").replace("../models/", f"{REPO}/models/")
    (tmp_path / "exp.yaml").write_text(text.replace("  stop_timeout_s: 10\n",
                                                    "  stop_timeout_s: 10\n  volumes: [{host: kernels, container: /k}]\n"))
    exp = load_experiment(tmp_path / "exp.yaml")
    read_back = experiment_from_text(resolved_experiment(exp), "study quickstart-docker in sqlite:///elsewhere.db")
    engine = get_engine("llamacpp")
    ran, exported = (launch.planned(e, engine, {}, port=launch.EXPORT_PORT, binary=None).docker for e in (exp, read_back))
    assert f"{tmp_path / 'kernels'}:/k:ro" in ran and exported == ran


def test_a_kernel_study_read_back_points_its_winner_at_the_tuned_configs_its_trials_read(tmp_path):
    """`autotuner best` and `report` read the experiment the study recorded: the kernel stage's cache key
    filled in, and a cache folder given relative to the experiment file resolved."""
    from autotuner.stages import kernel_stage, kernels

    text = (REPO / "experiments" / "glm5-nvfp4-8x-rtx-pro-6000.yaml").read_text().replace(
        "../search_spaces/", f"{REPO}/search_spaces/")
    (tmp_path / "exp.yaml").write_text(text + "kernels: {cache_dir: kc}\n")
    exp = kernels.with_cache_mount(kernel_stage.resolve(load_experiment(tmp_path / "exp.yaml"), engine_version="0.32.0"))
    vllm = get_engine("vllm")
    job = kernels.job_for(exp, vllm, {"parallel_layout": "TP8"})
    assert job is not None
    (tmp_path / "kc" / str(job.key)).mkdir(parents=True)
    (tmp_path / "kc" / str(job.key) / kernels.DONE_FILE).write_text("{}")
    read_back = experiment_from_text(resolved_experiment(exp), "study glm5 in sqlite:///elsewhere.db")
    ran, exported = (launch.planned(e, vllm, {"parallel_layout": "TP8"}, port=launch.EXPORT_PORT, binary=None).docker
                     for e in (exp, read_back))
    assert f"VLLM_TUNED_CONFIG_FOLDER=/autotuner-kernels/{job.key}" in ran and exported == ran


def test_the_k8s_export_is_valid_kubernetes_and_runs_the_docker_line_container(study):
    import kubernetes_validate
    import yaml

    cfg = study["exp"].config
    docs = list(yaml.safe_load_all(cli(study, "best", "--format", "k8s")))
    assert [d["kind"] for d in docs] == ["Deployment", "Service"]
    for doc in docs:  # the API's own schema, strict: no field it does not know
        kubernetes_validate.validate(doc, kubernetes_validate.utils.latest_version(), strict=True)
    docker = shlex.split(cli(study, "best", "--format", "docker"))
    pod = docs[0]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    entry = docker.index("--entrypoint")
    assert container["command"] == [docker[entry + 1]] and container["image"] == docker[entry + 2]
    assert container["args"] == docker[entry + 3:]
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    assert env == {k: v for k, _, v in (a.partition("=") for a in
                                        (docker[i + 1] for i, x in enumerate(docker) if x == "-e"))}
    gpus = container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
    assert gpus == (docker[docker.index("--gpus") + 1] if "--gpus" in docker else None)
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    model_source, model_target, _ = (docker[docker.index("-v") + 1] + ":").split(":", 2)
    assert mounts["model"] == model_target
    assert {"name": "model", "hostPath": {"path": model_source, "type": "Directory"}} in pod["volumes"]
    assert docs[0]["spec"]["strategy"] == {"type": "Recreate"}
    assert ("dshm" in mounts) == (cfg.hardware.gpus > 0 or "--ipc" in docker or "--shm-size" in docker)
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= cfg.startup_timeout_s
    assert docs[1]["spec"]["selector"] == docs[0]["spec"]["selector"]["matchLabels"]


def test_the_helm_values_render_the_docker_line_container_for_vllm_and_are_refused_for_others(study):
    import jsonschema
    import yaml

    from tests.helm_chart import SCHEMA, options, rendered_args

    if study["exp"].config.engine != "vllm":
        result = CliRunner().invoke(app, ["best", "--format", "helm-values", "--storage", study["storage"],
                                          "--study", study["exp"].config.study_name])
        assert result.exit_code == 2 and "vLLM only" in result.output
        return
    doc = yaml.safe_load(cli(study, "best", "--format", "helm-values"))
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)
    (spec,) = doc["servingEngineSpec"]["modelSpec"]
    docker = shlex.split(cli(study, "best", "--format", "docker"))
    entry = docker.index("--entrypoint")
    assert f"{spec['repository']}:{spec['tag']}" == docker[entry + 2]
    container = options([docker[entry + 1], *docker[entry + 3:]])
    rendered = options(rendered_args(spec))
    defaults = {"--tensor-parallel-size": "1", "--enable-prefix-caching": None}  # what the chart always writes
    assert rendered == {**{k: v for k, v in defaults.items() if k not in container and
                           (k != "--enable-prefix-caching" or "--no-enable-prefix-caching" not in container)},
                        **container}
    gpus = docker[docker.index("--gpus") + 1] if "--gpus" in docker else "0"
    assert str(spec["requestGPU"]) == gpus
