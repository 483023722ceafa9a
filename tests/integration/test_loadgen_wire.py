"""The load generator's HTTP/1.1 transport against a raw server that writes exact bytes.

Each test scripts the server's responses byte for byte (malformed heads, interim 1xx, redirects) and
checks what a user would see: the request's recorded error, the connection slot given back, no socket
left open on the server's side.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from typer.testing import CliRunner

from autotuner.bench import transport as transport_module
from autotuner.bench.client import RequestRecord, ignored_proxy_note, make_client, stream_request

CLOSE = b"<close the connection>"  # in a scripted reply: the server closes the connection there
GOOD_SSE = (b'data: {"choices":[{"text":"a"}]}\n\n'
            b'data: {"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":1}}\n\n'
            b"data: [DONE]\n\n")


def chunked(body: bytes) -> bytes:
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


GOOD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        + chunked(GOOD_SSE))


class RawServer:
    """Answers each request with the next scripted reply: a list of byte strings written one by one
    (a short pause between them, so they tend to arrive as separate reads; CLOSE closes the
    connection). Counts connections, and those still open. With `close_reused` set, a request on a
    connection that has already served one is met by closing it (a keep-alive timeout running out)."""

    def __init__(self, replies: list[list[bytes]]) -> None:
        self.replies = list(replies)
        self.close_reused = False
        self.requests = 0
        self.connections = 0
        self.open = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        assert self._server is not None
        self._server.close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1/completions"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
        served = 0
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return  # the client closed the connection
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                await reader.readexactly(length)
                if served and self.close_reused:
                    return
                served += 1
                self.requests += 1
                for i, part in enumerate(self.replies.pop(0)):
                    if i:
                        await asyncio.sleep(0.005)
                    if part is CLOSE:
                        return
                    writer.write(part)
                    await writer.drain()
        finally:
            self.open -= 1
            writer.close()

    async def wait_closed_by_client(self, open_left: int) -> None:
        async with asyncio.timeout(2):
            while self.open > open_left:
                await asyncio.sleep(0.01)


async def send(client: Any, url: str) -> RequestRecord:
    async with asyncio.timeout(5):  # a leaked slot makes a request wait for one forever
        return await stream_request(client, url, json.dumps({"prompt": "x", "stream": True}).encode())


MALFORMED_HEADS = [
    b"HTTP/1.1 200 OK\r\ncontent-length: abc\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ncontent-length: -5\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ncontent-length: +5\r\n\r\nhello",
    b"HTTP/1.1 200 OK\r\ncontent-length: 1_0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\nhello!",
    b"HTTP/1.1 200 OK\r\ncontent-length: \r\n\r\n",
    b"HTTP/1.1 2x0 OK\r\ncontent-length: 0\r\n\r\n",
    b"HTTP/1.1 +200 OK\r\ncontent-length: 0\r\n\r\n",
    b"SPDY/3 200 OK\r\ncontent-length: 0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nno colon here\r\ncontent-length: 0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ncontent-length : 0\r\n\r\n",
]


def test_malformed_heads_are_request_errors_that_free_the_slot_and_the_socket() -> None:
    async def go() -> tuple[list[RequestRecord], RequestRecord, RawServer]:
        async with RawServer([[head] for head in MALFORMED_HEADS] + [[GOOD]]) as server:
            async with make_client(1) as client:  # one slot: a single leak blocks every later request
                bad = [await send(client, server.url) for _ in MALFORMED_HEADS]
                await server.wait_closed_by_client(open_left=0)
                good = await send(client, server.url)
            return bad, good, server

    bad, good, server = asyncio.run(go())
    for record, head in zip(bad, MALFORMED_HEADS, strict=True):
        assert record.error is not None and record.error.startswith("RemoteProtocolError: bad "), (head, record.error)
    assert "content-length" in bad[0].error.lower() and "abc" in bad[0].error
    assert good.error is None and good.output_tokens == 1
    assert server.requests == len(MALFORMED_HEADS) + 1  # none sent twice
    assert server.connections == len(MALFORMED_HEADS) + 1  # a malformed response's connection is never reused


def test_matching_duplicate_content_lengths_are_accepted() -> None:
    reply = b"HTTP/1.1 200 OK\r\ncontent-length: %d, %d\r\n\r\n%s" % (len(GOOD_SSE), len(GOOD_SSE), GOOD_SSE)

    async def go() -> RequestRecord:
        async with RawServer([[reply]]) as server, make_client(1) as client:
            return await send(client, server.url)

    record = asyncio.run(go())
    assert record.error is None and record.output_tokens == 1


INTERIM = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n"


@pytest.mark.parametrize("parts", [
    [INTERIM + GOOD],  # all in one read
    [INTERIM, GOOD],
    [INTERIM[:20], INTERIM[20:30], INTERIM[30:] + GOOD[:10], GOOD[10:]],  # heads split mid-line
    [b"HTTP/1.1 100 Continue\r\n\r", b"\n" + GOOD],  # split inside the blank line
], ids=["one-read", "separate", "mid-line", "mid-blank-line"])
def test_interim_1xx_responses_are_skipped_and_the_final_one_read(parts: list[bytes]) -> None:
    async def go() -> tuple[list[RequestRecord], RawServer]:
        async with RawServer([parts, parts]) as server, make_client(1) as client:
            return [await send(client, server.url) for _ in range(2)], server

    records, server = asyncio.run(go())
    for record in records:
        assert record.error is None, record.error
        assert (record.output_tokens, record.prompt_tokens, len(record.chunk_times_ns)) == (1, 2, 1)
    assert server.connections == 1  # the final response's framing holds: the connection is reused


def test_a_connection_closed_after_an_interim_response_is_an_error_not_a_resend() -> None:
    async def go() -> tuple[RequestRecord, RequestRecord, RawServer]:
        # A kept-alive connection first: a reused connection closed before any response would be resent.
        async with RawServer([[GOOD], [b"HTTP/1.1 100 Continue\r\n\r\n", CLOSE], [GOOD]]) as server:
            async with make_client(1) as client:
                await send(client, server.url)
                record = await send(client, server.url)
                after = await send(client, server.url)
            return record, after, server

    record, after, server = asyncio.run(go())
    assert record.error is not None and "RemoteProtocolError" in record.error, record.error
    assert after.error is None and server.requests == 3  # the interrupted request was sent once


def test_a_request_met_by_a_closing_idle_connection_is_sent_again_on_a_new_one() -> None:
    async def go() -> tuple[RequestRecord, RawServer]:
        async with RawServer([[GOOD], [GOOD], [GOOD]]) as server, make_client(2) as client:
            await asyncio.gather(send(client, server.url), send(client, server.url))  # two idle connections
            server.close_reused = True  # both of their keep-alive timeouts run out together
            return await send(client, server.url), server

    record, server = asyncio.run(go())
    assert record.error is None, record.error  # not resent on the other idle connection, which closes too
    assert (server.requests, server.connections) == (3, 3)


def test_a_connection_idle_too_long_is_not_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport_module, "_IDLE_EXPIRY_S", 0.5)

    async def go() -> tuple[list[RequestRecord], RawServer]:
        async with RawServer([[GOOD], [GOOD], [GOOD]]) as server, make_client(1) as client:
            first = await send(client, server.url)
            second = await send(client, server.url)  # at once: the same connection
            await asyncio.sleep(1.0)
            return [first, second, await send(client, server.url)], server

    records, server = asyncio.run(go())
    assert all(r.error is None for r in records)
    assert server.connections == 2


def test_a_101_switching_protocols_is_an_error() -> None:
    async def go() -> RequestRecord:
        async with RawServer([[b"HTTP/1.1 101 Switching Protocols\r\nupgrade: h2c\r\n\r\n"], [GOOD]]) as server:
            async with make_client(1) as client:
                record = await send(client, server.url)
                assert (await send(client, server.url)).error is None  # the slot was given back
                return record

    record = asyncio.run(go())
    assert record.error is not None and "101" in record.error


@pytest.mark.parametrize("fast", [True, False], ids=["loadgen-transport", "httpx-transport"])
def test_a_redirect_is_a_clear_error_naming_the_option(fast: bool) -> None:
    location = b"http://127.0.0.1:9/v2/completions"
    reply = b"HTTP/1.1 307 Temporary Redirect\r\nlocation: %s\r\ncontent-length: 5\r\n\r\nmoved" % location

    async def go() -> tuple[list[RequestRecord], RawServer]:
        async with RawServer([[reply], [GOOD]]) as server, make_client(1, fast=fast) as client:
            return [await send(client, server.url) for _ in range(2)], server

    (redirected, after), server = asyncio.run(go())
    assert redirected.error == (
        "HTTP 307: the server redirected to http://127.0.0.1:9/v2/completions; the load generator does not "
        "follow redirects: point the base URL (autotuner bench --base-url) at the final address")
    assert after.error is None and server.requests == 2  # not followed, and the connection was reused
    assert server.connections == 1


# ---- proxies --------------------------------------------------------------------------------------


@pytest.mark.parametrize("url, environ, variable", [
    ("http://10.1.2.3:8000", {"HTTP_PROXY": "http://proxy:3128"}, "HTTP_PROXY"),
    ("http://gpu-box:8000", {"http_proxy": "http://proxy:3128", "HTTP_PROXY": "x"}, "http_proxy"),
    ("http://gpu-box:8000", {"ALL_PROXY": "socks5://proxy:1080"}, "ALL_PROXY"),
    ("https://api.example.com", {"HTTPS_PROXY": "http://proxy:3128"}, "HTTPS_PROXY"),
    ("http://gpu.example.com", {"HTTP_PROXY": "p", "NO_PROXY": "other.example.com,cluster.local"}, "HTTP_PROXY"),
])
def test_a_proxy_the_load_generator_ignores_is_named(url: str, environ: dict[str, str], variable: str) -> None:
    note = ignored_proxy_note(url, environ)
    assert note is not None and note.startswith(f"{variable} is set") and "directly" in note, note


@pytest.mark.parametrize("url, environ", [
    ("http://127.0.0.1:8080", {"HTTP_PROXY": "p", "ALL_PROXY": "p"}),  # loopback: never
    ("http://localhost:8080", {"HTTP_PROXY": "p"}),
    ("http://[::1]:8080", {"HTTP_PROXY": "p"}),
    ("http://gpu-box:8000", {}),
    ("http://gpu-box:8000", {"HTTPS_PROXY": "p"}),  # only for https targets
    ("http://gpu-box:8000", {"HTTP_PROXY": "p", "NO_PROXY": "gpu-box"}),
    ("http://gpu.example.com", {"HTTP_PROXY": "p", "no_proxy": ".example.com"}),
    ("http://gpu.example.com:80", {"HTTP_PROXY": "p", "NO_PROXY": "x, gpu.example.com:80"}),
    ("http://10.1.2.3:8000", {"HTTP_PROXY": "p", "NO_PROXY": "*"}),
])
def test_no_proxy_note_where_none_applies(url: str, environ: dict[str, str]) -> None:
    assert ignored_proxy_note(url, environ) is None


def test_bench_shows_the_ignored_proxy_note(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotuner.cli import app

    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("http_proxy", raising=False)
    # 192.0.2.0/24 is reserved for documentation: nothing answers there; the request fails fast.
    result = CliRunner().invoke(app, [
        "bench", "--base-url", "http://192.0.2.1:9", "--model", "m", "--num-prompts", "1", "--timeout", "0.3"])
    assert "note: HTTP_PROXY is set, but the load generator connects to 192.0.2.1 directly" in result.stderr
