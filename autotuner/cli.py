"""Command line: argv -> config -> one call into the core. No tuning logic lives here.

Heavy modules (optuna, mlflow, httpx) are imported inside the commands so `--help` stays fast. User
mistakes exit with code 2 and one line on stderr; Ctrl-C exits with 130 and says how to resume.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NoReturn

import typer

if TYPE_CHECKING:
    pass

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Find the fastest configuration of an LLM inference server, automatically.")


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


@app.command()
def run(
    experiment: Path = typer.Option(
        Path("experiments/quickstart.yaml"), "--experiment", "-e", help="Experiment file (YAML)."
    ),
    trials: int = typer.Option(20, "--trials", "-n", min=1, help="Trials to run in this invocation (more, on resume)."),
    engine: str | None = typer.Option(None, "--engine", help="With --model: llamacpp, vllm or sglang."),
    model: Path | None = typer.Option(
        None, "--model", help="Init and run in one step: `autotuner init` writes experiments/NAME.yaml for this "
        "model and this machine the first time; later runs resume it (edit it freely)."),
    timeout: float | None = typer.Option(
        None, "--timeout", min=1, help="Stop starting trials after this many seconds."
    ),
    target: float | None = typer.Option(None, "--target", help="End the study once the objective reaches this value."),
    patience: int | None = typer.Option(
        None,
        "--patience",
        min=1,
        help="End the study when the best has not improved beyond noise for this many trials.",
    ),
    max_trials: int | None = typer.Option(
        None,
        "--max-trials",
        min=1,
        help="End the study once it holds this many trials, over every worker on it (--trials: this invocation's).",
    ),
    storage: str | None = typer.Option(None, "--storage", help="Optuna storage URL (overrides the experiment)."),
    seed: int | None = typer.Option(
        None, "--seed", help="Sampler seed (overrides the experiment); give each machine's worker on one study its own."
    ),
    tracking_uri: str | None = typer.Option(
        None,
        "--tracking-uri",
        envvar="MLFLOW_TRACKING_URI",
        help="MLflow tracking URI (default: local store under mlruns/).",
    ),
    results: Path = typer.Option(Path("results"), "--results", help="Folder for server logs and the best config."),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Print the launch commands of the first --trials sampled "
        "configs (docker run lines for launcher docker) and the rule each infeasible one "
        "breaks; start nothing, write nothing.",
    ),
    parallel: int = typer.Option(
        1, "--parallel", "-j", min=1, help="Trials side by side on this node, each on its own GPUs (or CPU cores)."
    ),
    gpus: str | None = typer.Option(
        None, "--gpus", help="GPU ids the trials share, e.g. 0,1,2,3 (default: 0 to hardware.gpus-1)."
    ),
    ray_address: str | None = typer.Option(
        None, "--ray", help="Run each trial as a task on this Ray cluster (the head's host:port, or auto for one "
        "started on this machine), as many at once as its nodes hold (docs/ray.md); sets executor: ray."),
    worker: str | None = typer.Option(None, "--worker", hidden=True, help="Set by --parallel for its workers."),
    advice: str = typer.Option(
        "auto", "--advice", help="auto: the experiment's advisors propose configs before the sampler; ask: show each "
        "proposal and wait for yes, no or edit (never waits without a terminal); off: the sampler alone."),
    verbose: bool = typer.Option(
        False,
        "--verbose",
        help="Show the libraries' own log lines (MLflow, Optuna, ...) "
        "here too; by default they go to results/<study>/autotuner.log.",
    ),
) -> None:
    """Tune the engine of an experiment: an Optuna study, resumed when it already exists.

    Several `autotuner run`s on one --storage (other processes, other machines) share its study."""
    from rich.console import Console

    from autotuner import compose
    from autotuner.config import ConfigError, load_experiment

    if advice not in ("auto", "ask", "off"):
        _fail(f"--advice: expected auto, ask or off (got {advice!r})")
    if model is not None:
        experiment = _experiment_for(engine, model, dry_run)
    elif engine is not None:
        _fail("--engine goes with --model (the experiment file names its engine)")
    try:
        exp = load_experiment(experiment)
        exp = _override(exp, study={"storage": storage, "seed": _worker_seed(exp, seed, worker)},
                        stop={"target": target, "patience": patience, "max_trials": max_trials})
        if ray_address is not None:
            cfg = exp.config.model_copy(update={"executor": "ray", "ray": exp.config.ray.model_copy(
                update={"address": ray_address})})
            exp = exp.model_copy(update={"config": cfg})
        if advice == "off":  # the sampler alone, in the dry run too
            exp = exp.model_copy(update={"config": exp.config.model_copy(update={"advisors": []})})
        if dry_run:
            _dry_run(exp, trials)
            return
        # No terminal, or --parallel workers (they run unattended): nobody to ask, proposals are taken.
        if advice == "ask" and (worker is not None or parallel > 1 or not sys.stdin.isatty()):
            advice = "auto"
        on_ray = exp.config.executor == "ray"
        pool = None if on_ray else compose.worker_pool(exp, parallel, gpus)
        tuner = compose.make_tuner(exp, tracking_uri, results, say=_say, pool=pool, worker=worker, advice=advice,
                                   ask=_ask, quiet=not verbose)
        if on_ray and worker is None:  # as many trials in flight as the cluster holds, or as told
            parallel, why = compose.ray_workers(tuner, trials, parallel)
            _say(f"{parallel} trial(s) at once on the Ray cluster{why}")
    except ConfigError as e:
        _fail(str(e))
        return

    from autotuner import report

    # Piped into a log, rich would wrap the table at 80 columns: the view's own width (commands never wrap).
    console = Console(width=None if sys.stdout.isatty() else report.WIDTH)
    interrupted = ("\nInterrupted: the engine is stopped and every finished trial is saved. "
                   "Run the same command to resume.")
    if parallel > 1 and worker is None:
        from autotuner.node.workers import run_workers

        options = {
            "--storage": storage,
            "--seed": seed,
            "--max-trials": max_trials,
            "--tracking-uri": tracking_uri,
            "--target": target,
            "--patience": patience,
            "--timeout": timeout,
            "--gpus": gpus,
            "--results": results,
            "--parallel": parallel,
            "--advice": advice,
            "--ray": ray_address,
        }
        given = [str(x) for k, v in options.items() if v is not None for x in (k, v)] + ["--verbose"] * verbose
        code = run_workers(lambda name, n: [sys.executable, "-m", "autotuner.cli", "run", "--experiment",
                                            str(experiment), "--trials", str(n), "--worker", name, *given],
                           trials, parallel, note=lambda line: typer.echo(line, err=True))
        if code == 130:
            typer.echo(interrupted, err=True)
            raise typer.Exit(130)
        if code:
            typer.echo(f"error: a worker failed (exit code {code}); its output above says why", err=True)
            raise typer.Exit(code)
        study = tuner.study
    else:
        try:
            study = tuner.run(trials, timeout_s=timeout)
        except KeyboardInterrupt:
            typer.echo(interrupted, err=True)
            raise typer.Exit(130) from None
        if worker is not None:  # the process that started the workers reports on the study
            return
    from autotuner.tracking.artifacts import front_commands, winner_text

    # The commands the tuner wrote into best-command.sh and report.md (one builder); the files are its own.
    # Its experiment is the one the trials ran (the kernel stage's cache key filled in, its cache mounted).
    summary = report.summarize(study, exp.config.objective.metric)
    command = None
    if summary.best is not None:
        command = tuner.redact.text(winner_text("args", tuner.engine, tuner.exp, summary.best, tuner.binary,
                                                tuner.engine_version).strip())
    front_commands(summary, tuner.engine, tuner.exp, tuner.binary, tuner.engine_version)
    for row in summary.front:
        row.command = tuner.redact.text(row.command) or ""
    report.render(summary, tuner.engine, command, console)
    if summary.best is not None and (tuner.workdir / "best.json").is_file():
        console.print(f"Saved {tuner.workdir / 'best.json'}")


def _override(exp, **sections: dict):
    """The experiment with command-line values (those given) replacing the file's."""
    cfg = exp.config
    for section, values in sections.items():
        given = {k: v for k, v in values.items() if v is not None}
        if given:
            cfg = cfg.model_copy(update={section: getattr(cfg, section).model_copy(update=given)})
    return exp.model_copy(update={"config": cfg})


