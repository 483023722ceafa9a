"""A lock file, for the one moment two tuners on one machine must not overlap: creating a SQLite
database (Optuna's or MLflow's), whose schema migrations race otherwise."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def sqlite_path(url: str) -> Path | None:
    """The database file of a sqlite:/// URL, or None for any other URL."""
    return Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None


@contextlib.contextmanager
def creating(url: str) -> Iterator[None]:
    """Hold the database's lock while it may be created; no-op for servers."""
    db = sqlite_path(url)
    if db is None:
        yield
        return
    with file_lock(db.with_name(db.name + ".lock")):
        yield
