"""A small HTTP/1.1 keep-alive client for internal calls: plain http on loopback or a cluster,
or over a Unix socket between services on one host.

httpx costs 0.9-3 ms of CPU per request on a small machine (more than the callee and
PostgreSQL together); this pool costs a few tens of microseconds. It does only what internal
calls need: one base URL (host and port), requests written in one `write`, responses parsed
by `httptools` (the C parser uvicorn uses) with a Content-Length or chunked body.

Bounded everywhere: at most `max_connections` sockets (callers beyond that wait in FIFO order
within their timeout), at most `MAX_HEADERS` response headers in `MAX_HEADER_BYTES` (the status
line and headers only), and a body of at most the request's `max_body_bytes` (its own limit,
the pool's `max_response_bytes` by default): a body above it fails with `ResponseTooLarge`. One deadline covers the whole request (pool wait, connect,
write, response), and the connect alone is capped by `CONNECT_TIMEOUT_S`.

A connection goes back to the pool only after a complete response that allows keep-alive;
one that failed, timed out, was cancelled or whose response was not fully read is closed.
Idle connections are used most recent first and dropped after `IDLE_TIMEOUT_S`, below
uvicorn's 5 s keep-alive timeout, so the server rarely closes one under a request.
"""

from __future__ import annotations

import asyncio
import collections
import re
from typing import Any
from urllib.parse import quote, urlencode

import httptools

MAX_HEADERS = 100
MAX_HEADER_BYTES = 64 * 1024
# Large enough for the largest answer a contract allows (a page of a report, a statement page,
# a page of log leaves: each a few MiB at most); a body above it is refused, not buffered.
DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024
# Below uvicorn's default keep-alive timeout (5 s): an idle connection is dropped by us first.
IDLE_TIMEOUT_S = 4.0
CONNECT_TIMEOUT_S = 5.0
_READ_SIZE = 256 * 1024
# A request target that needs no escaping: printable ASCII without space or fragment.
_PLAIN_TARGET = re.compile(r"[!-\"$-~]*\Z")


