"""Writing a file so that a reader never sees half of it, even while other workers of the study write the
same file (the `--parallel` workers on one node share results/<study>/)."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary path to write; it replaces `path` when the block ends without an error."""
    # Named for this process and thread: another writer's rename must not take our file.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        yield tmp
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomically(path: Path, text: str) -> None:
    with replacing(path) as tmp:
        tmp.write_text(text)
