"""The transport: HTTP/1.1 for load generation.

httpx's default transport (httpcore + h11) costs ~8 us per HTTP chunk, and servers send every token as
its own chunk; its pool also scans every connection on each request. Together they cap one core at
~20-80k tokens/s, below what one fast server streams. This transport keeps httpx's client API but
speaks plain-HTTP/1.1 itself: a LIFO pool of keep-alive connections, one asyncio Protocol per
connection, a chunked decoder that handles a whole network read at once. It also stamps each read
with perf_counter_ns() as it comes off the socket, before any coroutine runs, and offers the stamped
reads to stream_request through the response extension TIMED_STREAM_EXTENSION.
https:// URLs go to httpx's own transport. Interim 1xx responses are skipped.

What the transport raises (stream_request turns each into a record's error):
  httpx.PoolTimeout        no connection slot freed in time
  httpx.ConnectTimeout, httpx.ConnectError
  httpx.ReadTimeout        no byte for the read timeout
  httpx.ReadError          the connection was reset mid-body
  httpx.RemoteProtocolError  a malformed status line, header line or Content-Length, a bad chunk,
                           a 101, a disconnect before the response or mid-body
Whatever it raises, the connection is closed and its slot given back.

It knows HTTP/1.1, not OpenAI's API or Server-Sent Events (client.py reads those).
"""

from __future__ import annotations

import asyncio
from time import monotonic, perf_counter_ns
from typing import Any

import httpx

# Response extension under which LoadgenTransport offers reads stamped as they left the socket.
TIMED_STREAM_EXTENSION = "autotuner.timed_stream"

# A record's error, lower-cased, when the server closed the connection before the response ended
# (RequestRecord.dropped). httpx's own transport (https) words the first two alike, not its ReadErrors.
DROPPED_ERRORS = ("remoteprotocolerror: server disconnected", "remoteprotocolerror: peer closed connection",
            "readerror: connection lost")

_MAX_HEAD_BYTES = 64 * 1024
# Servers close idle keep-alive connections after ~5 s (cpp-httplib, uvicorn, Node). One reused as the server
# closes it fails before a byte comes back; connections idle longer than this are closed instead of reused.
_IDLE_EXPIRY_S = 2.0
_READ_HIGH_WATER_BYTES = 4 * 1024 * 1024  # pause reading a connection whose data nobody consumes


class _HttpProtocolError(Exception):
    pass


class _ClosedBeforeResponse(Exception):
    """The connection ended before a byte of the response: safe to send the request again."""