def _worker_seed(exp, seed: int | None, worker: str | None) -> int | None:
    """Workers with one seed would sample the same configs in the same order: each --parallel worker
    (w1, w2, ...) gets its own, derived from the experiment's."""
    if worker is None:
        return seed
    base = seed if seed is not None else exp.config.study.seed
    return None if base is None else base + 1000 * int(worker.removeprefix("w") or 0)


def _say(line: str) -> None:
    typer.echo(line, err=True)


def _ask(question: str, params: dict) -> bool | dict:
    """--advice ask: yes, no, or edit (param=value pairs replacing the proposal's; the driver checks them)."""
    from autotuner.report.export import scalar

    try:
        while True:
            answer = typer.prompt(question + "\n  launch it? [y]es, [n]o, [e]dit", default="y", err=True)
            if answer.strip().lower() in ("y", "yes", "n", "no"):
                return answer.strip().lower().startswith("y")
            if answer.strip().lower() not in ("e", "edit"):
                continue
            edits = typer.prompt("  param=value, space-separated (e.g. parallel=8 cont_batching=false)", err=True)
            try:
                changes = dict(pair.split("=", 1) for pair in edits.split())
            except ValueError:
                typer.echo("  each change is param=value", err=True)
                continue
            return {**params, **{k: scalar(v) for k, v in changes.items()}}
    except (typer.Abort, EOFError):  # Ctrl-D or a closed terminal: a no, and the study goes on
        return False


