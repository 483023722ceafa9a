"""`autotuner transfer` as a user runs it: a study's winner and the engine defaults, interleaved, on
another experiment's traffic, on a real llama-server; and what the table says of the rounds (pure)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotuner.core.transfer import TransferRow, table_lines
from autotuner.workloads.samples import write as write_samples

REPO = Path(__file__).resolve().parents[2]
SPACE = "engine: llamacpp\nparams:\n  parallel: {type: categorical, choices: [1, 2]}\n"


def autotuner(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "autotuner.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def experiment(name: str, model: Path, workload: str, load: str) -> str:
    return f"""\
name: {name}
engine: llamacpp
model: {{path: {model}, name: m}}
search_space: space.yaml
workload: {workload}
load: {load}
objective: {{metric: output_tok_per_s, slo: {{ttft_ms_p99: 60000}}}}
study: {{storage: "sqlite:///study.db", seed: 0}}
tracking: {{uri: "sqlite:///mlflow.db"}}
quality: off
advisors: []
confirm: {{top_k: 0}}
engine_args: ["-t", "1", "-c", "4096"]
enqueue: [{{parallel: 2}}]
"""


@pytest.mark.engine
def test_the_winner_is_measured_beside_the_defaults_on_another_workload(tmp_path, llama_server, tiny_model):
    write_samples(tmp_path / "workloads")
    (tmp_path / "space.yaml").write_text(SPACE)
    (tmp_path / "synthetic.yaml").write_text(experiment(
        "synthetic", tiny_model, "{num_prompts: 8, input_len: 32, output_len: 8, warmup_requests: 1}",
        "{max_concurrency: [2]}"))
    (tmp_path / "trace.yaml").write_text(experiment(
        "trace", tiny_model, "{trace: {path: workloads/trace.jsonl, block_size: 64, duration_s: 3}, warmup_requests: 1}",
        "{speedup: [2]}"))
    out = autotuner("run", "--experiment", "synthetic.yaml", "--trials", "2", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    out = autotuner("transfer", "--experiment", "synthetic.yaml", "--to", "trace.yaml", "--repeats", "2", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "beside the engine defaults, 2 interleaved round(s) on each workload" in out.stdout
    assert "| trace | trace workloads/trace.jsonl (mooncake, 64-token blocks, 3 s of it) | output_tok_per_s |" \
        in out.stdout
    data = json.loads((tmp_path / "results" / "synthetic" / "transfer.json").read_text())
    (row,) = data["rows"]
    assert len(row["winner"]) == 2 and len(row["defaults"]) == 2 and None not in row["winner"] + row["defaults"]
    assert row["verdict"] in ("the tuned config wins in every round", "within the noise: neither wins every round",
                              "the defaults win in every round: the tuned config does not carry over")
    # the launches, interleaved: winner, defaults, winner, defaults
    order = [line.split("]")[0] for line in out.stderr.splitlines() if "confirming" in line]
    assert len(order) == 4, out.stderr[-2000:]


def test_a_study_not_run_yet_is_one_line_and_exit_2(tmp_path, tiny_model):
    (tmp_path / "space.yaml").write_text(SPACE)
    (tmp_path / "a.yaml").write_text(experiment("a", tiny_model, "{num_prompts: 4}", "{max_concurrency: [2]}"))
    out = autotuner("transfer", "--experiment", "a.yaml", "--to", "a.yaml", cwd=tmp_path)
    assert out.returncode == 2 and out.stderr == "error: no study 'a' in sqlite:///study.db (studies: none)\n"


@pytest.mark.parametrize("winner, defaults, verdict", [
    ([110.0, 112.0], [100.0, 101.0], "the tuned config wins in every round"),
    ([90.0, 91.0], [100.0, 101.0], "the defaults win in every round: the tuned config does not carry over"),
    ([110.0, 95.0], [100.0, 101.0], "within the noise: neither wins every round"),
    ([None], [100.0], "not measured: winner: infeasible: ctx too small"),
])
def test_the_table_says_whether_the_winner_won_every_round(winner, defaults, verdict):
    row = TransferRow("trace", "trace t.jsonl", "output_tok_per_s", "maximize", winner, defaults,
                      ["winner: infeasible: ctx too small"] if None in winner else [])
    assert row.verdict == verdict
    assert verdict in table_lines([row])[-1]
