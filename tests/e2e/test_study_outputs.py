"""After a real short study, run through the CLI as a user runs it: what the MLflow store holds, what
`autotuner report` and `autotuner best` print, that the engine reads the exported config, that
optuna-dashboard opens the same storage, and that the MLflow UI shows the trials in a real browser.

One study (real llama-server, tiny model, two load levels, a known-failing config) serves every test.
The browser check keeps its screenshots under ci-artifacts/ (CI keeps that folder).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from autotuner.bench.server_metrics import DEFAULT_INTERVAL_S
from tests.support import everything_required

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "ci-artifacts"
NUM_PROMPTS = 32  # levels of 2 s or more even on a fast machine (16 took 0.95 s on one): several sampler periods
OUTPUT_LEN = 256  # long enough that a level spans a few of the /metrics sampler's periods
LEVELS = [2, 8]

pytestmark = pytest.mark.engine

SPACE = """\
engine: llamacpp
params:
  parallel: {type: int, low: 1, high: 16}
  batch_size: {type: categorical, choices: [8, 512]}
  ubatch_size: {type: categorical, choices: [8, 512]}
  flash_attn: {type: categorical, choices: ["on", "off"]}
constraints: ["batch_size == 512 or parallel == 16"]
"""


def require(what: str, reason: str) -> None:
    if everything_required():
        pytest.fail(f"{what} is required in the complete suite (scripts/test-all.sh, CI): {reason}")
    pytest.skip(reason)


def autotuner(*args: str, cwd: Path, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "COLUMNS": "200", **(env or {})}
    return subprocess.run([sys.executable, "-m", "autotuner.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def night(tmp_path_factory, tiny_model, llama_server) -> Path:
    """A finished 4-trial study: baseline, a config llama.cpp aborts on, a good one, one sampled."""
    d = tmp_path_factory.mktemp("night")
    (d / "space.yaml").write_text(SPACE)
    (d / "exp.yaml").write_text(f"""\
name: night
engine: llamacpp
model: {{path: {tiny_model}, name: tiny}}
search_space: space.yaml
workload: {{num_prompts: {NUM_PROMPTS}, input_len: 16, output_len: {OUTPUT_LEN}, warmup_requests: 2}}
load: {{max_concurrency: {LEVELS}}}
study: {{seed: 3}}
startup_timeout_s: 30
confirm: {{top_k: 1, repeats: 2}}
enqueue:
  - {{parallel: 16, batch_size: 8, ubatch_size: 8}}
  - {{parallel: 4, batch_size: 512, ubatch_size: 512, flash_attn: "off"}}