def _dry_run(exp, trials: int) -> None:
    from autotuner.core import preflight
    from autotuner.node.pool import study_gpus
    from autotuner.report.dryrun import dry_run
    from autotuner.stages import kernel_stage, kernels

    engine = preflight.check(exp, need_model=False)
    binary = None if exp.config.launcher == "docker" else engine.planned_binary()
    gpus = study_gpus(exp.config)
    if exp.config.hardware.gpus > 0:  # what runs first, printed first
        from autotuner.report.dryrun import preflight_plan

        preflight_plan(exp, gpus, binary, typer.echo)
        typer.echo("")
    if exp.config.kernels is not None:  # the stage runs before the first trial
        kernel_stage.describe(exp, engine, typer.echo, gpus)
        typer.echo("")
        exp = kernels.with_cache_mount(exp)
    dry_run(exp, engine, trials, typer.echo, binary=binary)


@app.command("kernels")
def kernels_command(
    experiment: Path = typer.Option(..., "--experiment", "-e", help="Experiment file (YAML)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the tuning jobs' commands (docker run lines for "
                                 "launcher docker); start nothing, write nothing."),
) -> None:
    """Tune the engine's fused-MoE kernels for every MoE shard the experiment's search space can launch,
    once per engine version and GPU (what a `kernels:` section runs before the first trial)."""
    from autotuner.config import ConfigError, KernelsConfig, load_experiment
    from autotuner.core import preflight
    from autotuner.node.pool import study_gpus
    from autotuner.stages import kernel_stage

    try:
        exp = load_experiment(experiment)
        if exp.config.kernels is None:  # the command needs no section: its defaults
            exp = exp.model_copy(update={"config": exp.config.model_copy(update={"kernels": KernelsConfig()})})
        engine = preflight.check(exp, need_model=not dry_run)
        if dry_run:
            kernel_stage.describe(exp, engine, typer.echo, study_gpus(exp.config))
            return
        _, result = kernel_stage.prepare(exp, engine, typer.echo, gpus=study_gpus(exp.config))
    except ConfigError as e:
        _fail(str(e))
        return
    typer.echo(f"kernels: {len(result.tuned)} tuned, {len(result.cached)} reused, {len(result.failed)} failed")
    if result.failed:
        raise typer.Exit(1)


