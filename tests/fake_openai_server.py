"""A real OpenAI-compatible streaming server with exactly known token timing: a test instrument.

It speaks just enough HTTP/1.1 (keep-alive, chunked responses) over a raw asyncio Protocol to serve
`POST /v1/completions` and `POST /v1/chat/completions` with `stream: true`, plus `GET /health`,
`GET /v1/models` and (with `metrics_lines`) `GET /metrics`; a request without `stream: true` gets a whole
answer derived from its prompt, with log-probabilities (for the quality gate). Each generated token is one SSE event in its own HTTP chunk, as vLLM, SGLang and
llama-server send them. A response is:

    [chat only: a role chunk with empty content]  N token chunks  a finish chunk (empty text)
    [a usage chunk, when the request asked for stream_options.include_usage]  data: [DONE]

Timing (`FakeServerConfig`): token i is sent at received + ttft_s + i * itl_s, where "received" is the
moment the request body was complete. The loop wakes up about a millisecond early and sleeps the rest
with `time.sleep` (the event loop's own timers are only good to ~1 ms), so tokens leave within ~0.1 ms
of their schedule; the actual send times are recorded in `ServedRequest.token_sent_ns`
(`time.perf_counter_ns`, comparable with a client in the same process or on the same machine).
With ttft_s == itl_s == 0 ("instant") the whole response is written at once, from a cache, so the
server costs little and a load generator can be measured against it.

Failure modes for tests: an HTTP error status, an `{"error": ...}` event after some tokens, a dropped
connection after some tokens, U+2028 (or anything) in the token text, CRLF event separators,
JSON with spaces.

Run it in a background thread (`with FakeOpenAIServer(config) as server: server.base_url`) or as its own
process: `python tests/fake_openai_server.py --port 0` prints `listening http://127.0.0.1:PORT`.
It must never listen on anything but loopback by default, and it is no model: the text is meaningless.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

_EARLY_WAKE_S = 0.0012  # wake this long before a token is due, then sleep precisely (see docstring)


@dataclass(frozen=True)
class FakeServerConfig:
    """How the fake server answers. All times in seconds."""

    ttft_s: float = 0.0  # request complete -> first token chunk
    itl_s: float = 0.0  # between consecutive token chunks
    output_tokens: int | None = None  # tokens per response; None: the request's max_tokens (default 16)
    token_text: str = "tok"  # the text of every token chunk
    status: int = 200  # != 200: answer every generation request with this status and a JSON error
    capacity: int | None = None  # requests in flight beyond this are answered 503 (an overloaded server)
    error_after_tokens: int | None = None  # send an {"error": ...} event after this many tokens
    drop_after_tokens: int | None = None  # close the connection after this many tokens, mid-body
    # the streamed generation requests (1-based, in order of arrival) whose connection is closed at once,
    # without a response (a server dropping a request)
    drop_streams: frozenset[int] = frozenset()
    # close every connection right after a complete response, without "connection: close" (like a
    # server whose keep-alive timeout is up): the client must not reuse it
    close_after_response: bool = False
    send_usage: bool = True  # False: never send usage, like servers that ignore include_usage
    role_chunk: bool = True  # chat: send the role-only first chunk (empty content) like vLLM
    crlf: bool = False  # separate SSE events with "\r\n\r\n" instead of "\n\n"
    json_spaces: bool = False  # json.dumps' default separators (", ", ": ") instead of compact
    record: bool = True  # keep a ServedRequest per request (turn off for long benchmarks)
    # True: sleep out the last ~1 ms of each wait (accurate to ~0.1 ms, but blocks the loop meanwhile);
    # False: event-loop timers only (~1 ms late, but many concurrent streams keep their pace).
    precise_timing: bool = True
    # GET /metrics in vLLM's names (requests running, requests served), plus this many histogram bucket
    # lines, as many as a real engine's page carries (vLLM's: several hundred); 0: no /metrics (404).
    metrics_lines: int = 0
    # Non-streamed requests get a whole answer that depends only on the prompt (as greedy decoding of a
    # fixed model does), with per-token log-probabilities; wrong_answers: a different answer from the
    # third token on (a config that changes the numbers).
    wrong_answers: bool = False

    @property
    def instant(self) -> bool:
        return self.ttft_s <= 0 and self.itl_s <= 0


@dataclass
class ServedRequest:
    """What the server saw and did for one generation request (perf_counter_ns times)."""

    path: str
    body: dict[str, Any]
    received_ns: int
    token_sent_ns: list[int] = field(default_factory=list)
    finished_ns: int | None = None


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 411: "Length Required",
            429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}


def _chunk(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk carrying `payload`."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _count_prompt_tokens(body: dict[str, Any]) -> int:
    """The fake tokenizer: one token per whitespace-separated word of the prompt or messages."""
    if "messages" in body:
        return sum(len(str(m.get("content", "")).split()) for m in body["messages"])
    prompt = body.get("prompt", "")
    return len(prompt.split()) if isinstance(prompt, str) else len(prompt)


class _Response:
    """The SSE events of one streaming response, built from the config and the request."""

    def __init__(self, config: FakeServerConfig, path: str, body: dict[str, Any], keep_alive: bool):
        self.config = config
        self.chat = path.endswith("/chat/completions")
        self.model = str(body.get("model", "fake"))
        self.n_tokens = config.output_tokens if config.output_tokens is not None else int(body.get("max_tokens") or 16)
        self.prompt_tokens = _count_prompt_tokens(body)
        opts = body.get("stream_options") or {}
        self.include_usage = config.send_usage and bool(opts.get("include_usage"))
        self.keep_alive = keep_alive
        self._sep = b"\r\n\r\n" if config.crlf else b"\n\n"
        self._separators = (", ", ": ") if config.json_spaces else (",", ":")
        self._token_event: bytes | None = None

    def _event(self, obj: Any) -> bytes:
        # ensure_ascii=False: send U+2028 & co as raw UTF-8, as vLLM (pydantic) and llama-server do.
        data = obj if isinstance(obj, str) else json.dumps(obj, separators=self._separators, ensure_ascii=False)
        return _chunk(b"data: " + data.encode() + self._sep)

    def _base(self) -> dict[str, Any]:
        if self.chat:
            return {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": self.model}
        return {"id": "cmpl-fake", "object": "text_completion", "created": 0, "model": self.model}

    def _choice(self, text: str | None, finish_reason: str | None, role: bool = False) -> dict[str, Any]:
        if self.chat:
            delta: dict[str, Any] = {}
            if role:
                delta = {"role": "assistant", "content": ""}
            elif text is not None:
                delta = {"content": text}
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}

    def head(self) -> bytes:
        lines = [b"HTTP/1.1 200 OK", b"content-type: text/event-stream", b"cache-control: no-cache",
                 b"transfer-encoding: chunked"]
        if not self.keep_alive:
            lines.append(b"connection: close")
        return b"\r\n".join(lines) + b"\r\n\r\n"

    def role_event(self) -> bytes:
        if not (self.chat and self.config.role_chunk):
            return b""
        return self._event({**self._base(), "choices": [self._choice(None, None, role=True)]})

    def token_event(self) -> bytes:
        if self._token_event is None:  # the same bytes for every token: build once
            self._token_event = self._event({**self._base(), "choices": [self._choice(self.config.token_text, None)]})
        return self._token_event

    def error_event(self) -> bytes:
        err = {"error": {"message": "fake mid-stream failure", "type": "InternalServerError", "code": 500}}
        return self._event(err) + self._event("[DONE]") + b"0\r\n\r\n"

    def tail(self, tokens_sent: int) -> bytes:
        out = self._event({**self._base(), "choices": [self._choice("", "length")]})
        if self.include_usage:
            usage = {"prompt_tokens": self.prompt_tokens, "completion_tokens": tokens_sent,
                     "total_tokens": self.prompt_tokens + tokens_sent}
            out += self._event({**self._base(), "choices": [], "usage": usage})
        return out + self._event("[DONE]") + b"0\r\n\r\n"


def _whole_answer(config: FakeServerConfig, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """A non-streamed completion: tokens and log-probabilities derived from the prompt alone."""
    prompt = json.dumps(body.get("messages") or body.get("prompt"), sort_keys=True)
    seed = int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:4], "big")
    n = config.output_tokens if config.output_tokens is not None else int(body.get("max_tokens") or 16)
    shift = [0 if i < 2 or not config.wrong_answers else 1 for i in range(n)]
    tokens = [f" w{(seed + 7 * i + shift[i]) % 97}" for i in range(n)]
    logprobs = [-((seed + i) % 50) / 10 for i in range(n)]
    usage = {"prompt_tokens": _count_prompt_tokens(body), "completion_tokens": n,
             "total_tokens": _count_prompt_tokens(body) + n}
    text = "".join(tokens)
    if path.endswith("/chat/completions"):
        content = [{"token": t, "logprob": lp, "top_logprobs": []} for t, lp in zip(tokens, logprobs, strict=True)]
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": {"content": content},
                  "finish_reason": "length"}
        return {"id": "chatcmpl-fake", "object": "chat.completion", "choices": [choice], "usage": usage}
    choice = {"index": 0, "text": text, "logprobs": {"tokens": tokens, "token_logprobs": logprobs},
              "finish_reason": "length"}
    return {"id": "cmpl-fake", "object": "text_completion", "choices": [choice], "usage": usage}


def _plain_response(status: int, obj: Any, keep_alive: bool) -> bytes:
    body = json.dumps(obj).encode()
    head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n")
    if not keep_alive:
        head += "connection: close\r\n"
    return head.encode() + b"\r\n" + body


class _ServerState:
    """Shared by all connections of one server; touched only from the server's event loop thread."""

    def __init__(self, config: FakeServerConfig):
        self.config = config
        self.requests: list[ServedRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.served = 0
        self.streams = 0  # streamed generation requests received
        self.connections = 0  # TCP connections accepted (keep-alive reuse shows as few)
        self.transports: set[asyncio.Transport] = set()
        self.instant_cache: dict[tuple[Any, ...], bytes] = {}
        self.metrics_padding: bytes | None = None


class _HttpConnection(asyncio.Protocol):
    """One client connection: parse requests one after the other, stream each answer."""

    def __init__(self, state: _ServerState):
        self.state = state
        self.buf = bytearray()
        self.busy = False  # a streaming response is being sent; later requests wait in buf
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self._stream: tuple[_Response, ServedRequest | None, int, int] | None = None  # resp, record, t0, sent

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.state.transports.add(transport)
        self.state.connections += 1

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.state.transports.discard(self.transport)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
            self._done(self._stream[1] if self._stream else None)
            self._finish(closed=True)
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._process()

    def _process(self) -> None:
        while not self.busy and self.transport is not None:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
            try:
                method, target, _version = head[0].split(" ", 2)
            except ValueError:
                self.transport.write(_plain_response(400, {"error": "bad request line"}, False))
                self.transport.close()
                return
            headers = {}
            for line in head[1:]:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            keep_alive = headers.get("connection", "").lower() != "close"
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self.transport.write(_plain_response(411, {"error": "send content-length"}, False))
                self.transport.close()
                return
            length = int(headers.get("content-length", "0"))
            if len(self.buf) < end + 4 + length:
                return
            body = bytes(self.buf[end + 4 : end + 4 + length])
            del self.buf[: end + 4 + length]
            self._handle(method, target.split("?", 1)[0], body, keep_alive)

    def _metrics(self, keep_alive: bool) -> bytes:
        lines = ["# TYPE vllm:num_requests_running gauge",
                 f'vllm:num_requests_running{{engine="0",model_name="fake"}} {self.state.in_flight}',
                 "# TYPE vllm:request_success_total counter",
                 f'vllm:request_success_total{{engine="0",model_name="fake"}} {self.state.served}',
                 ""]
        if self.state.metrics_padding is None:  # built once: serving /metrics must cost this server little
            self.state.metrics_padding = "".join(
                f'vllm:e2e_request_latency_seconds_bucket{{engine="0",le="{i / 10}",model_name="fake"}} {i}\n'
                for i in range(self.state.config.metrics_lines)).encode()
        body = "\n".join(lines).encode() + b"# TYPE vllm:e2e_request_latency_seconds histogram\n" \
            + self.state.metrics_padding
        head = f"HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {len(body)}\r\n"
        return (head + ("" if keep_alive else "connection: close\r\n") + "\r\n").encode() + body

    def _handle(self, method: str, path: str, raw_body: bytes, keep_alive: bool) -> None:
        assert self.transport is not None
        if method == "GET" and path == "/health":
            return self._reply(_plain_response(200, {"status": "ok"}, keep_alive), keep_alive)
        if method == "GET" and path == "/v1/models":
            models = {"object": "list", "data": [{"id": "fake", "object": "model", "root": "fake"}]}
            return self._reply(_plain_response(200, models, keep_alive), keep_alive)
        if method == "GET" and path == "/metrics" and self.state.config.metrics_lines:
            return self._reply(self._metrics(keep_alive), keep_alive)
        if method != "POST" or path not in ("/v1/completions", "/v1/chat/completions"):
            return self._reply(_plain_response(404, {"error": f"no route {method} {path}"}, keep_alive), keep_alive)
        try:
            body = json.loads(raw_body)
        except ValueError:
            return self._reply(_plain_response(400, {"error": "body is not JSON"}, keep_alive), keep_alive)
        config = self.state.config
        if config.status != 200:
            err = {"error": {"message": f"fake failure {config.status}", "type": "FakeError", "code": config.status}}
            return self._reply(_plain_response(config.status, err, keep_alive), keep_alive)
        if not body.get("stream"):
            return self._reply(_plain_response(200, _whole_answer(config, path, body), keep_alive), keep_alive)
        self.state.streams += 1
        if self.state.streams in config.drop_streams:
            return self.transport.close()
        if config.capacity is not None and self.state.in_flight >= config.capacity:
            err = {"error": {"message": "server overloaded", "type": "Overloaded", "code": 503}}
            return self._reply(_plain_response(503, err, keep_alive), keep_alive)

        received_ns = time.perf_counter_ns()
        served = ServedRequest(path=path, body=body, received_ns=received_ns) if config.record else None
        if served is not None:
            self.state.requests.append(served)
        self.state.in_flight += 1
        self.state.max_in_flight = max(self.state.max_in_flight, self.state.in_flight)
        resp = _Response(config, path, body, keep_alive)

        simple = config.error_after_tokens is None and config.drop_after_tokens is None
        if config.instant and simple:
            key = (path, resp.model, resp.n_tokens, resp.prompt_tokens, resp.include_usage, keep_alive)
            data = self.state.instant_cache.get(key)
            if data is None:
                data = resp.head() + resp.role_event() + resp.token_event() * resp.n_tokens + resp.tail(resp.n_tokens)
                if len(self.state.instant_cache) < 1024:
                    self.state.instant_cache[key] = data
            now = time.perf_counter_ns()
            if served is not None:
                served.token_sent_ns = [now] * resp.n_tokens
            self._done(served)
            self.transport.write(data)
            closed = not keep_alive or config.close_after_response
            self._finish(closed=closed, resume=False)  # _process's loop goes on
            return

        # Timed (or failing) response: header and role chunk now, tokens on schedule.
        self.busy = True
        self.transport.write(resp.head() + resp.role_event())
        self._stream = (resp, served, received_ns, 0)
        self._schedule()

    def _due_ns(self, resp: _Response, received_ns: int, i: int) -> int:
        return received_ns + round((resp.config.ttft_s + i * resp.config.itl_s) * 1e9)

    def _schedule(self) -> None:
        assert self._stream is not None
        resp, _served, received_ns, sent = self._stream
        delay_s = (self._due_ns(resp, received_ns, sent) - time.perf_counter_ns()) / 1e9
        if resp.config.precise_timing:
            delay_s -= _EARLY_WAKE_S
        loop = asyncio.get_running_loop()
        self.timer = loop.call_later(max(delay_s, 0.0), self._emit)

    def _emit(self) -> None:
        self.timer = None
        assert self._stream is not None
        resp, served, received_ns, sent = self._stream
        if self.transport is None or self.transport.is_closing():
            self._done(served)
            return self._finish(closed=True)
        remaining_ns = self._due_ns(resp, received_ns, sent) - time.perf_counter_ns()
        if remaining_ns > 0 and resp.config.precise_timing:
            time.sleep(remaining_ns / 1e9)  # precise to ~0.1 ms; blocks this loop for at most ~1.2 ms
        now = time.perf_counter_ns()
        # Everything due by now goes in this write (one chunk per token, as real servers do).
        due = 0
        limits = (resp.n_tokens, resp.config.error_after_tokens, resp.config.drop_after_tokens)
        stop = min(n for n in limits if n is not None)
        while sent + due < stop and self._due_ns(resp, received_ns, sent + due) <= now:
            due += 1
        sent += due
        self._stream = (resp, served, received_ns, sent)
        out = resp.token_event() * due
        if sent == resp.config.error_after_tokens:
            out, finish = out + resp.error_event(), "close" if not resp.keep_alive else "done"
        elif sent == resp.config.drop_after_tokens:
            finish = "drop"
        elif sent >= resp.n_tokens:
            out, finish = out + resp.tail(sent), "close" if not resp.keep_alive else "done"
        else:
            finish = ""
        # Stamp right before the write: the bytes are in the kernel when write() returns.
        if served is not None and due:
            served.token_sent_ns.extend([time.perf_counter_ns()] * due)
        if finish:  # counted before the last bytes go: a client that has read them sees it served
            self._done(served)
        if out:
            self.transport.write(out)
        if finish == "drop":
            self.transport.close()
            return self._finish(closed=True)
        if finish:
            return self._finish(closed=finish == "close" or resp.config.close_after_response)
        self._schedule()

    def _reply(self, data: bytes, keep_alive: bool) -> None:
        assert self.transport is not None
        self.transport.write(data)
        if not keep_alive:
            self.transport.close()

    def _done(self, served: ServedRequest | None) -> None:
        self.state.in_flight -= 1
        self.state.served += 1
        if served is not None:
            served.finished_ns = time.perf_counter_ns()

    def _finish(self, *, closed: bool, resume: bool = True) -> None:
        self.busy = False
        if closed:
            if self.transport is not None:
                self.transport.close()
            return
        if resume and self.buf:
            self._process()


async def _start(state: _ServerState, host: str, port: int) -> asyncio.base_events.Server:
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: _HttpConnection(state), host, port, backlog=4096)


