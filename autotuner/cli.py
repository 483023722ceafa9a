"""Command line: argv -> config -> one call into the core. No tuning logic lives here.

Heavy modules (optuna, mlflow, httpx) are imported inside the commands so `--help` stays fast. User
mistakes exit with code 2 and one line on stderr; Ctrl-C exits with 130 and says how to resume.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Find the fastest configuration of an LLM inference server, automatically.")


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


@app.command()
def run(
    experiment: Path = typer.Option(Path("experiments/quickstart.yaml"), "--experiment", "-e",
                                    help="Experiment file (YAML)."),
    trials: int = typer.Option(20, "--trials", "-n", min=1, help="Trials to run in this invocation (more, on resume)."),
    timeout: Optional[float] = typer.Option(None, "--timeout", min=1, help="Stop starting trials after this many seconds."),
    storage: Optional[str] = typer.Option(None, "--storage", help="Optuna storage URL (overrides the experiment)."),
    tracking_uri: Optional[str] = typer.Option(None, "--tracking-uri", envvar="MLFLOW_TRACKING_URI",
                                               help="MLflow tracking URI (default: local store under mlruns/)."),
    results: Path = typer.Option(Path("results"), "--results", help="Folder for server logs and the best config."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the launch commands of the first --trials sampled "
                                 "configs (docker run lines for launcher docker) and the rule each infeasible one "
                                 "breaks; start nothing, write nothing."),
) -> None:
    """Tune the engine of an experiment: an Optuna study, resumed when it already exists."""
    from rich.console import Console

    from autotuner.config import ConfigError, load_experiment

    try:
        exp = load_experiment(experiment)
        if dry_run:
            _dry_run(exp, trials)
            return
        if storage:
            exp = exp.model_copy(update={"config": exp.config.model_copy(
                update={"study": exp.config.study.model_copy(update={"storage": storage})})})
        tuner = _make_tuner(exp, tracking_uri, results)
    except ConfigError as e:
        _fail(str(e))
        return

    from autotuner import report

    # Piped into a log, rich would wrap the table at 80 columns; a log has room for the whole command.
    console = Console(width=None if sys.stdout.isatty() else 200)
    try:
        study = tuner.run(trials, timeout_s=timeout)
    except KeyboardInterrupt:
        typer.echo("\nInterrupted: the engine is stopped and every finished trial is saved. "
                   "Run the same command to resume.", err=True)
        raise typer.Exit(130) from None
    summary = report.summarize(study, exp.config.objective.metric)
    command = None
    if summary.best is not None:
        ctx = report.export_context(tuner.launch_context(report.EXPORT_PORT))
        command = report.best_command(tuner.engine, summary.best, ctx)
    report.render(summary, tuner.engine, command, console)
    path = report.write_best(summary, command, tuner.workdir)
    if path:
        console.print(f"Saved {path}")


def _dry_run(exp, trials: int) -> None:
    from autotuner.dryrun import dry_run

    engine = _checked_engine(exp)
    binary = None if exp.config.launcher == "docker" else engine.find_binary()[0]
    dry_run(exp, engine, trials, typer.echo, binary=binary)


def _checked_engine(exp):
    """The experiment's engine, after checking the search space against it (ConfigError otherwise)."""
    from autotuner.config import ConfigError
    from autotuner.engines._base import EngineError, get_engine

    cfg = exp.config
    try:
        engine = get_engine(cfg.engine)
    except EngineError as e:
        raise ConfigError(f"{exp.source}: field 'engine': {e}") from None
    try:
        from autotuner.config import CategoricalParam

        engine.check_space(list(exp.space.params), {n: p.choices for n, p in exp.space.params.items()
                                                    if isinstance(p, CategoricalParam)})
    except EngineError as e:
        raise ConfigError(f"{exp.space_path}: field 'params': {e}") from None
    from autotuner.space import ExpressionError, SearchSpace

    try:
        SearchSpace(exp.space)
    except ExpressionError as e:
        raise ConfigError(f"{exp.space_path}: {e}") from None
    return engine