class TransportError(Exception):
    """The request failed before a complete response; `kind` names how (as httpx would)."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind


class ResponseTooLarge(TransportError):
    """The response's body is larger than the request's limit (its Content-Length said so, or
    the bytes received went past it); the connection is closed, not reused."""

    def __init__(self, limit: int, detail: str) -> None:
        super().__init__("ResponseTooLarge", detail)
        self.limit = limit


class _NoResponse(Exception):
    """The connection ended (or was reset) before a single byte of the response arrived."""


def encode_params(params: dict[str, Any]) -> str:
    """A query string as httpx writes it: lists repeat the key, booleans are lower case,
    None is empty."""
    items: list[tuple[str, str]] = []
    for key, value in params.items():
        values = value if isinstance(value, list | tuple) else (value,)
        for v in values:
            if v is None:
                text = ""
            elif v is True:
                text = "true"
            elif v is False:
                text = "false"
            else:
                text = str(v)
            items.append((str(key), text))
    return urlencode(items)


def request_target(prefix: str, path: str, params: dict[str, Any] | None) -> str:
    target = prefix + path if path.startswith("/") else f"{prefix}/{path}"
    if not _PLAIN_TARGET.match(target):
        target = quote(target.split("#", 1)[0], safe="!$&'()*+,;=:@/?%-._~")
    if params:
        target += ("&" if "?" in target else "?") + encode_params(params)
    return target


class _Connection:
    """One socket and its response parser; the parser calls the `on_*` methods."""

    __slots__ = (
        "reader",
        "writer",
        "parser",
        "max_body",
        "reused",
        "idle_since",
        "status",
        "chunks",
        "size",
        "headers",
        "header_bytes",
        "headers_done",
        "too_large",
        "complete",
        "keep_alive",
        "extra",
        "error",
    )

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_body: int
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.parser = httptools.HttpResponseParser(self)
        self.max_body = max_body
        self.reused = False
        self.idle_since = 0.0
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.chunks: list[bytes] = []
        self.size = 0
        self.headers = 0
        self.header_bytes = 0
        self.headers_done = False
        self.too_large = False
        self.complete = False
        self.keep_alive = False
        self.extra = False
        self.error = ""

    # httptools callbacks -------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self.complete:  # bytes after the response: never reuse this connection
            self.extra = True

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers += 1
        if self.headers > MAX_HEADERS:
            self.error = "too many response headers"
            raise ValueError(self.error)
        self.header_bytes += len(name) + len(value) + 4
        if self.header_bytes > MAX_HEADER_BYTES:
            self.error = "response headers too large"
            raise ValueError(self.error)
        if len(name) == 14 and name.lower() == b"content-length":
            try:
                length = int(value)
            except ValueError:
                length = -1
            if length > self.max_body:
                self.too_large = True
                self.error = f"response body of {length} bytes, over the limit of {self.max_body}"
                raise ValueError(self.error)

    def on_headers_complete(self) -> None:
        if not self.complete:
            self.status = self.parser.get_status_code()
            self.headers_done = True

    def on_body(self, body: bytes) -> None:
        if self.complete:
            return
        self.size += len(body)
        if self.size > self.max_body:
            self.too_large = True
            self.error = f"response body over the limit of {self.max_body} bytes"
            raise ValueError(self.error)
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        if self.complete:
            return
        if self.status < 200:  # an interim response (100 Continue): the real one follows
            self.chunks.clear()
            self.size = self.headers = self.header_bytes = 0
            self.headers_done = False
            return
        self.keep_alive = self.parser.should_keep_alive()
        self.complete = True

    # ----------------------------------------------------------------------------------
    @property
    def reusable(self) -> bool:
        return self.complete and self.keep_alive and not self.extra

    def usable(self, now: float) -> bool:
        """An idle connection that can carry another request."""
        return (
            now - self.idle_since < IDLE_TIMEOUT_S
            and not self.reader.at_eof()
            and not self.writer.is_closing()
        )

    async def exchange(self, data: bytes, max_body: int) -> tuple[int, bytes]:
        self._reset()
        self.max_body = max_body
        self.writer.write(data)
        if self.writer.transport.get_write_buffer_size():
            await self.writer.drain()
        received = 0
        read = self.reader.read
        feed = self.parser.feed_data
        while not self.complete:
            try:
                chunk = await read(_READ_SIZE)
            except ConnectionError as exc:
                if received == 0:
                    raise _NoResponse from exc
                raise TransportError("ReadError", type(exc).__name__) from exc
            if not chunk:
                if received == 0:
                    raise _NoResponse
                raise TransportError("RemoteProtocolError", "connection closed mid-response")
            received += len(chunk)
            try:
                feed(chunk)
            except httptools.HttpParserError as exc:
                if self.too_large:
                    raise ResponseTooLarge(self.max_body, self.error) from None
                raise TransportError("RemoteProtocolError", self.error or str(exc)) from exc
            # Only the bytes before the end of the headers count against their limit (a read
            # carries the body's first bytes with them); a head that never ends is cut off here,
            # each header's own size in `on_header`.
            if not self.headers_done and received > MAX_HEADER_BYTES:
                raise TransportError("RemoteProtocolError", "response headers too large")
        body = self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
        return self.status, body

    def close(self) -> None:
        self.writer.transport.abort()
        # The parser holds this connection's bound callbacks: without this, connection and
        # parser (and the stream objects) form a cycle that only a full collector pass frees.
        self.parser = None  # type: ignore[assignment]


class Http1Pool:
    """Keep-alive connections to one host and port (or one Unix socket: `unix_path`), at most
    `max_connections` of them."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        max_connections: int,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        unix_path: str | None = None,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self.host = host
        self.port = port
        self.unix_path = unix_path
        self.max_response_bytes = max_response_bytes
        self.max_connections = max_connections
        self._slots = asyncio.Semaphore(max_connections)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle: collections.deque[_Connection] = collections.deque()
        self._closed = False
        self.connections_opened = 0

    async def request(
        self, data: bytes, timeout_s: float, max_body_bytes: int | None = None
    ) -> tuple[int, bytes]:
        """Send one complete request (head and body) and return (status, body); a body over
        `max_body_bytes` (default: the pool's `max_response_bytes`) raises ResponseTooLarge."""
        max_body = self.max_response_bytes if max_body_bytes is None else max_body_bytes
        if self._closed:
            raise TransportError("ClientClosed", "the client has been closed")
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            # First use, or a new event loop (tests): sockets and waiters of another loop
            # cannot be used from this one.
            self._loop = loop
            self._idle.clear()
            self._slots = asyncio.Semaphore(self.max_connections)
        phase = "PoolTimeout"
        try:
            async with asyncio.timeout(timeout_s):
                await self._slots.acquire()
                conn: _Connection | None = None
                try:
                    phase = "ConnectTimeout"
                    conn = self._take_idle() or await self._connect()
                    phase = "ReadTimeout"
                    try:
                        return await conn.exchange(data, max_body)
                    except _NoResponse:
                        if not conn.reused:
                            raise TransportError(
                                "RemoteProtocolError", "closed without response"
                            ) from None
                    # The keep-alive race: the server closed this idle connection as we wrote
                    # to it, so nothing came back. Retried once on a new connection. Safe in
                    # Mesa because every write is idempotent by key (ledger holds, settlements,
                    # joins) or guarded by a sequence number (engine actions), so even a
                    # request the server did see cannot be applied twice.
                    conn.close()
                    phase = "ConnectTimeout"
                    conn = await self._connect()
                    phase = "ReadTimeout"
                    try:
                        return await conn.exchange(data, max_body)
                    except _NoResponse:
                        raise TransportError(
                            "RemoteProtocolError", "closed without response"
                        ) from None
                finally:
                    if conn is not None:
                        self._release(conn)
                    self._slots.release()
        except TimeoutError:
            raise TransportError(phase) from None
        except OSError as exc:
            kind = "ConnectError" if phase == "ConnectTimeout" else "ReadError"
            raise TransportError(kind, f"{type(exc).__name__}: {exc}") from exc

    def _take_idle(self) -> _Connection | None:
        idle = self._idle
        if not idle:
            return None
        now = asyncio.get_running_loop().time()
        while idle:
            conn = idle.pop()  # most recently used first
            if conn.usable(now):
                conn.reused = True
                return conn
            conn.close()
        return None

    async def _connect(self) -> _Connection:
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            if self.unix_path is not None:
                reader, writer = await asyncio.open_unix_connection(self.unix_path)
            else:
                reader, writer = await asyncio.open_connection(self.host, self.port)
        self.connections_opened += 1
        return _Connection(reader, writer, self.max_response_bytes)

    def _release(self, conn: _Connection) -> None:
        if self._closed or not conn.reusable or conn.writer.is_closing():
            conn.close()
            return
        now = asyncio.get_running_loop().time()
        conn.idle_since = now
        idle = self._idle
        idle.append(conn)
        # Connections idle too long sit at the far end (use is last in, first out): close them
        # rather than hold sockets the server has given up on.
        while idle and now - idle[0].idle_since >= IDLE_TIMEOUT_S:
            idle.popleft().close()

    async def aclose(self) -> None:
        self._closed = True
        while self._idle:
            self._idle.pop().close()
