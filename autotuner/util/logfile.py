"""Where the libraries' own logging goes during `autotuner run`: a log file beside the study's results
(results/<study>/autotuner.log), so the terminal shows only the tool's progress lines. `--verbose`
leaves them on stderr. Never touches the tool's own output (progress, notes, errors), which is printed
directly, not logged.
"""

from __future__ import annotations

import logging
from pathlib import Path

# The loggers of the libraries a run drives; MLflow and Alembic print INFO lines when a store is created.
LIBRARIES = ("mlflow", "alembic", "optuna", "httpx", "httpcore", "urllib3", "docker", "sqlalchemy", "py.warnings")
LOG_NAME = "autotuner.log"


class _LazyFileHandler(logging.FileHandler):
    """Creates its folder and file at the first record: bad input, refused before any start, writes nothing."""

    def __init__(self, path: Path):
        super().__init__(path, encoding="utf-8", delay=True)

    def _open(self):  # logging.FileHandler._open: private, so its signature is not restated here
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()


def route_library_logs(folder: Path) -> Path:
    """Send every library logger above to `folder`/autotuner.log instead of the terminal; returns the file."""
    import mlflow  # noqa: F401 - importing it installs its stderr handler: replace it after, not before

    path = folder / LOG_NAME
    handler = _LazyFileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.captureWarnings(True)  # Python warnings (deprecations, Optuna's experimental notes) too
    for name in LIBRARIES:
        logger = logging.getLogger(name)
        for old in list(logger.handlers):
            logger.removeHandler(old)
        logger.addHandler(handler)
        logger.propagate = False
    return path
