"""The one error a workload file raises: which file, which line, which field, and what is wrong."""

from __future__ import annotations

from pathlib import Path


class WorkloadFileError(ValueError):
    """A workload file that cannot be used, e.g. `traffic.jsonl: line 7: field 'timestamp': goes backwards`."""

    def __init__(self, path: Path | str, message: str, *, line: int | None = None, field: str | None = None):
        where = "".join((f": line {line}" if line is not None else "", f": field '{field}'" if field else ""))
        super().__init__(f"{path}{where}: {message}")
        self.path, self.line, self.field = Path(path), line, field
