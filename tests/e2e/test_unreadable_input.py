"""An experiment or search-space file that cannot be read as text, or an experiment that names something
that does not exist or cannot work, is one line naming the file (and field), exit code 2, before anything
starts: a first run with a wrong input leaves the folder as it was (no results/, no mlruns/)."""

from __future__ import annotations

import pytest

from tests.support import autotuner

SPACE = "engine: llamacpp\nparams:\n  parallel: {type: int, low: 1, high: 4}\n"
EXPERIMENT = "name: x\nengine: llamacpp\nmodel: {path: m.gguf}\nsearch_space: s.yaml\n"
GGUF_BYTES = b"GGUF\x03\x00\x00\x00\x00\x00\x00\x00\xff\xfe\x00\x01"


def _run(tmp_path, experiment: bytes | str | None, space: bytes | str | None = SPACE, *args: str):
    (tmp_path / "m.gguf").write_bytes(b"")
    for name, content in (("exp.yaml", experiment), ("s.yaml", space)):
        if isinstance(content, bytes):
            (tmp_path / name).write_bytes(content)
        elif isinstance(content, str):
            (tmp_path / name).write_text(content)
        else:
            (tmp_path / name).mkdir()
    before = set(tmp_path.iterdir())
    out = autotuner("run", "--experiment", "exp.yaml", "--trials", "1", *args, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr  # one line, no traceback
    assert set(tmp_path.iterdir()) == before  # nothing started or written
    return lines[0]


@pytest.mark.parametrize("experiment, space, expected", [
    (GGUF_BYTES, SPACE, "error: exp.yaml: not a UTF-8 text file (byte 0xff at offset 12)"),
    (EXPERIMENT.replace("x", "caf\xe9").encode("latin-1"), SPACE, "error: exp.yaml: not a UTF-8 text file (byte 0xe9"),
    (None, SPACE, "error: exp.yaml: cannot read (Is a directory)"),
    (EXPERIMENT, GGUF_BYTES, "s.yaml: not a UTF-8 text file (byte 0xff at offset 12)"),
    (EXPERIMENT, None, "s.yaml: cannot read (Is a directory)"),
])
def test_unreadable_file_is_one_line_naming_it(tmp_path, experiment, space, expected):
    line = _run(tmp_path, experiment, space)
    assert line.startswith("error: ") and expected in line


@pytest.mark.parametrize("objective", ["{metric: bogus_metric}",
                                       "{metrics: [output_tok_per_s, bogus_metric], directions: [maximize, minimize]}"])
def test_an_objective_metric_that_is_not_measured_is_refused_before_any_launch(tmp_path, objective):
    line = _run(tmp_path, EXPERIMENT + f"objective: {objective}\nstudy: {{pruner: none}}\n")
    assert line.startswith("error: exp.yaml: field 'objective.")
    assert "'bogus_metric' is not a metric the load generator measures (metrics: completed," in line
    assert "output_tok_per_s" in line and "ttft_ms_p99" in line


@pytest.mark.parametrize("section, args, expected", [
    ("study: {storage: 'notadb://x'}\n", (), "error: exp.yaml: field 'study.storage': no database called 'notadb'"),
    ("study: {storage: 'sqlite:///no/such/folder/s.db'}\n", (),
     "error: exp.yaml: field 'study.storage': folder no/such/folder does not exist"),
    ("study: {storage: 'not a url'}\n", (), "field 'study.storage': 'not a url' is not a database URL"),
    ("tracking: {uri: runs}\n", (), "error: exp.yaml: field 'tracking.uri': 'runs' is a folder (MLflow's file store)"),
    ("tracking: {uri: 'notadb://y'}\n", (), "error: exp.yaml: field 'tracking.uri': no database called 'notadb'"),
    ("", ("--tracking-uri", "file:///tmp/runs"), "error: --tracking-uri: 'file:///tmp/runs' is a folder"),
    ("", ("--storage", "notadb://z"), "field 'study.storage': no database called 'notadb'"),
])
def test_a_storage_or_tracking_uri_that_cannot_work_is_one_line_and_writes_nothing(tmp_path, section, args, expected):
    line = _run(tmp_path, EXPERIMENT + section, SPACE, *args)
    assert expected in line, line