def _make_tuner(exp, tracking_uri: Optional[str], results: Path):
    from autotuner import paths
    from autotuner.config import ConfigError
    from autotuner.launchers.process import ProcessLauncher
    from autotuner.tracking import MlflowTracker
    from autotuner.tuner import Tuner

    cfg = exp.config
    engine = _checked_engine(exp)
    if not exp.model_path.exists():
        raise ConfigError(f"{exp.source}: field 'model.path': not found: {exp.model_path} "
                          "(scripts/setup.sh makes the quickstart model, scripts/setup-vllm.sh the vLLM one)")
    if cfg.launcher != "process":
        raise ConfigError(f"{exp.source}: field 'launcher': '{cfg.launcher}' is not available yet (launchers: process)")
    binary, hint = engine.find_binary()
    if binary is None:
        raise ConfigError(hint)
    tracker = MlflowTracker(tracking_uri or cfg.tracking.uri)
    return Tuner(exp, engine=engine, launcher=ProcessLauncher(paths.cache_dir() / "processes"), tracker=tracker,
                 results_dir=results, binary=binary)


@app.command()
def bench(
    base_url: str = typer.Option(..., "--base-url", help="Server address, e.g. http://127.0.0.1:8080"),
    model: str = typer.Option(..., "--model", help="Model name the server serves."),
    endpoint: str = typer.Option("/v1/completions", "--endpoint", help="/v1/completions or /v1/chat/completions"),
    max_concurrency: Optional[int] = typer.Option(None, "--max-concurrency", min=1, help="Requests in flight at most."),
    request_rate: float = typer.Option(float("inf"), "--request-rate", help="Poisson arrivals per second (inf: all at once)."),
    num_prompts: int = typer.Option(100, "--num-prompts", min=1, help="Measured requests."),
    input_len: int = typer.Option(128, "--random-input-len", min=1, help="Prompt length in words (about one token each)."),
    output_len: int = typer.Option(128, "--random-output-len", min=1, help="Tokens to generate per request."),
    num_warmups: int = typer.Option(0, "--num-warmups", min=0, help="Unmeasured requests sent first."),
    seed: int = typer.Option(0, "--seed", help="Seed for prompts and arrival times."),
    workers: int = typer.Option(1, "--workers", min=1, help="Client processes (when one core is not enough)."),
    timeout: float = typer.Option(300.0, "--timeout", help="Per-request timeout in seconds."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write the full result (and per-request records) here."),
) -> None:
    """Measure a running OpenAI-compatible server, like `vllm bench serve`."""
    from autotuner.bench.runner import format_level, run_level_sync
    from autotuner.bench.workload import Workload

    endpoints = {"/v1/completions": "completions", "/v1/chat/completions": "chat"}
    if endpoint not in endpoints:
        _fail(f"--endpoint: expected one of {', '.join(endpoints)} (got {endpoint!r})")
    workload = Workload(endpoint=endpoints[endpoint], num_prompts=num_prompts, input_len=input_len,
                        output_len=output_len, seed=seed)
    rate = None if request_rate == float("inf") else request_rate
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


@app.command("make-model")
def make_model(
    out: Path = typer.Option(Path("models/tiny-llama.gguf"), "--out", help="GGUF file to write."),
    size: str = typer.Option("small", "--size", help="tiny (8 MB, fast tests) or small (~104M params, tuning)."),
    seed: int = typer.Option(0, "--seed"),
) -> None:
    """Write a random-weight llama GGUF (no model hub needed). Skips when the file exists."""
    if size not in ("tiny", "small"):
        _fail(f"--size: expected tiny or small (got {size!r})")
    if out.exists():
        typer.echo(f"{out} exists")
        return
    from autotuner.models.tiny_gguf import write_tiny_llama_gguf

    out.parent.mkdir(parents=True, exist_ok=True)
    typer.echo(f"writing {out} ({size})", err=True)
    write_tiny_llama_gguf(out, size=size, seed=seed)  # type: ignore[arg-type]
    typer.echo(str(out))


def main() -> None:
    app(prog_name="autotuner")


if __name__ == "__main__":
    sys.exit(main())
