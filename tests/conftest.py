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
def vllm_python() -> Path:
    """The vLLM venv's python (scripts/setup-vllm.sh); skip locally, fail under CI when it is missing."""
    python = paths.vllm_python()
    if python is None or not python.exists():
        _require("vLLM", "vLLM's CPU build is not installed: run scripts/setup-vllm.sh")
    return python


@pytest.fixture(scope="session")
def hf_model(vllm_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ~38M-param random-weight Llama folder of experiments/vllm-cpu.yaml, written by the vLLM venv."""
    import subprocess

    out = tmp_path_factory.mktemp("hf") / "llama-38m"
    subprocess.run([str(vllm_python), str(REPO / "autotuner" / "models" / "tiny_hf.py"), "--out", str(out)],
                   check=True, capture_output=True, timeout=300)
    return out


@pytest.fixture
def vllm_caches(monkeypatch: pytest.MonkeyPatch):
    """Point every cache vLLM and torch write at a temporary folder, removed afterwards (and yield it)."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="autotuner-vllm-test-"))
    for var, sub in (("VLLM_CACHE_ROOT", "vllm"), ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
                     ("TRITON_CACHE_DIR", "triton"), ("TMPDIR", "tmp"), ("HF_HOME", "hf")):
        (folder / sub).mkdir()
        monkeypatch.setenv(var, str(folder / sub))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def processes_with_env(value: str) -> list[int]:
    """PIDs of processes whose environment mentions `value` (a test's unique temp folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if value.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
