"""Issue 5's last two deliverables on the real llama-server: a load search that finds, inside one launch
per trial, the highest concurrency meeting the SLO; and a two-objective study (throughput against p99
TTFT) whose answer is the Pareto front, run through the CLI as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from autotuner.compose import make_driver
from autotuner.config import load_experiment
from autotuner.core.objective import meets
from autotuner.core.progress import Progress
from autotuner.engines._base import get_engine
from autotuner.launchers.process import ProcessLauncher
from autotuner.tracking import MlflowTracker

pytestmark = pytest.mark.engine
REPO = Path(__file__).resolve().parents[2]


def write_experiment(folder: Path, model: Path, name: str, slots: list[int], body: str) -> Path:
    """An experiment searching llama-server's slots (-np), its study in `folder`, with `body` added."""
    (folder / "s.yaml").write_text(f"engine: llamacpp\nparams:\n  parallel: {{type: categorical, choices: {slots}}}\n")
    path = folder / "exp.yaml"
    # -c 4096: else llama.cpp sizes the KV cache to the model's context times the slots.
    path.write_text(f"name: {name}\nengine: llamacpp\nmodel: {{path: {model}}}\nsearch_space: s.yaml\n"
                    f"study: {{storage: 'sqlite:///{folder}/study.db', seed: 0}}\nengine_args: ['-c', '4096']\n" + body)
    return path


def test_load_search_finds_the_highest_concurrency_meeting_the_slo(tmp_path, small_model, llama_server):
    exp = load_experiment(write_experiment(tmp_path, small_model, "bisect", [1, 4], """\
workload: {num_prompts: 16, input_len: 8, output_len: 32, warmup_requests: 2}  # 16 on one slot: ~4 s to the last first token
load: {search: {max_concurrency: [1, 16], steps: 4}}
objective: {slo: {ttft_ms_p99: 2000}, max_error_rate: 0.2}  # one client: far below it even on a busy machine
enqueue: [{parallel: 1}]   # one slot: 16 clients queue far past the SLO, one client does not
confirm: {top_k: 0}        # the search is what is tested: a confirmation round took 5 of this test's 7.5 min here
"""))
    tracker = MlflowTracker(root=tmp_path / "mlruns")
    tuner = make_driver(exp, engine=get_engine("llamacpp"), launcher=ProcessLauncher(tmp_path / "procs"),
                        tracker=tracker, results_dir=tmp_path / "results",
                  binary=llama_server, progress=lambda n: Progress(n, "output_tok_per_s"))
    study = tuner.run(2)
    objective = exp.config.objective
    one_slot = next(t for t in study.trials if t.params == {"parallel": 1})
    assert one_slot.state == TrialState.COMPLETE, one_slot.user_attrs.get("failure_reason")
    for t in study.get_trials(states=(TrialState.COMPLETE,)):
        levels = t.user_attrs["levels"]
        loads = [m["max_concurrency"] for m in levels]
        assert loads[0] == 1 and len(loads) <= 4 and len(set(loads)) == len(loads)  # one launch, each load once
        assert all(1 <= c <= 16 for c in loads)
        passing = [m for m in levels if meets(m, objective)]
        found = max(m["max_concurrency"] for m in passing)
        assert t.user_attrs["max_load_meeting_slo"] == found
        assert t.value == max(m["output_tok_per_s"] for m in passing)  # scored by a level that meets the SLO
        assert len(t.intermediate_values) == len(levels)  # every probe reported its ceiling to the trial
        # Reported: the ceiling (pruning.py): a bound of the value while probes remain, the value at the end.
        reported = [t.intermediate_values[s] for s in sorted(t.intermediate_values)]
        assert reported[0] >= t.value and reported[-1] == t.value
    levels = one_slot.user_attrs["levels"]
    # One slot and 16 clients: the high end fails, so the search went between the ends.
    assert not meets(levels[1], objective) and len(levels) > 2, levels
    run = MlflowClient(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}").search_runs(
        [tracker.experiment_id], filter_string=f"tags.`autotuner.trial` = '{one_slot.number}'")[0]
    assert run.data.metrics["max_load_meeting_slo"] == one_slot.user_attrs["max_load_meeting_slo"]


def test_two_objectives_end_with_the_pareto_front(tmp_path, small_model, llama_server):
    write_experiment(tmp_path, small_model, "pareto", [1, 2, 4], """\
workload: {num_prompts: 8, input_len: 8, output_len: 12, warmup_requests: 2}
load: {max_concurrency: [1, 4]}
objective: {metrics: [output_tok_per_s, ttft_ms_p99], directions: [maximize, minimize]}
confirm: {top_k: 1}
""")
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "COLUMNS": "200",
           "AUTOTUNER_LLAMA_SERVER": llama_server}
    out = subprocess.run([sys.executable, "-m", "autotuner.cli", "run", "--experiment", "exp.yaml", "--trials", "3",
                          "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    study = optuna.load_study(study_name="pareto", storage=f"sqlite:///{tmp_path}/study.db")
    assert len(study.directions) == 2 and study.metric_names == ["output_tok_per_s", "ttft_ms_p99"]
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    assert complete, out.stderr[-3000:]
    for t in complete:  # both values read at the level with the best throughput
        level = max(t.user_attrs["levels"], key=lambda m: m["output_tok_per_s"])
        assert t.values == [level["output_tok_per_s"], level["ttft_ms_p99"]]
    front = {t.number for t in study.best_trials}
    # The closing output: the front with a command per member, not one winner.
    assert "Pareto front of study 'pareto'" in out.stdout
    assert all(f"#{n} (output_tok_per_s " in out.stdout for n in front)
    assert "confirm: skipped for a multi-objective study" in out.stderr
    best = json.loads((tmp_path / "results" / "pareto" / "best.json").read_text())
    assert {m["trial"] for m in best["front"]} <= front and all("llama-server" in m["command"] for m in best["front"])
    assert "## Pareto front" in (tmp_path / "results" / "pareto" / "report.md").read_text()
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    experiment = client.get_experiment_by_name("pareto")
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.`autotuner.role` = 'trial'")
    scored = [r for r in runs if r.data.tags.get("autotuner.state") == "COMPLETE"]
    assert scored and all({"output_tok_per_s", "ttft_ms_p99"} <= set(r.data.metrics) for r in scored)