@app.command()
def bench(
    base_url: str = typer.Option(..., "--base-url", help="Server address, e.g. http://127.0.0.1:8080"),
    model: str = typer.Option(..., "--model", help="Model name the server serves."),
    endpoint: str = typer.Option("/v1/completions", "--endpoint", help="/v1/completions or /v1/chat/completions"),
    max_concurrency: int | None = typer.Option(None, "--max-concurrency", min=1, help="Requests in flight at most."),
    request_rate: float = typer.Option(
        float("inf"), "--request-rate", help="Poisson arrivals per second (inf: all at once)."
    ),
    num_prompts: int = typer.Option(100, "--num-prompts", min=1, help="Measured requests."),
    input_len: int = typer.Option(
        128, "--random-input-len", min=1, help="Prompt length in words (about one token each)."
    ),
    output_len: int = typer.Option(128, "--random-output-len", min=1, help="Tokens to generate per request."),
    num_warmups: int = typer.Option(0, "--num-warmups", min=0, help="Unmeasured requests sent first."),
    seed: int = typer.Option(0, "--seed", help="Seed for prompts and arrival times."),
    workers: int = typer.Option(1, "--workers", min=1, help="Client processes (when one core is not enough)."),
    timeout: float = typer.Option(300.0, "--timeout", help="Per-request timeout in seconds."),
    json_path: Path | None = typer.Option(None, "--json", help="Write the full result (and per-request records) here."),
) -> None:
    """Measure a running OpenAI-compatible server, like `vllm bench serve`."""
    from autotuner.bench.client import ignored_proxy_note
    from autotuner.bench.runner import format_level, run_level_sync
    from autotuner.workloads.synthetic import Workload

    endpoints: dict[str, Literal["completions", "chat"]] = {"/v1/completions": "completions",
                                                            "/v1/chat/completions": "chat"}
    if endpoint not in endpoints:
        _fail(f"--endpoint: expected one of {', '.join(endpoints)} (got {endpoint!r})")
    workload = Workload(endpoint=endpoints[endpoint], num_prompts=num_prompts, input_len=input_len,
                        output_len=output_len, seed=seed)
    rate = None if request_rate == float("inf") else request_rate
    note = ignored_proxy_note(base_url, os.environ)
    if note:
        typer.echo(f"note: {note}", err=True)
    result, records = run_level_sync(base_url.rstrip("/"), model, workload, max_concurrency=max_concurrency,
                                     request_rate=rate, warmup_requests=num_warmups, seed=seed, timeout_s=timeout,
                                     workers=workers)
    typer.echo(format_level(result))
    if json_path:
        from dataclasses import asdict

        data = {"result": result.to_json(), "records": [asdict(r) for r in records]}
        json_path.write_text(json.dumps(data, indent=1))
        typer.echo(f"wrote {json_path}")
    if result.completed == 0:
        raise typer.Exit(1)


