"""Shared fixtures: the real llama-server binary and a generated model, made once per session.

Where an engine is missing the tests that need it skip with the reason, except under CI (CI=true),
where a missing engine is an error: CI must prove the real thing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autotuner import paths

REPO = Path(__file__).resolve().parent.parent


def _require(what: str, reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{what} is required in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def llama_server() -> str:
    binary = paths.llama_server_binary()
    if binary is None or not binary.is_file():
        _require("llama-server", "llama-server not built: run scripts/build-llama-server.sh")
    return str(binary)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 8 MB random-weight llama: fast to load, enough to exercise the real server."""
    from autotuner.models.tiny_gguf import write_tiny_llama_gguf

    path = tmp_path_factory.mktemp("models") / "tiny.gguf"
    return write_tiny_llama_gguf(path, size="tiny", seed=0)


@pytest.fixture(scope="session")
def small_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ~104M-param random-weight llama (214 MB): slow enough that slots and batching matter."""
    from autotuner.models.tiny_gguf import write_tiny_llama_gguf

    path = tmp_path_factory.mktemp("models") / "small.gguf"
    return write_tiny_llama_gguf(path, size="small", seed=0)