class _Connection(asyncio.Protocol):
    """One TCP connection; buffers (arrival_ns, bytes) pieces until the reader takes them."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.pieces: list[tuple[int, bytes]] = []
        self.buffered = 0
        self.paused = False
        self.waiter: asyncio.Future[None] | None = None
        self.closed = False
        self.lost_exc: BaseException | None = None
        self.idle_since = 0.0  # monotonic() when it went back to the pool

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a TCP transport (asyncio passes the base type)

    def data_received(self, data: bytes) -> None:
        self.pieces.append((perf_counter_ns(), data))
        self.buffered += len(data)
        if self.buffered > _READ_HIGH_WATER_BYTES and not self.paused and self.transport is not None:
            self.transport.pause_reading()
            self.paused = True
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def eof_received(self) -> None:
        self._lost(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost(exc)

    def _lost(self, exc: BaseException | None) -> None:
        self.closed = True
        if exc is not None:
            self.lost_exc = exc
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def read(self, timeout_s: float | None) -> list[tuple[int, bytes]]:
        """Every piece received so far, waiting for one if none; [] at end of stream."""
        if not self.pieces:
            if self.closed:
                return []
            waiter = self.waiter = self.loop.create_future()
            timer = self.loop.call_later(timeout_s, _expire, waiter) if timeout_s else None
            try:
                await waiter
            finally:
                self.waiter = None
                if timer is not None:
                    timer.cancel()
        pieces = self.pieces
        self.pieces = []
        self.buffered = 0
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return pieces

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class _ChunkedDecoder:
    """Incremental decoder of a chunked HTTP/1.1 body; feed() takes any slice of the byte stream."""

    __slots__ = ("crlf_left", "done", "in_trailers", "pending", "remaining")

    def __init__(self) -> None:
        self.remaining = 0  # payload bytes left in the current chunk
        self.crlf_left = 0  # bytes of the CRLF that ends the current chunk still to skip
        self.pending = b""  # an incomplete size or trailer line
        self.in_trailers = False
        self.done = False

    def feed(self, data: bytes) -> bytes:
        if self.pending:
            data = self.pending + data
            self.pending = b""
        out = []
        pos = 0
        n = len(data)
        while pos < n and not self.done:
            if self.remaining:
                end = pos + self.remaining
                if end > n:
                    end = n
                out.append(data[pos:end])
                self.remaining -= end - pos
                pos = end
                if not self.remaining:
                    self.crlf_left = 2
            elif self.crlf_left:
                take = data[pos : pos + self.crlf_left]
                if take != b"\r\n"[2 - self.crlf_left : 2 - self.crlf_left + len(take)]:
                    raise _HttpProtocolError("chunk not followed by CRLF")
                pos += len(take)
                self.crlf_left -= len(take)
            else:
                eol = data.find(b"\r\n", pos)
                if eol < 0:
                    if n - pos > 4096:
                        raise _HttpProtocolError("chunk size line too long")
                    self.pending = data[pos:]
                    break
                line = data[pos:eol]
                pos = eol + 2
                if self.in_trailers:
                    if not line:
                        self.done = True
                    continue
                try:
                    size = int(line, 16)
                except ValueError:
                    size = self._size_with_extension(line)
                if size <= 0:
                    if size < 0:
                        raise _HttpProtocolError(f"bad chunk size line {line[:40]!r}")
                    self.in_trailers = True
                    continue
                end = pos + size
                if end + 2 <= n:
                    # Fast path, the usual case: the whole chunk and its CRLF are in this read.
                    if data[end : end + 2] != b"\r\n":
                        raise _HttpProtocolError("chunk not followed by CRLF")
                    out.append(data[pos:end])
                    pos = end + 2
                else:
                    self.remaining = size
        if self.done and pos < n:
            self.pending = data[pos:]  # bytes after the body: the caller must not reuse the connection
        if len(out) == 1:
            return out[0]
        return b"".join(out)

    @staticmethod
    def _size_with_extension(line: bytes) -> int:
        try:
            return int(line.split(b";", 1)[0], 16)
        except ValueError:
            raise _HttpProtocolError(f"bad chunk size line {line[:40]!r}") from None


def _parse_head(head: bytes) -> tuple[int, bytes, list[tuple[bytes, bytes]], bytes]:
    """(status, reason, headers, version) of a response head without its blank line."""
    lines = head.split(b"\r\n")
    version, _, rest = lines[0].partition(b" ")
    status_text, _, reason = rest.partition(b" ")
    # Strict: int() would also take "+200", " 200" or "2_00".
    if not version.startswith(b"HTTP/1.") or len(status_text) != 3 or not status_text.isdigit():
        raise _HttpProtocolError(f"bad status line {lines[0][:60]!r}")
    headers = []
    for line in lines[1:]:
        k, sep, v = line.partition(b":")
        if not sep or not k or k != k.strip():  # whitespace before the colon: RFC 9112 says reject
            raise _HttpProtocolError(f"bad header line {line[:60]!r}")
        headers.append((k, v.strip()))
    return int(status_text), reason, headers, version


def _framing(method: str, status: int, version: bytes,
             headers: list[tuple[bytes, bytes]]) -> tuple[str, int, bool]:
    """(framing, length, reusable) of a response body: framing is "chunked", "length" or "close"."""
    framing, length, reusable = "close", 0, version == b"HTTP/1.1"
    lengths: set[bytes] = set()
    for k, v in headers:
        name = k.lower()
        if name == b"transfer-encoding" and b"chunked" in v.lower():
            framing = "chunked"
        elif name == b"content-length":
            lengths.update(part.strip() for part in v.split(b","))
        elif name == b"connection":
            if b"close" in v.lower():
                reusable = False
            elif b"keep-alive" in v.lower():
                reusable = True
    if lengths and framing != "chunked":
        value = lengths.pop()
        # Digits only (not "-1", "+5", "1_0"); copies must agree, or the body's end is unknowable.
        if lengths or not value.isdigit():
            raise _HttpProtocolError(f"bad Content-Length {b', '.join([value, *sorted(lengths)])[:60]!r}")
        framing, length = "length", int(value)
    if method == "HEAD" or status in (204, 304):
        framing, length = "length", 0
    if framing == "close":
        reusable = False
    return framing, length, reusable


class _ResponseStream(httpx.AsyncByteStream):
    """The body of one response; gives its connection back to the pool when fully read and closed."""

    def __init__(self, transport: LoadgenTransport, key: tuple[str, int], conn: _Connection,
                 first: list[tuple[int, bytes]], framing: str, length: int, reusable: bool,
                 timeout_s: float | None, request: httpx.Request) -> None:
        self._transport = transport
        self._key = key
        self._conn: _Connection | None = conn
        self._first = first
        self._framing = framing  # "chunked" | "length" | "close"
        self._left = length
        self._decoder = _ChunkedDecoder() if framing == "chunked" else None
        self._reusable = reusable
        self._timeout_s = timeout_s
        self._request = request
        self._complete = framing == "length" and length == 0

    async def aiter_timed(self) -> Any:
        """Yield (arrival_ns, body bytes) as pieces arrive; arrival_ns is when the socket was read."""
        pieces, self._first = self._first, []
        conn = self._conn
        while not self._complete:
            for i, (ns, data) in enumerate(pieces):
                body = self._decode(data)
                if body:
                    yield ns, body
                if self._complete:
                    if i + 1 < len(pieces):
                        self._reusable = False  # bytes after the body: do not trust the connection
                    break
            if self._complete or conn is None:
                break
            try:
                pieces = await conn.read(self._timeout_s)
            except TimeoutError:
                raise httpx.ReadTimeout("read timed out", request=self._request) from None
            if not pieces:
                if self._framing == "close":
                    self._complete = True
                    break
                if conn.lost_exc is not None:
                    raise httpx.ReadError(f"connection lost: {conn.lost_exc}", request=self._request)
                raise httpx.RemoteProtocolError("peer closed connection without sending complete message body",
                                                request=self._request)

    def _decode(self, data: bytes) -> bytes:
        if self._decoder is not None:
            try:
                body = self._decoder.feed(data)
            except _HttpProtocolError as exc:
                raise httpx.RemoteProtocolError(str(exc), request=self._request) from None
            if self._decoder.done:
                self._complete = True
                if self._decoder.pending:
                    self._reusable = False  # bytes after the body: do not trust the connection
            return body
        if self._framing == "length":
            if len(data) >= self._left:
                if len(data) > self._left:
                    self._reusable = False
                data = data[: self._left]
                self._complete = True
            self._left -= len(data)
        return data

    async def __aiter__(self) -> Any:
        async for _ns, body in self.aiter_timed():
            yield body

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._complete and self._reusable and not conn.closed and not conn.pieces:
            self._transport._release(self._key, conn)
        else:
            conn.close()
            self._transport._release(self._key, None)


class LoadgenTransport(httpx.AsyncBaseTransport):
    """httpx transport for plain-HTTP/1.1 load generation (see the comment above); https is delegated.

    At most `max_connections` requests are in flight; more wait for a connection. A request sent on a
    kept-alive connection that the server had closed is sent again once on a new connection, but only
    if not a byte of its response had arrived.
    """

    def __init__(self, max_connections: int = 100) -> None:
        self._max_connections = max_connections
        self._slots: asyncio.Semaphore | None = None  # created on first use, inside the event loop
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._fallback: httpx.AsyncHTTPTransport | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme != "http":
            if self._fallback is None:
                self._fallback = httpx.AsyncHTTPTransport(
                    limits=httpx.Limits(max_connections=self._max_connections), trust_env=False)
            return await self._fallback.handle_async_request(request)
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._max_connections)
        timeouts = request.extensions.get("timeout", {})
        key = (url.host, url.port or 80)
        body = request.content if hasattr(request, "_content") else await request.aread()
        wire = self._request_head(request) + body
        if not self._slots.locked():
            await self._slots.acquire()  # free slot: no need for wait_for's task
        else:
            try:
                await asyncio.wait_for(self._slots.acquire(), timeouts.get("pool"))
            except TimeoutError:
                raise httpx.PoolTimeout("no free connection", request=request) from None
        conn: _Connection | None = None
        try:
            for attempt in range(2):
                conn, reused = await self._connect(key, timeouts.get("connect"), request, fresh=attempt > 0)
                assert conn.transport is not None
                conn.transport.write(wire)
                try:
                    body_pieces, status, reason, headers, version = await self._read_head(
                        conn, timeouts.get("read"), request)
                    break
                except _ClosedBeforeResponse:
                    conn.close()
                    conn = None
                    if reused and attempt == 0:
                        continue  # the server had closed this idle connection: send once more, on a new one
                        # (never on another idle one: those opened with it expire with it)
                    raise httpx.RemoteProtocolError("server disconnected without sending a response",
                                                    request=request) from None
            assert conn is not None
            # Inside the try: a malformed head must close the connection and give its slot back.
            return self._response(request, key, conn, status, reason, headers, body_pieces, version,
                                  timeouts.get("read"))
        except _HttpProtocolError as exc:
            self._abandon(conn)
            raise httpx.RemoteProtocolError(str(exc), request=request) from None
        except BaseException:  # including cancellation (the caller's timeout): leave nothing half-open
            self._abandon(conn)
            raise

    def _abandon(self, conn: _Connection | None) -> None:
        if conn is not None:
            conn.close()
        assert self._slots is not None
        self._slots.release()

    @staticmethod
    def _request_head(request: httpx.Request) -> bytes:
        lines = [b"%s %s HTTP/1.1" % (request.method.encode(), request.url.raw_path)]
        lines.extend(k + b": " + v for k, v in request.headers.raw)
        return b"\r\n".join(lines) + b"\r\n\r\n"

    async def _connect(self, key: tuple[str, int], timeout_s: float | None, request: httpx.Request,
                       fresh: bool = False) -> tuple[_Connection, bool]:
        idle = self._idle.get(key)
        now = monotonic()
        while idle and not fresh:
            conn = idle.pop()
            if not conn.closed and not conn.pieces and now - conn.idle_since < _IDLE_EXPIRY_S:
                return conn, True
            conn.close()
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Connection(loop), key[0], key[1]), timeout_s)
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connect to {key[0]}:{key[1]} timed out", request=request) from None
        except OSError as exc:
            raise httpx.ConnectError(f"{exc.strerror or exc} ({key[0]}:{key[1]})", request=request) from None
        return conn, False

    async def _read_head(self, conn: _Connection, timeout_s: float | None, request: httpx.Request) -> Any:
        """(body pieces, status, reason, headers, version) of the final response; 1xx ones are skipped."""
        buf = b""
        pieces: list[tuple[int, bytes]] = []
        started = False  # a byte of a response came: never send the request again
        while True:
            if not pieces:
                try:
                    pieces = await conn.read(timeout_s)
                except TimeoutError:
                    conn.close()
                    raise httpx.ReadTimeout("timed out waiting for the response", request=request) from None
                if not pieces:
                    if not buf and not started:
                        raise _ClosedBeforeResponse()
                    raise httpx.RemoteProtocolError("server disconnected in the middle of the response head",
                                                    request=request)
            ns, data = pieces.pop(0)
            started = True
            start = len(buf)
            buf += data
            end = buf.find(b"\r\n\r\n", max(0, start - 3))
            if end < 0:
                if len(buf) > _MAX_HEAD_BYTES:
                    raise httpx.RemoteProtocolError("response head too large", request=request)
                continue
            status, reason, headers, version = _parse_head(buf[:end])
            if buf[end + 4 :]:
                pieces.insert(0, (ns, buf[end + 4 :]))  # the rest of this piece, and later pieces, follow
            buf = b""
            if status == 101:
                raise _HttpProtocolError("101 Switching Protocols, but no upgrade was asked for")
            if status >= 200:
                return pieces, status, reason, headers, version
            # 1xx (100 Continue, 103 Early Hints): interim, no body; the final response follows.

    def _response(self, request: httpx.Request, key: tuple[str, int], conn: _Connection, status: int,
                  reason: bytes, headers: list[tuple[bytes, bytes]], pieces: list[tuple[int, bytes]],
                  version: bytes, timeout_s: float | None) -> httpx.Response:
        framing, length, reusable = _framing(request.method, status, version, headers)
        stream = _ResponseStream(self, key, conn, pieces, framing, length, reusable, timeout_s, request)
        return httpx.Response(status, headers=headers, stream=stream,
                              extensions={"http_version": version, "reason_phrase": reason,
                                          TIMED_STREAM_EXTENSION: stream})

    def _release(self, key: tuple[str, int], conn: _Connection | None) -> None:
        if conn is not None:
            conn.idle_since = monotonic()
            self._idle.setdefault(key, []).append(conn)
        if self._slots is not None:
            self._slots.release()

    async def aclose(self) -> None:
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()
        if self._fallback is not None:
            await self._fallback.aclose()