@app.command()
def init(
    engine: str = typer.Option(..., "--engine", help="The engine to tune: llamacpp, vllm or sglang."),
    model: Path = typer.Option(..., "--model", help="The model: a GGUF file (llamacpp) or a Hugging "
                               "Face model folder (vllm, sglang)."),
    name: str | None = typer.Option(None, "--name", help="The study's name (default: the model file's)."),
    output: Path | None = typer.Option(None, "--output", help="The experiment file to write (default: "
                                       "experiments/NAME.yaml, its space in search_spaces/NAME.yaml)."),
    gpus: int | None = typer.Option(None, "--gpus", min=0, help="GPUs to plan for (default: those this "
                                                                "machine shows)."),
    gpu_type: str | None = typer.Option(None, "--gpu-type", help="Plan for GPUs this machine lacks: h100, "
                                        "h200, b200, a100-80gb, l40s, rtx-pro-6000, ..."),
    workload: Path | None = typer.Option(None, "--workload", help="Your traffic: a Mooncake trace (JSONL) or a "
                                         "ShareGPT / JSONL dataset; its lengths size the context."),
    ttft_p99_ms: int | None = typer.Option(None, "--ttft-p99-ms", help="The time to first token your "
                                           "users accept, p99 (default: a guess, 5000 on llama.cpp, 10000 on "
                                           "GPUs; the baseline says where the defaults miss it)."),
    force: bool = typer.Option(False, "--force", help="Replace files that exist."),
) -> None:
    """Write an experiment and a search space sized from the model's, the machine's and the traffic's facts."""
    from autotuner import new_experiment
    from autotuner.config import ConfigError

    try:
        exp_path, space_path, scaffold = new_experiment.write(engine, model, name=name, experiment=output, gpus=gpus,
                                                              gpu_type=gpu_type, workload=workload,
                                                              ttft_ms_p99=ttft_p99_ms, force=force)
    except ConfigError as e:
        _fail(str(e))
    for line in scaffold.decisions:
        typer.echo(f"  {line}")
    typer.echo(f"wrote {exp_path} and {space_path}; tune with:\n"
               f"  autotuner run --experiment {exp_path} --trials 30")


@app.command("make-model")
def make_model(
    out: Path = typer.Option(Path("models/tiny-llama.gguf"), "--out", help="GGUF file to write."),
    size: str = typer.Option("small", "--size", help="tiny (8 MB, fast tests) or small (~104M params, tuning)."),
    seed: int = typer.Option(0, "--seed"),
    quant: str = typer.Option("f16", "--quant", help="f16, or q8_0 / q4_0: the same weights quantized."),
) -> None:
    """Write a random-weight llama GGUF (no model hub needed). Skips when the file exists."""
    if size not in ("tiny", "small"):
        _fail(f"--size: expected tiny or small (got {size!r})")
    if quant not in ("f16", "q8_0", "q4_0"):
        _fail(f"--quant: expected f16, q8_0 or q4_0 (got {quant!r})")
    if out.exists():
        typer.echo(f"{out} exists")
        return
    from autotuner.models.tiny_gguf import write_tiny_llama_gguf
    from autotuner.util.extras import MissingExtra

    out.parent.mkdir(parents=True, exist_ok=True)
    typer.echo(f"writing {out} ({size})", err=True)
    try:
        write_tiny_llama_gguf(out, size=size, seed=seed, quant=quant)  # type: ignore[arg-type]  # typer gives str; the choices are checked
    except MissingExtra as e:
        _fail(str(e))
    typer.echo(str(out))


def _experiment_for(engine: str | None, model: Path, dry_run: bool) -> Path:
    """`run --engine E --model PATH`: the experiment `init` wrote for the model, written now the first time
    (into a scratch folder for a dry run, which writes nothing)."""
    import tempfile

    from autotuner import new_experiment
    from autotuner.config import ConfigError, load_experiment

    if engine is None:
        _fail("--model needs --engine (llamacpp, vllm or sglang)")
    name = new_experiment.name_for(model)
    path = Path("experiments") / f"{name}.yaml"
    if path.exists():
        try:
            found = load_experiment(path)
        except ConfigError as e:
            _fail(str(e))
        if (found.config.engine, found.model_path.resolve()) != (engine, model.resolve()):
            _fail(f"{path} exists and runs {found.config.engine} on {found.model_path}: run it with --experiment, "
                  f"or write this model's with `autotuner init --engine {engine} --model {model} --name OTHER`")
        typer.echo(f"{path}: the experiment for {model}, written earlier (edit it, or delete it to size anew)",
                   err=True)
        return path
    target = Path(tempfile.mkdtemp(prefix="autotuner-init-")) / f"{name}.yaml" if dry_run else None
    try:
        path, space_path, scaffold = new_experiment.write(str(engine), model, experiment=target)
    except ConfigError as e:
        _fail(str(e))
    for line in scaffold.decisions:
        typer.echo(f"  {line}", err=True)
    typer.echo(f"wrote {path} and {space_path}" + (" (a scratch copy: dry run)" if dry_run else
               f"; the next `autotuner run --engine {engine} --model {model}` resumes this study"), err=True)
    return path


