"""Atomic writes with several writers on one file (workers of one study share results/<study>/)."""

from __future__ import annotations

import threading

from autotuner.util.files import write_atomically


def test_writers_racing_on_one_file_never_fail_or_leave_half_a_file(tmp_path):
    path = tmp_path / "study.html"
    texts = [f"writer {i}\n" * 2000 for i in range(8)]
    errors: list[BaseException] = []

    def write(text: str) -> None:
        try:
            for _ in range(50):
                write_atomically(path, text)
        except BaseException as e:  # noqa: BLE001 - the test reports any failure of a writer
            errors.append(e)

    threads = [threading.Thread(target=write, args=(t,)) for t in texts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert path.read_text() in texts
    assert [p.name for p in tmp_path.iterdir()] == ["study.html"]  # no temporary file left behind
