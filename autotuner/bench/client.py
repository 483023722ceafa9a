"""The streaming client: one OpenAI-compatible request in, one `RequestRecord` (timestamps, tokens) out.

`stream_request` POSTs a request body with `stream: true` through a shared `httpx.AsyncClient` and reads
the Server-Sent Events as they arrive, noting the arrival time (`time.perf_counter_ns`) of every event
that carries generated text. Token counts come from the server's final `usage` chunk; when a server
sends none, the number of content events stands in and `usage_reported` is False.

How the stream is read, and why:
- Events are split on blank lines of the raw BYTE stream. Never split lines of decoded text: models
  with random weights emit U+2028 / U+0085, which `str.splitlines` (and so `aiter_lines`) treats as
  line breaks, cutting a JSON event in two. Raw bytes only ever contain "\\n" as SSE framing, because JSON
  escapes control characters inside strings.
- An event counts as a token only if its text / content / reasoning field is a non-empty string: the
  role-only first chat chunk and the empty finish chunk do not count. This is decided with one regex on
  the bytes instead of parsing every event as JSON (the hot path when a fast server streams thousands
  of tokens per second); only events that mention "usage" or "error" objects are parsed.
- Every failure becomes data, never an exception: HTTP status >= 400 (status and a body snippet), a
  redirect (3xx, never followed: `redirect_error` names the status, the Location and the option to fix),
  connection errors, the per-request timeout, an `{"error": ...}` event (vLLM, SGLang) or an `error:`
  event (llama-server) inside the stream, a body cut off mid-way.

This module must never print, retry a request, or decide what a record means (metrics.py does).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from time import perf_counter_ns
from typing import Any, Literal

import httpx

from autotuner.bench.transport import DROPPED_ERRORS, TIMED_STREAM_EXTENSION, LoadgenTransport

ERROR_SNIPPET_CHARS = 300  # how much of an error body or message a record keeps

# A generated-text field holding a non-empty string. Inside a JSON string every '"' is escaped, so this
# can only match a key, never text the model produced. "reasoning(_content)": thinking models stream
# their reasoning there before any "content", and it is generated tokens all the same.
_COMPLETIONS_CONTENT = re.compile(rb'"text"\s*:\s*"(?!")')
_CHAT_CONTENT = re.compile(rb'"(?:content|reasoning_content|reasoning)"\s*:\s*"(?!")')
# Objects that need a real JSON parse. Several servers send `"usage":null` in every chunk: not a match.
_NEEDS_PARSE = re.compile(rb'"(?:usage|error)"\s*:\s*[{"\[]|"object"\s*:\s*"error"')

_HEADERS = {"content-type": "application/json", "accept": "text/event-stream"}


@dataclass(slots=True)
class RequestRecord:
    """What happened to one request; times are `time.perf_counter_ns()` values.

    first_token_ns is None when no content arrived. chunk_times_ns holds the arrival time of every
    event carrying generated text (the first one is first_token_ns); events that arrived in the same
    network read share a time. end_ns is when the stream ended ([DONE], end of body or failure).
    """

    start_ns: int
    first_token_ns: int | None = None
    chunk_times_ns: list[int] = field(default_factory=list)
    end_ns: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    usage_reported: bool = False  # False: output_tokens counts content events, prompt_tokens is 0
    error: str | None = None
    due_ns: int | None = None  # when a schedule (a rate, a trace) wanted it sent: start_ns - due_ns is queue time
    session: int | None = None  # a multi-turn session's index in its level, and the turn (1 first)
    turn: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def dropped(self) -> bool:
        """The server closed the connection, with no answer or part of one: neither a status, an error
        event nor a timeout (the transport's errors below)."""
        return self.error is not None and self.error.lower().startswith(DROPPED_ERRORS)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RequestRecord:
        return cls(**data)


def _snippet(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= ERROR_SNIPPET_CHARS else text[:ERROR_SNIPPET_CHARS] + "..."


def _error_message(obj: Any) -> str | None:
    """The error an event object reports, or None: {"error": {...}|"..."} or {"object": "error", ...}."""
    if not isinstance(obj, dict):
        return None
    err = obj.get("error")
    if err:
        if isinstance(err, dict):
            msg = err.get("message") or json.dumps(err)
            code = err.get("code")
            return f"stream error {code}: {msg}" if code is not None else f"stream error: {msg}"
        return f"stream error: {err}"
    if obj.get("object") == "error":
        return f"stream error {obj.get('code')}: {obj.get('message')}"
    return None


def redirect_error(status: int, location: str | None) -> str:
    """A record's error for a 3xx: following it would measure two requests as one, so it is never followed."""
    where = f" to {location}" if location else " (no Location)"
    return (f"HTTP {status}: the server redirected{where}; the load generator does not follow redirects: "
            f"point the base URL (autotuner bench --base-url) at the final address")


def _has_text(choice: Any) -> bool:
    if not isinstance(choice, dict):
        return False
    if choice.get("text"):
        return True
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return bool(delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning"))
    return False


def _content(payload: bytes) -> str:
    """The answer text an event carries (completions' text, chat's content; not reasoning)."""
    try:
        choices = json.loads(payload).get("choices") or ()
    except (ValueError, AttributeError):
        return ""
    parts = []
    for c in choices:
        if isinstance(c, dict):
            delta = c.get("delta")
            value = c.get("text") if "text" in c else delta.get("content") if isinstance(delta, dict) else None
            parts.append(value if isinstance(value, str) else "")
    return "".join(parts)


async def _stamped(chunks: Any) -> Any:
    async for chunk in chunks:
        yield perf_counter_ns(), chunk


def _event_data(event: bytes) -> tuple[bytes | None, str | None]:
    """(data, error) of an event that is not a single "data: " line: multi-line, comments, `error:`."""
    data_lines = []
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            data_lines.append(line[6:] if line[5:6] == b" " else line[5:])
        elif line.startswith(b"error:"):  # llama-server: "error: {json}"
            body = line[6:].strip()
            try:
                msg = _error_message({"error": json.loads(body)})
            except ValueError:
                msg = None
            return None, msg or f"stream error: {_snippet(body.decode(errors='replace'))}"
    if not data_lines:
        return None, None  # a comment (": ping"), "event:"/"id:" only, or an empty event
    return b"\n".join(data_lines), None


async def stream_request(
    client: httpx.AsyncClient,
    url: str,
    body: bytes | dict[str, Any],
    *,
    endpoint: Literal["completions", "chat"] = "completions",
    timeout_s: float = 300.0,
    text: list[str] | None = None,
) -> RequestRecord:
    """Send one streaming request and record its timing; never raises for request failures.

    `body` is the JSON request body (bytes are sent as they are: encode once, outside the timed
    region). `timeout_s` bounds the whole request, from sending to the end of the stream. `text`: a
    list the generated text is appended to, event by event (what a multi-turn session sends back as
    the answer; parsing every event costs CPU, so only when asked).
    """
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    content_re = _CHAT_CONTENT if endpoint == "chat" else _COMPLETIONS_CONTENT
    needs_parse = _NEEDS_PARSE.search
    has_content = content_re.search
    fast_key = b'"content":"' if endpoint == "chat" else b'"text":"'
    fast_len = len(fast_key)
    rec = RequestRecord(start_ns=perf_counter_ns())
    times = rec.chunk_times_ns
    usage: dict[str, Any] | None = None
    error: str | None = None
    done = False
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("POST", url, content=content, headers=_HEADERS) as response:
                if response.status_code >= 300:
                    raw = await response.aread()  # read to the end: the connection can be reused
                    rec.end_ns = perf_counter_ns()
                    if response.status_code < 400:
                        rec.error = redirect_error(response.status_code, response.headers.get("location"))
                    else:
                        rec.error = f"HTTP {response.status_code}: {_snippet(raw.decode(errors='replace'))}"
                    return rec
                buf = b""
                timed = response.extensions.get(TIMED_STREAM_EXTENSION)
                # Either reads stamped at the socket (LoadgenTransport), or raw undecoded bytes stamped here.
                source = timed.aiter_timed() if timed is not None else _stamped(response.aiter_raw())
                async for now, data in source:
                    if done:
                        continue  # drain the rest (the end of the body) so the connection can be reused
                    if buf:
                        data = buf + data
                    if b"\r" in data:  # CRLF framing (sse-starlette): JSON never holds a raw CR
                        data = data.replace(b"\r\n", b"\n")
                    if b"\n\n" not in data:
                        buf = data
                        continue
                    events = data.split(b"\n\n")
                    buf = events.pop()
                    for event in events:
                        if event.startswith(b"data: ") and b"\n" not in event:
                            payload = event[6:]
                        else:
                            payload, error = _event_data(event)
                            if error is not None:
                                break
                            if payload is None:
                                continue
                        if payload == b"[DONE]":
                            done = True
                            break
                        if (b'"usage"' not in payload and b'"error"' not in payload) or needs_parse(payload) is None:
                            # Cheapest test first: the compact form every server we know sends.
                            at = payload.find(fast_key)
                            if at >= 0 and not payload.startswith(b'"', at + fast_len):  # not "" (empty)
                                times.append(now)
                            elif (at < 0 or endpoint == "chat") and has_content(payload) is not None:
                                times.append(now)  # spaced JSON, or a reasoning field
                            else:
                                continue
                            if text is not None:
                                text.append(_content(payload))
                            continue
                        # Rare: usage or error object (or an unusual layout): parse for real.
                        try:
                            obj = json.loads(payload)
                        except ValueError:
                            error = f"malformed event: {_snippet(payload.decode(errors='replace'))}"
                            break
                        error = _error_message(obj)
                        if error is not None:
                            break
                        if isinstance(obj.get("usage"), dict):
                            usage = obj["usage"]
                        choices = obj.get("choices") or ()
                        if any(_has_text(c) for c in choices):
                            times.append(now)
                            if text is not None:
                                text.append(_content(payload))
                    if done or error is not None:
                        rec.end_ns = now
                        if error is not None:
                            break  # leave the rest unread: the connection is closed, not reused
                if not done and error is None and buf.strip() == b"data: [DONE]":
                    done = True  # a last event without its blank line
        if not rec.end_ns:
            rec.end_ns = perf_counter_ns()
        if not done and error is None and rec.error is None and usage is None and not times:
            error = "the stream ended without any event"
    except TimeoutError:
        rec.end_ns = perf_counter_ns()
        rec.error = f"timeout after {timeout_s:g} s"
    except httpx.HTTPError as exc:
        rec.end_ns = perf_counter_ns()
        rec.error = f"{type(exc).__name__}: {_snippet(str(exc)) or 'no detail'}"
    except OSError as exc:
        rec.end_ns = perf_counter_ns()
        rec.error = f"{type(exc).__name__}: {_snippet(str(exc))}"
    except Exception as exc:  # a bug here must not end the level; it shows in the level's error samples
        rec.end_ns = perf_counter_ns()
        rec.error = f"unexpected {type(exc).__name__}: {_snippet(str(exc))}"

    if times:
        rec.first_token_ns = times[0]
    if usage is not None:
        rec.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        rec.output_tokens = int(usage.get("completion_tokens") or 0)
        rec.usage_reported = True
    else:
        rec.output_tokens = len(times)
    if error is not None and rec.error is None:
        rec.error = error
    return rec


_PROXY_VARIABLES = {"http": ("http_proxy", "all_proxy"), "https": ("https_proxy", "all_proxy")}


def ignored_proxy_note(base_url: str, environ: Mapping[str, str]) -> str | None:
    """A note when the environment names a proxy for `base_url` that the load generator will not use.

    It always connects directly: through a proxy it would measure the proxy as well. Loopback targets
    (where a proxy is never meant) and hosts that NO_PROXY covers get no note.
    """
    url = httpx.URL(base_url)
    host = url.host.lower()
    if _is_loopback(host):
        return None
    found = None
    for name in _PROXY_VARIABLES.get(url.scheme, ()):
        for variable in (name, name.upper()):  # lowercase first, as curl and httpx read them
            if environ.get(variable):
                found = variable
                break
        if found:
            break
    if found is None or _no_proxy_covers(host, environ.get("no_proxy") or environ.get("NO_PROXY") or ""):
        return None
    return (f"{found} is set, but the load generator connects to {host} directly and ignores proxies "
            f"(add {host} to NO_PROXY to silence this)")


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _no_proxy_covers(host: str, no_proxy: str) -> bool:
    for entry in no_proxy.lower().split(","):
        entry = entry.strip()
        if entry.startswith("[") and "]" in entry:
            entry = entry[1 : entry.index("]")]  # [::1]:8080
        elif entry.count(":") == 1:
            entry = entry.split(":")[0]  # host:port
        if entry == "*":
            return True
        entry = entry.removeprefix("*").removeprefix(".")  # ".example.com", "*.example.com"
        if entry and (host == entry or host.endswith("." + entry)):
            return True
    return False


def make_client(max_connections: int = 100, timeout_s: float = 300.0, *, fast: bool = True) -> httpx.AsyncClient:
    """An AsyncClient for load generation: HTTP/1.1 only, no proxies or .netrc from the environment,
    no compression, room for `max_connections` requests at once. fast=False: httpx's own transport."""
    transport: httpx.AsyncBaseTransport
    if fast:
        transport = LoadgenTransport(max_connections)
    else:
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        transport = httpx.AsyncHTTPTransport(limits=limits, http1=True, http2=False, trust_env=False)
    # accept-encoding identity: the SSE bytes must arrive as sent, never gzip'd.
    return httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(timeout_s), trust_env=False,
                             follow_redirects=False, headers={"accept-encoding": "identity"})