def _study_for_reading(experiment: Path, storage: str | None, study: str | None):
    """(optuna study, experiment) for `report` and `best`; exits 2 with one line when it cannot."""
    from autotuner.config import ConfigError, load_experiment
    from autotuner.tracking.artifacts import open_existing

    try:
        exp = load_experiment(experiment) if (experiment.exists() or not (storage and study)) else None
        return open_existing(exp, storage, study)
    except ConfigError as e:
        _fail(str(e))
        raise  # unreachable: _fail exits


_READ_EXPERIMENT = typer.Option(Path("experiments/quickstart.yaml"), "--experiment", "-e",
                                help="Experiment file: names the storage and the study (default: the quickstart).")
_READ_STORAGE = typer.Option(None, "--storage", help="Optuna storage URL (default: the experiment's).")
_READ_STUDY = typer.Option(None, "--study", help="Study name (default: the experiment's).")


@app.command()
def report(
    experiment: Path = _READ_EXPERIMENT,
    storage: str | None = _READ_STORAGE,
    study: str | None = _READ_STUDY,
    fmt: str = typer.Option("text", "--format", "-f", help="text (terminal), markdown or json (for sharing)."),
    top: int = typer.Option(5, "--top", min=1, help="Trials in the top table."),
    target: float | None = typer.Option(None, "--target", help="Objective value to compare the best against."),
    results: Path = typer.Option(Path("results"), "--results", help="Folder the study's plots and files are in."),
    plots: bool = typer.Option(False, "--plots", help="(Re)draw the study's plots (HTML and PNG) first."),
) -> None:
    """The study's status report: top trials, outcomes, gain over the baseline, limits, next steps."""
    if fmt not in ("text", "markdown", "json"):
        _fail(f"--format: expected text, markdown or json (got {fmt!r})")
    from autotuner import report as rep
    from autotuner.engines._base import EngineError, get_engine
    from autotuner.tracking.artifacts import bounds, front_commands, study_binary, winner_text
    from autotuner.tracking.artifacts import target as exp_target

    optuna_study, exp = _study_for_reading(experiment, storage, study)
    folder = results / optuna_study.study_name
    if plots:
        from autotuner.report.plots import write_plots

        write_plots(optuna_study, folder / "plots", png=True)
    summary = rep.summarize(optuna_study, exp.config.objective.metric, top_k=top,
                            target=target if target is not None else exp_target(exp), bounds=bounds(exp))
    summary.plots = sorted(str(p) for p in (folder / "plots").glob("*") if p.suffix in (".html", ".png"))
    summary.best_files = sorted(str(p) for p in folder.glob("best*") if p.is_file())
    try:
        engine = get_engine(exp.config.engine, exp.space.env_params)
    except EngineError:
        engine = None
    command = None
    if summary.best is not None and engine is not None:
        binary, version = study_binary(optuna_study, exp, engine), _version(optuna_study, summary.best.number)
        command = winner_text("args", engine, exp, summary.best, binary, version).strip()
        front_commands(summary, engine, exp, binary, version)
    if fmt == "json":
        typer.echo(json.dumps(rep.to_json(summary, command), indent=2))
    elif fmt == "markdown":
        typer.echo(rep.to_markdown(summary, engine, command))
    else:
        from rich.console import Console
        from rich.markdown import Markdown

        Console(width=None if sys.stdout.isatty() else 160).print(Markdown(rep.to_markdown(summary, engine, command)))
    if not plots and not summary.plots:
        typer.echo(f"(no plots under {folder / 'plots'}: `autotuner report --plots` draws them)", err=True)


