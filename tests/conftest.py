"""Shared fixtures and helpers: the real llama-server binary, a generated model, a Docker daemon and the engine
image, made or found once per session.

Where an engine or a Docker daemon is missing the tests that need it skip with the reason, except under
CI (CI=true), under scripts/test-all.sh (AUTOTUNER_REQUIRE_ALL=1) or, for Docker, with
AUTOTUNER_REQUIRE_DOCKER=1, where a missing one is an error: the complete suite must prove the real thing.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from optuna.trial import FrozenTrial

from autotuner.util import paths

REPO = Path(__file__).resolve().parent.parent


def everything_required() -> bool:
    """CI and scripts/test-all.sh: every engine and service must be there (a missing one fails, not skips)."""
    return bool(os.environ.get("CI") or os.environ.get("AUTOTUNER_REQUIRE_ALL"))


def _require(what: str, reason: str) -> None:
    if everything_required() or (what == "Docker" and os.environ.get("AUTOTUNER_REQUIRE_DOCKER")):
        pytest.fail(f"{what} is required in the complete suite (scripts/test-all.sh, CI): {reason}")
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


@pytest.fixture(scope="session")
def docker_client():
    """A client of the daemon at $DOCKER_HOST (`eval "$(scripts/start-dockerd.sh)"` starts one)."""
    from autotuner.launchers.docker import DockerSetupError, connect

    try:
        return connect()
    except DockerSetupError as e:
        _require("Docker", str(e))


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
        _require("vLLM", "vLLM's CPU build is not installed: run scripts/setup-vllm.sh")
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


def launched(trials: Iterable[FrozenTrial]) -> list[FrozenTrial]:
    """The trials that ran: a re-proposal of a config measured or being measured (`duplicate_of`) is told
    FAIL and never launched."""
    return [t for t in trials if "duplicate_of" not in t.user_attrs]


def with_timing_retries(check: Callable[[], None], attempts: int = 5) -> None:
    """Run a timing check until it passes, at most `attempts` times: on a shared machine one stall can fail
    a run, while a real defect fails every one."""
    for attempt in range(attempts):
        try:
            check()
            return
        except AssertionError:
            if attempt == attempts - 1:
                raise


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


@pytest.fixture(scope="session")
def services() -> dict[str, str]:
    """A PostgreSQL URL and an MLflow tracking server URI (`eval "$(scripts/start-services.sh)"`)."""
    url, uri = os.environ.get("AUTOTUNER_POSTGRES_URL"), os.environ.get("AUTOTUNER_MLFLOW_URI")
    if not (url and uri):
        _require("PostgreSQL and an MLflow server",
                 'no shared study services: eval "$(scripts/start-services.sh)" sets AUTOTUNER_POSTGRES_URL '
                 "and AUTOTUNER_MLFLOW_URI")
    return {"storage": url, "tracking_uri": uri}