""")
    out = autotuner("run", "-e", "exp.yaml", "--trials", "4", cwd=d, env={"AUTOTUNER_LLAMA_SERVER": llama_server})
    assert out.returncode == 0, out.stderr[-3000:]
    return d


def _client(d: Path):
    from mlflow.tracking import MlflowClient

    from autotuner.tracking import default_tracking_uri

    return MlflowClient(default_tracking_uri(d / "mlruns"))


def _runs(d: Path):
    client = _client(d)
    exp = client.get_experiment_by_name("night")
    [parent] = client.search_runs([exp.experiment_id], "tags.`autotuner.role` = 'study'")
    children = client.search_runs([exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    return client, exp, parent, {int(r.data.tags["autotuner.trial"]): r for r in children}


def _artifacts(client, run_id: str, path: str | None = None) -> set[str]:
    return {a.path for a in client.list_artifacts(run_id, path)}


def test_mlflow_store_holds_the_run_tree_params_metrics_steps_tags_and_artifacts(night):
    client, exp, parent, trials = _runs(night)
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    assert sorted(trials) == [0, 1, 2, 3]

    # The parent: settings, search space, best so far per trial, the final summary.
    p = parent.data
    # As written: what was left at its default (step, log, no condition, no env) is not repeated.
    assert json.loads(p.params["search_space"])["params"]["parallel"] == {"type": "int", "low": 1, "high": 16}
    assert p.params["objective"] == "maximize output_tok_per_s"
    history = client.get_metric_history(parent.info.run_id, "best_so_far_output_tok_per_s")
    assert sorted(m.step for m in history) == [0, 1, 2, 3]
    assert p.metrics["trials_complete"] >= 2 and p.metrics["trials_fail"] >= 1
    assert "## Verdict" in p.tags["mlflow.note.content"]
    top = _artifacts(client, parent.info.run_id)
    assert {"report.md", "report.json", "best.json", "best-command.sh", "best-docker.sh", "best-config.ini",
            "experiment.yaml", "plots"} <= top
    plots = _artifacts(client, parent.info.run_id, "plots")
    assert {"plots/study.html", "plots/optimization_history.png", "plots/slice.png"} <= plots

    # A complete trial: params as passed, final metrics, each load level as a step, engine samples.
    good = trials[2]
    assert good.info.status == "FINISHED" and good.data.tags["autotuner.state"] == "COMPLETE"
    assert good.data.params["parallel"] == "4" and good.data.params["flash_attn"] == "off"
    assert good.data.params["engine_args"] == "-np 4 -b 512 -ub 512 -fa off"
    for key in ("output_tok_per_s", "ttft_ms_p99", "tpot_ms_p99", "e2e_ms_p99", "time_ready_s", "time_measure_s"):
        assert key in good.data.metrics
    levels = client.get_metric_history(good.info.run_id, "level/output_tok_per_s")
    steps = {m.step: m.value for m in levels}
    # The value is the best level that counts: one the load generator limited (its loop woke late on a busy
    # machine) is charted but not scored (bench/metrics.py: client_limited).
    limited = {m.step: m.value for m in client.get_metric_history(good.info.run_id, "level/client_limited")}
    counted = [v for step, v in steps.items() if not limited.get(step)]
    assert set(steps) == {0, 1} and counted, limited
    assert good.data.metrics["output_tok_per_s"] == pytest.approx(max(counted))
    concurrency = {m.step: m.value for m in client.get_metric_history(good.info.run_id, "level/max_concurrency")}
    assert concurrency == {0: LEVELS[0], 1: LEVELS[1]}
    assert "level/server_requests_running_max" in good.data.metrics or "level/server_samples" in good.data.metrics
    running = client.get_metric_history(good.info.run_id, "server/requests_running")
    assert running and max(m.value for m in running) <= 4  # never more than the 4 slots
    sampled = {m.step: m.value for m in client.get_metric_history(good.info.run_id, "level/server_samples")}
    took = {m.step: m.value for m in client.get_metric_history(good.info.run_id, "level/duration_s")}
    assert max(took.values()) >= 2 * DEFAULT_INTERVAL_S  # else the workload is too short to show the sampler
    assert all(sampled[step] >= 1 for step in took if took[step] >= 2 * DEFAULT_INTERVAL_S)

    # Tags: trial, state, failure class, engine and version, launcher, host fingerprint.
    tags = good.data.tags
    assert tags["autotuner.trial"] == "2" and tags["autotuner.failure_class"] == ""
    assert tags["autotuner.engine"] == "llamacpp" and tags["autotuner.engine_version"] != "unknown"
    assert tags["autotuner.launcher"] == "process"
    assert tags["host.cpu_model"] and int(tags["host.cpu_cores"]) >= 1 and "host.gpu_count" in tags

    # Artifacts: the launch as passed, the server log, every request, the engine samples, the summary.
    assert {"argv.json", "command.txt", "server.log", "requests.jsonl", "server_metrics.jsonl", "bench.json",
            "experiment.yaml"} <= _artifacts(client, good.info.run_id)
    folder = Path(client.download_artifacts(good.info.run_id, "", str(night / "dl")))
    argv = json.loads((folder / "argv.json").read_text())
    assert argv["argv"][-8:] == ["-np", "4", "-b", "512", "-ub", "512", "-fa", "off"]
    records = [json.loads(line) for line in (folder / "requests.jsonl").read_text().splitlines()]
    assert len(records) == NUM_PROMPTS * len(LEVELS)
    assert {r["level"] for r in records} == {0, 1} and all(r["error"] is None for r in records)
    assert all(r["output_tokens"] == OUTPUT_LEN for r in records)
    bench = json.loads((folder / "bench.json").read_text())
    assert [lv["max_concurrency"] for lv in bench["levels"]] == LEVELS
    resolved = yaml.safe_load((folder / "experiment.yaml").read_text())
    assert Path(resolved["model"]["path"]).is_absolute() and "parallel" in resolved["search_space"]["params"]

    # The failing trial: FAILED with its class and the log line that says why.
    bad = trials[1]
    assert bad.info.status == "FAILED" and bad.data.tags["autotuner.failure_class"] == "assert"
    assert "GGML_ASSERT" in bad.data.tags["autotuner.failure_reason"]
    assert "failure.txt" in _artifacts(client, bad.info.run_id)


def test_report_tells_what_was_tried_best_vs_baseline_and_where_the_plots_are(night):
    out = autotuner("report", "-e", "exp.yaml", "--format", "markdown", cwd=night)
    assert out.returncode == 0, out.stderr
    md = out.stdout
    for heading in ("## Verdict", "## Environment", "## What was tried", "## Top", "## Limits and plateaus",
                    "## Next steps", "## Run the winner", "## Files"):
        assert heading in md
    # Confirmed by the round (the best and the baseline, 2 launches each): a gain, or the defaults' win.
    assert "median of 2 confirmation launches" in md
    assert ("over the engine defaults" in md or "The engine defaults are the best configuration measured" in md
            or "Keep the engine defaults" in md)
    assert "| assert | 1 | " in md and "GGML_ASSERT" in md
    assert "| CPU |" in md and "llamacpp" in md
    assert "results/night/plots/optimization_history.png" in md
    assert "concurrency 2, concurrency 8" in md

    data = json.loads(autotuner("report", "-e", "exp.yaml", "--format", "json", cwd=night).stdout)
    assert data["counts"]["FAIL"] >= 1 and data["counts"]["COMPLETE"] >= 2
    assert data["failure_classes"]["assert"] == 1
    # The winner by the round's medians: never below the defaults' median (they were in the round).
    assert data["baseline_value"] > 0 and data["best"]["median"] >= data["baseline_value"]
    assert data["best"]["limit"] in ("compute", "queueing", "kv-cache", "unknown")
    assert all(row["metrics"]["max_concurrency"] in LEVELS for row in data["top"])
    assert data["next_steps"] and any(p.endswith(".html") for p in data["plots"])

    text = autotuner("report", "-e", "exp.yaml", cwd=night)  # the terminal view
    assert text.returncode == 0 and "Verdict" in text.stdout

    wrong = autotuner("report", "--storage", f"sqlite:///{night}/autotuner.db", "--study", "nope", cwd=night)
    assert wrong.returncode == 2 and "no study 'nope'" in wrong.stderr and "night" in wrong.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - loopback only
        return r.read()


def _wait_http(url: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args[0]} exited with {proc.returncode}")
        try:
            _get(url, timeout=2)
            return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"{url} did not answer within {timeout} s")


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_best_prints_a_ready_to_run_command_a_docker_line_and_a_config_the_engine_reads(night, llama_server):
    env = {"AUTOTUNER_LLAMA_SERVER": llama_server}
    args = autotuner("best", "-e", "exp.yaml", cwd=night, env=env)
    assert args.returncode == 0, args.stderr
    best = json.loads((night / "results" / "night" / "best.json").read_text())
    assert args.stdout.strip() == best["command"] and "--port 8080" in args.stdout

    docker = autotuner("best", "-e", "exp.yaml", "--format", "docker", cwd=night, env=env).stdout
    assert docker.startswith("docker run --rm --init -p 127.0.0.1:8080:8000 -v ")  # the container port
    assert "autotuner/llama-server:" in docker and "--model /models/" in docker and "--host 0.0.0.0" in docker

    env_text = autotuner("best", "-e", "exp.yaml", "--format", "env", cwd=night, env=env).stdout
    assert "LLAMA_ARG_MODEL=" in env_text and "LLAMA_ARG_PORT=8080" in env_text

    # The config file: llama-server started with nothing but it serves the winner's configuration.
    config = autotuner("best", "-e", "exp.yaml", "--format", "config", cwd=night, env=env).stdout
    port = _free_port()
    xdg = night / "xdg"
    (xdg / "llama.cpp").mkdir(parents=True, exist_ok=True)
    (xdg / "llama.cpp" / "config.ini").write_text(config.replace("port = 8080", f"port = {port}"))
    slots = best["best"]["params"].get("parallel")
    proc = subprocess.Popen([llama_server], env={**os.environ, "XDG_CONFIG_HOME": str(xdg)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_http(f"http://127.0.0.1:{port}/health", proc, 30)
        served = json.loads(_get(f"http://127.0.0.1:{port}/slots"))
        props = json.loads(_get(f"http://127.0.0.1:{port}/props"))
    finally:
        _stop(proc)
    assert props["model_alias"] == "tiny"
    if slots:
        assert len(served) == slots


def test_optuna_dashboard_opens_the_same_study_storage(night):
    exe = shutil.which("optuna-dashboard") or str(Path(sys.executable).parent / "optuna-dashboard")
    if not Path(exe).exists():
        require("optuna-dashboard", "optuna-dashboard is not installed (pip install optuna-dashboard)")
    port = _free_port()
    proc = subprocess.Popen([exe, f"sqlite:///{night}/autotuner.db", "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_http(f"http://127.0.0.1:{port}/api/studies", proc, 60)
        studies = json.loads(_get(f"http://127.0.0.1:{port}/api/studies"))["study_summaries"]
        [study] = [s for s in studies if s["study_name"] == "night"]
        detail = json.loads(_get(f"http://127.0.0.1:{port}/api/studies/{study['study_id']}?after=0"))
    finally:
        _stop(proc)
    assert len(detail["trials"]) == 4


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    require("chromium", "no chromium: apt-get install chromium (.ci/run installs it)")
    return ""


def _browser(chromium: str, profile: Path, url: str, *extra: str) -> subprocess.CompletedProcess:
    argv = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--disable-background-networking", "--disable-component-update", "--no-first-run",
            f"--user-data-dir={profile}", "--virtual-time-budget=20000", *extra, url]
    return subprocess.run(argv, capture_output=True, text=True, timeout=180)


def _text(dom: str) -> str:
    """What a reader sees of a dumped page: no scripts, styles or tags, whitespace collapsed."""
    import html
    import re

    dom = re.sub(r"<(script|style)\b.*?</\1>", " ", dom, flags=re.S)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom)))


def test_mlflow_ui_shows_the_trials_side_by_side_in_a_real_browser(night):
    chromium = _chromium()
    client, exp, parent, trials = _runs(night)
    port = _free_port()
    mlflow = Path(sys.executable).parent / "mlflow"
    proc = subprocess.Popen([str(mlflow), "server", "--backend-store-uri", client.tracking_uri, "--host", "127.0.0.1",
                             "--port", str(port), "--workers", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=night)
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        _wait_http(f"http://127.0.0.1:{port}/health", proc, 120)
        base = f"http://127.0.0.1:{port}/#"
        ids = urllib.parse.quote(json.dumps([r.info.run_id for _, r in sorted(trials.items())]))
        compare = f"{base}/compare-runs?runs={ids}&experiments={urllib.parse.quote(json.dumps([exp.experiment_id]))}"
        runs_page = f"{base}/experiments/{exp.experiment_id}/runs"
        profile = night / "chromium-profile"
        dom = _browser(chromium, profile, compare, "--window-size=1600,1000", "--dump-dom").stdout
        shot = ARTIFACTS / "mlflow-ui-compare-trials.png"
        _browser(chromium, profile, compare, "--window-size=1600,2400", f"--screenshot={shot}")
        runs_dom = _browser(chromium, profile, runs_page, "--window-size=1600,1000", "--dump-dom").stdout
        _browser(chromium, profile, runs_page, "--window-size=1600,1000",
                 f"--screenshot={ARTIFACTS / 'mlflow-ui-study-runs.png'}")
    finally:
        _stop(proc)
    (ARTIFACTS / "mlflow-ui-compare-trials.html").write_text(dom)
    (ARTIFACTS / "mlflow-ui-study-runs.html").write_text(runs_dom)
    # The JavaScript app rendered the study's nested trial runs with their params and metrics.
    page, runs_page_text = _text(dom), _text(runs_dom)
    assert f"Comparing {len(trials)} Runs from 1 Experiment" in page
    for number in trials:
        assert f"trial-{number:04d}" in page
    # Metric rows are listed alphabetically in a scrolled table: the first ones are rendered.
    for name in ("Metrics", "completed", "e2e_ms_p99", "Parameters", "engine_args"):
        assert name in page
    assert "Training runs" in runs_page_text and f"{len(trials) + 1} matching runs" in runs_page_text
    assert shot.stat().st_size > 20_000 and shot.read_bytes()[:4] == b"\x89PNG"
    print(f"screenshots: {shot} and {ARTIFACTS / 'mlflow-ui-study-runs.png'}")