@app.command()
def best(
    experiment: Path = _READ_EXPERIMENT,
    storage: str | None = _READ_STORAGE,
    study: str | None = _READ_STUDY,
    fmt: str = typer.Option("args", "--format", "-f",
                            help="args (the command as the study launched it: the engine's, or `docker run` for "
                                 "launcher docker), docker (`docker run` line), config (the engine's own config "
                                 "file), yaml, env (environment variables the engine reads), k8s (a Kubernetes "
                                 "Deployment and Service of the same container; a LeaderWorkerSet, a pod a node, for "
                                 "a winner spread over a Ray cluster's nodes), or helm-values (vLLM: values for "
                                 "the vLLM production stack's chart)."),
    image: str | None = typer.Option(None, "--image", help="Image for --format docker, k8s or helm-values "
                                        "(default: the study's, else the engine's)."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write to this file instead of stdout."),
) -> None:
    """Print the best configuration, ready to run."""
    from autotuner import report as rep
    from autotuner.engines._base import EngineError, get_engine
    from autotuner.report import export
    from autotuner.tracking.artifacts import study_binary, winner_text

    if fmt not in export.FORMATS:
        _fail(f"--format: expected one of {', '.join(export.FORMATS)} (got {fmt!r})")
    optuna_study, exp = _study_for_reading(experiment, storage, study)
    summary = rep.summarize(optuna_study, exp.config.objective.metric, top_k=1, importances=False)
    if summary.best is None:
        _fail(f"study '{optuna_study.study_name}' has no complete trial yet: nothing to export")
    try:
        engine = get_engine(exp.config.engine, exp.space.env_params)
    except EngineError as e:
        _fail(str(e))
        return
    try:
        text = winner_text(fmt, engine, exp, summary.best, study_binary(optuna_study, exp, engine),
                           _version(optuna_study, summary.best.number), image=image)
    except export.ExportError as e:
        _fail(str(e))
        return
    if out:
        out.write_text(text)
        typer.echo(f"wrote {out} (trial #{summary.best.number}, {summary.best.value:,.1f} "
                   f"{exp.config.objective.metric})", err=True)
    else:
        typer.echo(text, nl=False)


@app.command()
def transfer(
    experiment: Path = _READ_EXPERIMENT,
    to: list[Path] = typer.Option(..., "--to", help="Another experiment of the same engine and model: its "
                                                    "workload, load and objective (repeat --to for more)."),
    repeats: int = typer.Option(2, "--repeats", min=1, help="Rounds of winner-then-defaults launches each."),
    storage: str | None = _READ_STORAGE,
    study: str | None = _READ_STUDY,
    results: Path = typer.Option(Path("results"), "--results",
                                 help="Where the launches' folders and transfer.json go."),
) -> None:
    """Does the winner still win on other traffic? It and the engine defaults, interleaved, on other workloads."""
    from autotuner.config import ConfigError
    from autotuner.core import transfer as tr
    from autotuner.core.study import best_trial, best_tuned

    optuna_study, exp = _study_for_reading(experiment, storage, study)
    pick = best_tuned(optuna_study)  # the defaults kept: still, what does the best tuned config do elsewhere?
    if pick is None:
        _fail(f"study '{optuna_study.study_name}' has no tuned configuration that completed: nothing to transfer")
        return
    winner = best_trial(optuna_study)
    if winner is not None and winner.number != pick.number:
        typer.echo(f"the study keeps the engine defaults (trial #{winner.number}); transferring its best tuned "
                   f"configuration, trial #{pick.number}", err=True)
    try:
        lines, written = tr.run(exp, to, pick.number, pick.params, repeats=repeats,
                                workdir=results / optuna_study.study_name)
    except ConfigError as e:
        _fail(str(e))
    typer.echo("\n".join(lines))
    typer.echo(f"wrote {written}", err=True)


def _version(optuna_study, number: int) -> str:
    """The engine version a trial ran (for image tags); 'latest' when unknown."""
    version = optuna_study.trials[number].user_attrs.get("engine_version") or "unknown"
    return "latest" if version == "unknown" else version


def main() -> None:
    app(prog_name="autotuner")


if __name__ == "__main__":
    main()
