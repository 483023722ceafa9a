"""What tests share: helpers every kind of test may import (never from conftest.py or another test
module): the repository's root, whether the complete suite requires every engine, a study of the fake
engine, the CLI as a subprocess, scripted advisors, config files written for a test.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from optuna.trial import FrozenTrial
from rich.console import Console

from autotuner.advisors import Proposal, StudySoFar
from autotuner.compose import make_driver
from autotuner.config import SearchSpaceConfig, load_experiment
from autotuner.config.space import SearchSpace
from autotuner.core.driver import StudyDriver
from autotuner.core.progress import Progress
from autotuner.core.record import TrialView
from autotuner.engines._base import get_engine
from autotuner.launchers.process import ProcessLauncher
from autotuner.tracking import MlflowTracker
from tests.fake_engine import FakeEngine

REPO = Path(__file__).resolve().parent.parent


def everything_required() -> bool:
    """CI and scripts/test-all.sh: every engine and service must be there (a missing one fails, not skips)."""
    return bool(os.environ.get("CI") or os.environ.get("AUTOTUNER_REQUIRE_ALL"))


def require(what: str, reason: str) -> None:
    if everything_required() or (what == "Docker" and os.environ.get("AUTOTUNER_REQUIRE_DOCKER")):
        pytest.fail(f"{what} is required in the complete suite (scripts/test-all.sh, CI): {reason}")
    pytest.skip(reason)


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
    return _processes_whose(value, "environ")


def processes_naming(value: str) -> list[int]:
    """PIDs of processes whose command line mentions `value` (a model's path, a cluster's folder)."""
    return _processes_whose(value, "cmdline")


def container_guards(container_id: str) -> set[int]:
    """PIDs of a Docker container's guards (launchers/container_guard.py; its containerd shim names its id too)."""
    return set(processes_naming(container_id)) & set(processes_naming("container_guard"))


def _processes_whose(value: str, part: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if value.encode() in (entry / part).read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


WORK = "workload: {num_prompts: 16, input_len: 8, output_len: 16, warmup_requests: 0}\n"


def study(tmp_path: Path, space: str, body: str, n: int, study_extra: str = "", startup_s: float = 10) -> tuple[list, str]:
    """Run `n` trials of a study of the fake engine; its trials and what progress printed."""
    driver, out = worker(tmp_path, space, body, study_extra, startup_s)
    return driver.run(n).get_trials(), out.getvalue()


def worker(tmp_path: Path, space: str, body: str, study_extra: str = "",
           startup_s: float = 10) -> tuple[StudyDriver, io.StringIO]:
    """A driver of a study of the fake engine (another one on the same files: another worker on the study),
    and where its progress prints."""
    model = tmp_path / "model.bin"
    model.write_bytes(b"fake")
    (tmp_path / "s.yaml").write_text("engine: fake\nparams:\n" + space)
    (tmp_path / "exp.yaml").write_text(
        f"name: fake\nengine: fake\nmodel: {{path: {model}, name: m}}\nsearch_space: s.yaml\n"
        f"study: {{storage: 'sqlite:///{tmp_path}/s.db', seed: 0{study_extra}}}\nstartup_timeout_s: {startup_s}\n" + body)
    out = io.StringIO()
    driver = make_driver(load_experiment(tmp_path / "exp.yaml"), engine=FakeEngine(),
                         launcher=ProcessLauncher(tmp_path / "procs"), tracker=MlflowTracker(root=tmp_path / "mlruns"),
                         results_dir=tmp_path / "results",
                         progress=lambda total: Progress(total, "output_tok_per_s", Console(file=out, width=300)))
    return driver, out


LLAMA_SPACE = SearchSpace(SearchSpaceConfig.model_validate({"engine": "llamacpp", "params": {
    "parallel": {"type": "int", "low": 1, "high": 16, "log": True},
    "threads": {"type": "int", "low": 1, "high": 2},
    "batch_size": {"type": "categorical", "choices": [128, 512, 2048]},
    "cont_batching": {"type": "bool"},
    "flash_attn": {"type": "categorical", "choices": ["on", "off", "auto"]},
    "cache_type_v": {"type": "categorical", "choices": ["f16", "q8_0"], "condition": "flash_attn != 'off'"},
    "ctx_size": {"type": "categorical", "choices": [4096, 8192, 16384]},
    "kv_unified": {"type": "bool"},
}}))


class Scripted:
    """An advisor that proposes a fixed list (as a test instrument): one infeasible, one twice."""

    name = "scripted"

    def __init__(self, proposals: list[Proposal]):
        self.proposals = proposals
        self.seen: list[int] = []

    def propose(self, s: StudySoFar) -> list[Proposal]:
        self.seen.append(len(s.trials))
        return self.proposals


def so_far(trials: list[TrialView] = (), max_load: float = 16) -> StudySoFar:
    engine = get_engine("llamacpp")
    return StudySoFar(trials=list(trials), space=LLAMA_SPACE, load_key="max_concurrency", max_load=max_load, cpus=2,
                      gpus=0, metric="output_tok_per_s", direction="maximize", defaults=engine.defaults())


def autotuner(*args: str, cwd: Path, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "COLUMNS": "200", **(env or {})}
    return subprocess.run([sys.executable, "-m", "autotuner.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


BASE = """\
name: t
engine: llamacpp
model: {path: model.gguf}
search_space: space.yaml
"""


SPACE = """\
engine: llamacpp
params:
  parallel: {type: int, low: 1, high: 8}
"""


def write(tmp_path: Path, experiment: str, space: str = SPACE) -> Path:
    (tmp_path / "space.yaml").write_text(space)
    (tmp_path / "model.gguf").write_bytes(b"")
    path = tmp_path / "exp.yaml"
    path.write_text(experiment)
    return path


class Endpoint:
    """An OpenAI-style /v1/chat/completions that answers the scripted texts in turn (the last one again)."""

    def __init__(self, answers: list[str], delay_s: float = 0.0):
        self.answers, self.delay_s, self.requests = answers, delay_s, []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802  (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.requests.append((self.path, dict(self.headers), body))
                time.sleep(endpoint.delay_s)
                text = endpoint.answers[min(len(endpoint.requests), len(endpoint.answers)) - 1]
                status, kind = 200, "application/json"
                if isinstance(text, tuple):  # (status, content type, body): what some gateway answers instead
                    status, kind, body_text = text
                    reply = body_text.encode()
                else:
                    reply = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", kind)
                    self.send_header("Content-Length", str(len(reply)))
                    self.end_headers()
                    self.wfile.write(reply)
                except (BrokenPipeError, ConnectionResetError):  # the advisor gave up waiting: as it should
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> Endpoint:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
