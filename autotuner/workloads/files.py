"""Reading workload files a line at a time: UTF-8 JSON Lines (one object a line, blank lines skipped),
or one JSON document. Every failure is a `WorkloadFileError` naming the file and line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autotuner.workloads.errors import WorkloadFileError


def _open(path: Path, mode: str = "r") -> Any:
    try:
        return path.open(mode) if "b" in mode else path.open(mode, encoding="utf-8")
    except FileNotFoundError:
        raise WorkloadFileError(path, "file not found") from None
    except IsADirectoryError:
        raise WorkloadFileError(path, "is a folder, not a file") from None
    except OSError as e:
        raise WorkloadFileError(path, f"cannot read ({e.strerror})") from None


def json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line; streams, so a large file costs no memory."""
    seen = False
    with _open(path, "rb") as f:  # bytes, decoded a line at a time: a bad byte is named at its own line
        for line_no, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise WorkloadFileError(path, f"not UTF-8 text (byte 0x{raw[e.start]:02x})", line=line_no) from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise WorkloadFileError(path, f"not JSON ({e.msg} at column {e.colno})", line=line_no) from None
            if not isinstance(obj, dict):
                raise WorkloadFileError(path, f"expected a JSON object, got {type(obj).__name__}", line=line_no)
            seen = True
            yield line_no, obj
    if not seen:
        raise WorkloadFileError(path, "empty: no request in it")


def json_document(path: Path) -> Any:
    """A whole JSON file (e.g. a ShareGPT dump: one array)."""
    with _open(path) as f:
        try:
            text = f.read()
        except UnicodeDecodeError as e:
            raise WorkloadFileError(path, f"not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start})"
                                    ) from None
    if not text.strip():
        raise WorkloadFileError(path, "empty: no request in it")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise WorkloadFileError(path, f"not JSON ({e.msg} at column {e.colno})", line=e.lineno) from None


def number(path: Path, line: int, obj: dict[str, Any], name: str, *, integer: bool = True,
           minimum: float = 1, required: bool = True) -> Any:
    """`obj[name]` as a number >= `minimum`, or a WorkloadFileError naming the field."""
    if name not in obj:
        if required:
            raise WorkloadFileError(path, "missing", line=line, field=name)
        return None
    value = obj[name]
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise WorkloadFileError(path, f"expected {'an integer' if integer else 'a number'}, got {value!r}",
                                line=line, field=name)
    if value < minimum:
        raise WorkloadFileError(path, f"must be >= {minimum:g}, got {value!r}", line=line, field=name)
    return value
