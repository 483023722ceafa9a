"""Where autotuner keeps things outside the repository: the user cache (engine builds, venvs).

Every location is derived here, once, so scripts, tests and the CLI agree on it.
"""

from __future__ import annotations

import os
import platform
import shutil
from pathlib import Path

LLAMA_CPP_PYTHON_VERSION = "0.3.36"  # the sdist llama-server is built from; scripts/build-llama-server.sh


def cache_dir() -> Path:
    """The user cache folder: $AUTOTUNER_CACHE, else $XDG_CACHE_HOME/autotuner, else ~/.cache/autotuner."""
    if env := os.environ.get("AUTOTUNER_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "autotuner"


def llama_server_binary() -> Path | None:
    """The llama-server to run: $AUTOTUNER_LLAMA_SERVER, else the cached build, else one on PATH."""
    if env := os.environ.get("AUTOTUNER_LLAMA_SERVER"):
        return Path(env)
    built = cache_dir() / "llama-server" / f"{LLAMA_CPP_PYTHON_VERSION}-{platform.machine()}" / "llama-server"
    if built.is_file():
        return built
    found = shutil.which("llama-server")
    return Path(found) if found else None
