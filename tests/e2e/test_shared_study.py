"""Two tuner processes on one SQLite study share it correctly: every trial lands once, none is run
twice by accident, and the storage stays readable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from tests.support import launched

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.engine


def test_two_tuners_share_one_sqlite_study(tmp_path, tiny_model, llama_server):
    (tmp_path / "s.yaml").write_text(
        "engine: llamacpp\nparams:\n  parallel: {type: int, low: 1, high: 64}\n  batch_size: {type: int, low: 64, high: 2048}\n")
    (tmp_path / "exp.yaml").write_text(
        f"name: shared\nengine: llamacpp\nmodel: {{path: {tiny_model}}}\nsearch_space: s.yaml\n"
        "workload: {num_prompts: 4, input_len: 8, output_len: 8, warmup_requests: 0}\n"
        "load: {max_concurrency: [2]}\nstudy: {seed: null}\nconfirm: {top_k: 0}\n"
        # One thread a server, the baseline's too: two servers taking both cores of a 2-core machine each
        # ran 10-17x slower than one alone, and this test timed out on a CI machine.
        "engine_args: ['-t', '1']\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "AUTOTUNER_CACHE": str(tmp_path / "cache"),
           "AUTOTUNER_LLAMA_SERVER": llama_server}
    procs = [subprocess.Popen([sys.executable, "-m", "autotuner.cli", "run", "-e", "exp.yaml", "--trials", "4"],
                              cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):  # one output per process
        assert p.returncode == 0, err[-3000:]
    everything = optuna.load_study(study_name="shared", storage=f"sqlite:///{tmp_path}/autotuner.db").get_trials()
    trials = launched(everything)
    assert len(trials) == 8
    assert sorted(t.number for t in everything) == list(range(len(everything)))
    assert [(t.number, t.state.name, t.user_attrs.get("failure_class"), t.user_attrs.get("failure_reason")) for t in trials if t.state.name != "COMPLETE"] == []
    assert sum(bool(t.user_attrs.get("baseline")) for t in trials) == 1
    assert len({t.user_attrs["worker"] for t in trials}) == 2  # both did work
