"""Shared fixtures: the real llama-server binary, a generated model, a Docker daemon and the engine image,
made or found once per session. Helpers that tests import live in tests/support.py, not here.

Where an engine or a Docker daemon is missing the tests that need it skip with the reason, except under
CI (CI=true), under scripts/test-all.sh (AUTOTUNER_REQUIRE_ALL=1) or, for Docker, with
AUTOTUNER_REQUIRE_DOCKER=1, where a missing one is an error: the complete suite must prove the real thing.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from autotuner.util import paths
from tests.support import (
    REPO,
    require,
)


@pytest.fixture(scope="session")
def llama_server() -> str:
    binary = paths.llama_server_binary()
    if binary is None or not binary.is_file():
        require("llama-server", "llama-server not built: run scripts/build-llama-server.sh")
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


@pytest.fixture(scope="session")
def docker_client():
    """A client of the daemon at $DOCKER_HOST (`eval "$(scripts/start-dockerd.sh)"` starts one)."""
    from autotuner.launchers.docker import DockerSetupError, connect

    try:
        return connect()
    except DockerSetupError as e:
        require("Docker", str(e))


@pytest.fixture(scope="session")
def engine_image(docker_client, llama_server) -> str:
    """The llama-server image, built locally from this machine's binary (skipped when up to date)."""
    out = subprocess.run([str(REPO / "scripts" / "build-engine-image.sh")], capture_output=True, text=True,
                         env={**os.environ, "AUTOTUNER_LLAMA_SERVER": llama_server}, timeout=300)
    if out.returncode != 0:
        pytest.fail(f"scripts/build-engine-image.sh failed:\n{out.stderr}")
    return out.stdout.strip().splitlines()[-1]


# --- where Docker is required (CI), a skipped Docker test fails the run --------------------------------

_skipped_docker: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and "docker" in report.keywords and os.environ.get("AUTOTUNER_REQUIRE_DOCKER"):
        _skipped_docker.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _skipped_docker:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter) -> None:
    if _skipped_docker:
        terminalreporter.write_line(f"AUTOTUNER_REQUIRE_DOCKER is set but {len(_skipped_docker)} Docker test(s) "
                                    "skipped: " + ", ".join(_skipped_docker), red=True)


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    """The vLLM venv's python (scripts/setup-vllm.sh); skip locally, fail under CI when it is missing."""
    python = paths.vllm_python()
    if python is None or not python.exists():
        require("vLLM", "vLLM's CPU build is not installed: run scripts/setup-vllm.sh")
    return python


@pytest.fixture(scope="session")
def hf_model(vllm_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ~38M-param random-weight Llama folder of experiments/vllm-cpu.yaml, written by the vLLM venv."""
    import subprocess

    out = tmp_path_factory.mktemp("hf") / "llama-38m"
    subprocess.run([str(vllm_python), str(REPO / "scripts" / "tiny_hf.py"), "--out", str(out)],
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








@pytest.fixture(scope="session")
def services() -> dict[str, str]:
    """A PostgreSQL URL and an MLflow tracking server URI (`eval "$(scripts/start-services.sh)"`)."""
    url, uri = os.environ.get("AUTOTUNER_POSTGRES_URL"), os.environ.get("AUTOTUNER_MLFLOW_URI")
    if not (url and uri):
        require("PostgreSQL and an MLflow server",
                 'no shared study services: eval "$(scripts/start-services.sh)" sets AUTOTUNER_POSTGRES_URL '
                 "and AUTOTUNER_MLFLOW_URI")
    return {"storage": url, "tracking_uri": uri}