class FakeOpenAIServer:
    """The fake server on its own event loop in a background thread; a context manager.

    `requests`, `max_in_flight` and `served` may be read from the test thread once the client is done
    (they are written only by the server's thread).
    """

    def __init__(self, config: FakeServerConfig | None = None, host: str = "127.0.0.1", port: int = 0):
        self._state = _ServerState(config or FakeServerConfig())
        self._host = host
        self._port = port
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None

    @property
    def config(self) -> FakeServerConfig:
        return self._state.config

    def set_config(self, config: FakeServerConfig) -> None:
        """Change the behaviour for requests that arrive from now on."""
        def apply() -> None:
            self._state.config = config
            self._state.instant_cache.clear()
        self._call(apply)

    def configure(self, **changes: Any) -> None:
        self.set_config(replace(self.config, **changes))

    @property
    def port(self) -> int:
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self._port}"

    @property
    def requests(self) -> list[ServedRequest]:
        return self._state.requests

    @property
    def max_in_flight(self) -> int:
        return self._state.max_in_flight

    @property
    def served(self) -> int:
        return self._state.served

    @property
    def connections(self) -> int:
        return self._state.connections

    def reset_stats(self) -> None:
        def apply() -> None:
            self._state.requests = []
            self._state.max_in_flight = self._state.in_flight
            self._state.served = 0
            self._state.connections = 0
        self._call(apply)

    def _call(self, fn: Any) -> None:
        """Run fn on the server's loop and wait for it (or directly when not started)."""
        if self._loop is None:
            fn()
            return
        done = threading.Event()

        def run() -> None:
            try:
                fn()
            finally:
                done.set()
        self._loop.call_soon_threadsafe(run)
        done.wait(5)

    def start(self) -> FakeOpenAIServer:
        self._thread = threading.Thread(target=self._run, name="fake-openai-server", daemon=True)
        self._thread.start()
        self._started.wait(10)
        if self._error is not None:
            raise RuntimeError("fake server failed to start") from self._error
        return self

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            self._server = loop.run_until_complete(_start(self._state, self._host, self._port))
            self._port = self._server.sockets[0].getsockname()[1]
        except BaseException as exc:  # reported to start()
            self._error = exc
            self._started.set()
            loop.close()
            return
        self._started.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    def stop(self) -> None:
        """Close the listener and every connection, stop the loop, join the thread. Safe twice."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return

        def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for transport in list(self._state.transports):
                transport.abort()
            loop.call_soon(loop.stop)
        loop.call_soon_threadsafe(shutdown)
        thread.join(10)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def serve(config: FakeServerConfig, host: str = "127.0.0.1", port: int = 0) -> None:
    """Serve forever in the current event loop; prints the URL on stdout once listening."""
    server = await _start(_ServerState(config), host, port)
    print(f"listening http://{host}:{server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--ttft-s", type=float, default=0.0)
    parser.add_argument("--itl-s", type=float, default=0.0)
    parser.add_argument("--output-tokens", type=int, default=None)
    parser.add_argument("--token-text", default="tok")
    parser.add_argument("--capacity", type=int, default=None, help="requests in flight beyond this get 503")
    parser.add_argument("--drop-stream", type=int, action="append", default=[],
                        help="close the connection of the Nth streamed request, unanswered (repeatable)")
    parser.add_argument("--start-delay-s", type=float, default=0.0, help="wait this long before listening")
    parser.add_argument("--metrics-lines", type=int, default=0, help="serve /metrics (with this much padding)")
    parser.add_argument("--wrong-answers", action="store_true", help="answer non-streamed requests differently")
    parser.add_argument("--kernel", choices=["fast", "safe"], default="safe",
                        help="a kernel choice this build knows (another value: an argparse error, as engines give)")
    parser.add_argument("--coarse-timing", action="store_true",
                        help="event-loop timers only: ~1 ms late, but many streams keep their pace")
    args = parser.parse_args(argv)
    config = FakeServerConfig(ttft_s=args.ttft_s, itl_s=args.itl_s, output_tokens=args.output_tokens,
                              token_text=args.token_text, record=False, precise_timing=not args.coarse_timing,
                              capacity=args.capacity, metrics_lines=args.metrics_lines,
                              drop_streams=frozenset(args.drop_stream),
                              wrong_answers=args.wrong_answers)
    time.sleep(args.start_delay_s)  # a slow start, for readiness timeouts
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(config, args.host, args.port))


if __name__ == "__main__":
    main()
