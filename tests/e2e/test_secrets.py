"""Secrets reach the engine and nothing else: a planted secret is searched for in every MLflow param,
tag, metric name and artifact, the Optuna storage, the results folder and the tuner's own output."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SECRET = "s3cr3t-Tok3n-4f9a1c"
HF = "hf_PlantedTokenValue123456"

pytestmark = pytest.mark.engine


def test_planted_secret_is_passed_to_the_engine_and_never_logged(tmp_path, tiny_model, llama_server):
    # Plant the secret where the tuner cannot help but see it: in the model's file name, so it is in
    # the command line, the server's log and the study's params.
    model = tmp_path / f"model-{SECRET}.gguf"
    model.write_bytes(tiny_model.read_bytes())
    (tmp_path / "s.yaml").write_text("engine: llamacpp\nparams:\n  parallel: {type: int, low: 1, high: 4}\n")
    (tmp_path / "exp.yaml").write_text(
        f"name: secrets\nengine: llamacpp\nmodel: {{path: {model}}}\nsearch_space: s.yaml\n"
        "workload: {num_prompts: 4, input_len: 8, output_len: 8, warmup_requests: 0}\n"
        "load: {max_concurrency: [2]}\nsecret_env: [MY_API_KEY]\nenv: {PLAIN_SETTING: visible}\n"
        "enqueue: [{parallel: 3}]\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "AUTOTUNER_CACHE": str(tmp_path / "cache"),
           "AUTOTUNER_LLAMA_SERVER": llama_server, "MY_API_KEY": SECRET, "HF_TOKEN": HF, "COLUMNS": "200"}

    seen_environ: list[bytes] = []

    def watch_engine_env():  # the engine does get the secrets
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not seen_environ:
            for proc in Path("/proc").iterdir():
                try:
                    if proc.name.isdigit() and str(model).encode() in (proc / "cmdline").read_bytes():
                        seen_environ.append((proc / "environ").read_bytes())
                        return
                except OSError:
                    continue
            time.sleep(0.02)

    watcher = threading.Thread(target=watch_engine_env)
    watcher.start()
    out = subprocess.run([sys.executable, "-m", "autotuner.cli", "run", "-e", "exp.yaml", "--trials", "2"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    watcher.join()
    assert out.returncode == 0, out.stderr
    assert seen_environ and f"MY_API_KEY={SECRET}".encode() in seen_environ[0]
    assert f"HF_TOKEN={HF}".encode() in seen_environ[0]
    assert b"PLAIN_SETTING=visible" in seen_environ[0]
    assert 'MY_API_KEY="$MY_API_KEY"' in out.stdout  # the winner's command names the secret, not its value

    leaks = []
    for secret in (SECRET, HF):
        if secret in out.stdout + out.stderr:
            leaks.append("tuner output")
        for path in tmp_path.rglob("*"):
            if path.is_file() and path not in (model, tmp_path / "exp.yaml") and secret.encode() in path.read_bytes():
                leaks.append(str(path.relative_to(tmp_path)))  # MLflow store, artifacts, study db, results
    assert leaks == []
    # The artifacts were really written (else the search above proves nothing).
    logs = list((tmp_path / "mlruns" / "artifacts").rglob("server.log"))
    assert logs and "***" in logs[0].read_text()
