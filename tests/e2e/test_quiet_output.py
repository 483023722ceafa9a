"""`autotuner run` prints only its own lines: the libraries' logging (MLflow creating its tables, ...)
goes to results/<study>/autotuner.log, unless --verbose."""

from __future__ import annotations

import re

import pytest

from tests.support import REPO, autotuner

# The tool's own stderr lines: progress of a trial, and its notes.
OWN = re.compile(r"^(\[trial \d+/\d+ · #\d+\] |confirm: |workload: |    workload: )")


@pytest.mark.engine
def test_a_first_run_prints_only_the_tools_lines_and_logs_the_libraries_to_a_file(tmp_path, tiny_model,
                                                                                 llama_server):
    (tmp_path / "exp.yaml").write_text(
        (REPO / "experiments" / "quickstart.yaml").read_text()
        .replace("../models/quickstart.gguf", str(tiny_model))
        .replace("../search_spaces/llamacpp.yaml", str(REPO / "search_spaces" / "llamacpp.yaml"))
        .replace("num_prompts: 32", "num_prompts: 8").replace("max_concurrency: [4, 16]", "max_concurrency: [2]")
        .replace("repeats: 3", "repeats: 1"))
    out = autotuner("run", "--experiment", "exp.yaml", "--trials", "1", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    foreign = [line for line in out.stderr.splitlines() if line.strip() and not OWN.match(line)]
    assert foreign == []
    log = (tmp_path / "results" / "quickstart" / "autotuner.log").read_text()
    assert "INFO mlflow.store.db.utils: Creating initial MLflow database tables" in log
