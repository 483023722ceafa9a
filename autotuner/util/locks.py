"""A lock for the moments two tuners on one study must not overlap: creating its database (schema
migrations race otherwise) and queueing trials (else the baseline, or an advisor's proposal, runs
twice). A lock file beside a SQLite database; a PostgreSQL advisory lock (held by one connection) for
workers on many machines."""

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


@contextlib.contextmanager
def file_lock_if_free(path: Path) -> Iterator[bool]:
    """The lock at `path` if nobody holds it (True), else nothing (False), without waiting."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def sqlite_path(url: str) -> Path | None:
    """The database file of a sqlite:/// URL, or None for any other URL."""
    return Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None


ADVISORY_KEY = 0x6175746F74756E  # "autotun": one lock number for all autotuner studies in a database


@contextlib.contextmanager
def exclusive(url: str) -> Iterator[None]:
    """Hold the database's lock: one tuner at a time creates it, queues trials or opens the run tree;
    no-op for other servers."""
    db = sqlite_path(url)
    if db is not None:
        with file_lock(db.with_name(db.name + ".lock")):
            yield
    elif url.startswith("postgresql"):
        with _advisory_lock(url):
            yield
    else:
        yield


@contextlib.contextmanager
def _advisory_lock(url: str) -> Iterator[None]:
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    from autotuner.util.extras import require

    require("psycopg", "postgres", "a PostgreSQL study storage")  # SQLAlchemy's default driver for postgresql://

    engine = sqlalchemy.create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:  # the lock is the connection's: closing it releases the lock too
            conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": ADVISORY_KEY})
            try:
                yield
            finally:
                conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:key)"), {"key": ADVISORY_KEY})
    finally:
        engine.dispose()
