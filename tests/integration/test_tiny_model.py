"""The random-weight GGUF from autotuner.models.tiny_gguf runs on a real llama-server.

Checks what the tuner relies on: the server loads the file, both OpenAI endpoints stream, the last chunk
carries `usage`, and every request returns exactly `max_tokens` tokens (the end-of-generation rows of the
output matrix are zero, so greedy decoding never stops early).

Needs a built llama-server (scripts/build-llama-server.sh); skipped otherwise.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("gguf")
pytest.importorskip("numpy")

from autotuner.models.tiny_gguf import write_tiny_llama_gguf  # noqa: E402
from autotuner.util.paths import llama_server_binary  # noqa: E402

pytestmark = [pytest.mark.engine, pytest.mark.slow]

MAX_TOKENS = 32
READY_TIMEOUT_S = 60.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _log_tail(log: Path, n: int = 40) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama_gguf(tmp_path_factory.mktemp("model") / "tiny.gguf", size="tiny", seed=0)


@pytest.fixture(scope="module")
def server_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = llama_server_binary()
    if binary is None or not binary.is_file():
        pytest.skip(
            "llama-server not found: build it with scripts/build-llama-server.sh "
            "or point $AUTOTUNER_LLAMA_SERVER at a binary"
        )
    tiny_model: Path = request.getfixturevalue("tiny_model")  # only written when there is a server to run
    port = _free_port()
    log = tmp_path_factory.mktemp("server") / "llama-server.log"
    cmd = [
        str(binary), "-m", str(tiny_model), "--host", "127.0.0.1", "--port", str(port),
        "-c", "2048", "-np", "2", "-t", "2",
    ]  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as log_file:
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama-server exited with {proc.returncode} before it was ready:\n{_log_tail(log)}")
            try:
                if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass  # not listening yet
            if time.monotonic() > deadline:
                pytest.fail(f"llama-server not ready after {READY_TIMEOUT_S:.0f} s:\n{_log_tail(log)}")
            time.sleep(0.1)
        yield url
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def _stream_events(url: str, body: dict) -> list[dict]:
    """POST with stream=true and return the JSON events before [DONE].

    Events are split on blank lines of the byte stream, not with a line iterator: text from random
    weights contains arbitrary Unicode (U+2028 …) that line splitters treat as line ends.
    """
    events: list[dict] = []
    buffer = b""
    done = False
    with httpx.stream("POST", url, json=body, timeout=60.0) as response:
        assert response.status_code == 200, response.read().decode(errors="replace")
        for chunk in response.iter_bytes():
            buffer += chunk.replace(b"\r\n", b"\n")
            while b"\n\n" in buffer:
                raw, buffer = buffer.split(b"\n\n", 1)
                for line in raw.split(b"\n"):
                    if not line.startswith(b"data:"):
                        continue
                    data = line[len(b"data:") :].strip()
                    if data == b"[DONE]":
                        done = True
                    else:
                        events.append(json.loads(data))
    assert done, "stream ended without [DONE]"
    return events


def _check_usage(events: list[dict]) -> None:
    usage = [e["usage"] for e in events if e.get("usage")]
    assert usage, f"no usage in the stream: {events[-2:]}"
    assert usage[-1]["completion_tokens"] == MAX_TOKENS, usage[-1]
    assert usage[-1]["prompt_tokens"] > 0, usage[-1]
    finish = [c.get("finish_reason") for e in events for c in e.get("choices", []) if c.get("finish_reason")]
    assert finish == ["length"], finish


def test_health_ok(server_url: str) -> None:
    response = httpx.get(f"{server_url}/health", timeout=5.0)
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_streaming_completion_returns_exactly_max_tokens(server_url: str) -> None:
    events = _stream_events(
        f"{server_url}/v1/completions",
        {
            "prompt": "Write a short story about a server that answers every request quickly.",
            "max_tokens": MAX_TOKENS,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert any(c.get("text") for e in events for c in e.get("choices", [])), "no text streamed"
    _check_usage(events)


def test_streaming_chat_completion_returns_exactly_max_tokens(server_url: str) -> None:
    events = _stream_events(
        f"{server_url}/v1/chat/completions",
        {
            "messages": [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "Please explain what a batch of tokens is."},
            ],
            "max_tokens": MAX_TOKENS,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert any(c.get("delta", {}).get("content") for e in events for c in e.get("choices", [])), "no content"
    _check_usage(events)
