"""Search that earns its keep, on the real llama-server: a load sweep inside each trial, a pruner that
stops a bad trial mid-sweep, a crash region that is not launched again, and a study that stops by
convergence before its trial budget, then confirms its best configurations."""

from __future__ import annotations

import pytest
from optuna.trial import TrialState

from autotuner.compose import make_driver
from autotuner.config import load_experiment
from autotuner.core.progress import Progress
from autotuner.engines._base import get_engine
from autotuner.launchers.process import ProcessLauncher
from autotuner.tracking import MlflowTracker
from tests.support import launched

pytestmark = pytest.mark.engine


def test_sweep_prune_crash_awareness_convergence_and_confirmation(tmp_path, small_model, llama_server):
    (tmp_path / "s.yaml").write_text(
        # Ten configs: room for `patience` trials after even a late best, so the study ends by convergence.
        "engine: llamacpp\nparams:\n  parallel: {type: categorical, choices: [1, 2, 4, 8, 16]}\n"
        "  batch_size: {type: categorical, choices: [8, 512]}\n")
    (tmp_path / "exp.yaml").write_text(f"""\
name: search
engine: llamacpp
model: {{path: {small_model}}}
search_space: s.yaml
workload: {{num_prompts: 12, input_len: 8, output_len: 12, warmup_requests: 2}}
# Every level, however busy the machine. From 4 clients: one slot serves a quarter of them at a time, so the
# one-slot config is below the median from the first level (at 2 clients, on a busy machine, it was not).
load: {{max_concurrency: [4, 8, 16], stop_at_saturation: false}}
objective: {{slo: {{ttft_ms_p99: 60000}}}}
study: {{storage: "sqlite:///{tmp_path}/study.db", pruner: median, seed: 3}}
stop: {{patience: 4, min_improvement: 0.5}}
engine_args: ['-c', '4096']   # else llama.cpp sizes the KV cache to the model's context times the slots
confirm: {{top_k: 2, repeats: 1, near: 0}}  # near has its own test: here, exactly the top two and the baseline
enqueue:
  - {{parallel: 4, batch_size: 512}}
  - {{parallel: 8, batch_size: 512}}
  - {{parallel: 16, batch_size: 8}}    # llama.cpp aborts: more slots than the batch
  - {{parallel: 1, batch_size: 512}}   # one slot for 4 to 16 clients: far below the median
""")
    exp = load_experiment(tmp_path / "exp.yaml")
    tuner = make_driver(exp, engine=get_engine("llamacpp"), launcher=ProcessLauncher(tmp_path / "procs"),
                  tracker=MlflowTracker(root=tmp_path / "mlruns"), results_dir=tmp_path / "results",
                  binary=llama_server, progress=lambda n: Progress(n, "output_tok_per_s"))
    study = tuner.run(30)
    trials = study.get_trials()

    assert len(trials) < 30 and "converged" in study.user_attrs["stop_reason"]
    crash = [t for t in trials if t.params == {"parallel": 16, "batch_size": 8}]
    assert crash[0].state == TrialState.FAIL and crash[0].user_attrs["failure_class"] == "assert"
    launched_crashes = launched(crash)
    assert len(launched_crashes) == 1  # the crash region is never launched again
    assert all(t.user_attrs["duplicate_of"] == crash[0].number for t in crash[1:])  # re-proposals: not launched
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    assert pruned and all(len(t.intermediate_values) < 3 for t in pruned)  # stopped before the last level
    swept = [t for t in trials if t.state == TrialState.COMPLETE]
    # Every level in one launch, unless requests failed at one: more load only fails more, so it ends there.
    assert swept and all(len(t.user_attrs["levels"]) == 3 or t.user_attrs["levels"][-1]["error_rate"] > 0
                         for t in swept)
    confirmation = study.user_attrs["confirmation"]
    # One more measurement of each of the top two and of the baseline, in one round (None: that re-launch
    # failed, which is recorded too).
    baseline = next(t.number for t in trials if t.user_attrs.get("baseline"))
    assert len(confirmation) == 3 and str(baseline) in confirmation
    assert all(len(v) == 1 and (v[0] is None or v[0] > 0) for v in confirmation.values())
    measured = [v[0] for v in confirmation.values() if v[0] is not None]
    assert len(set(measured)) == len(measured)  # each re-launch scored by its own levels, not the one before
