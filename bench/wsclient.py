"""A minimal RFC 6455 WebSocket client for the load generator, on `asyncio.Protocol`.

The load generator shares the machine's cores with the platform it measures, so its sockets
must cost as little as possible: no reader task per socket and no queue between the socket and
its user. `data_received` parses the frames and hands each complete message to the caller's
`on_message` callback at once; sending is a synchronous `transport.write` of one masked frame.

What it does: the opening handshake (`Sec-WebSocket-Key`/`Accept` checked, any other status
than 101 is a `HandshakeError` carrying it), masked client frames with a fresh key per frame,
unmasked server frames (a masked one fails the connection with 1002), 7/16/64-bit lengths,
fragmented messages, ping answered with pong, the close handshake in both directions. What it
does not: extensions (none is offered, so one in the answer is an error), subprotocols, TLS.

Bounded everywhere: the handshake (`handshake_timeout_s`, a response head of at most
`MAX_HANDSHAKE_BYTES`), a message of at most `max_size` bytes (larger: closed with 1009, before
its payload is buffered), the unsent bytes (`MAX_WRITE_BUFFER_BYTES`) and the close handshake
(`close_timeout_s`, then the socket is dropped).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
from collections.abc import Callable
from typing import Any, cast
from urllib.parse import urlsplit

ACCEPT_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MAX_SIZE_BYTES = 1 << 20
MAX_HANDSHAKE_BYTES = 16 * 1024
MAX_WRITE_BUFFER_BYTES = 1 << 20
HANDSHAKE_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 2.0

OP_CONTINUATION = 0x0
OP_TEXT = 0x1
OP_BINARY = 0x2
OP_CLOSE = 0x8
OP_PING = 0x9
OP_PONG = 0xA

CLOSE_NORMAL = 1000
CLOSE_PROTOCOL_ERROR = 1002
CLOSE_NO_STATUS = 1005
CLOSE_ABNORMAL = 1006
CLOSE_INVALID_DATA = 1007
CLOSE_TOO_BIG = 1009
CLOSE_INTERNAL_ERROR = 1011

# Connection states.
CONNECTING = 0
OPEN = 1
CLOSING = 2
CLOSED = 3

Message = str | bytes


class WsError(Exception):
    """The WebSocket could not be opened or used."""


class HandshakeError(WsError):
    """The server did not accept the upgrade; `status` is its HTTP status (0: not HTTP)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"handshake refused ({status}): {detail}" if status else detail)
        self.status = status


class ConnectionClosed(WsError):
    """The socket is closing or closed; `code` is the close code (1006: no close frame)."""

    def __init__(self, code: int | None) -> None:
        super().__init__(f"connection closed ({code})")
        self.code = code


class _RandomPool:
    """Bytes from `os.urandom` drawn a page at a time: a getrandom syscall per frame (and one
    per action reference) would be a visible share of the load generator's CPU."""

    __slots__ = ("_data", "_pos")

    PAGE_BYTES = 4096

    def __init__(self) -> None:
        self._data = b""
        self._pos = 0

    def take(self, n: int) -> bytes:
        if not 0 < n <= self.PAGE_BYTES:
            raise ValueError(f"take 1..{self.PAGE_BYTES} random bytes, not {n}")
        pos = self._pos
        if pos + n > len(self._data):
            # Every byte is used once: a fresh page when this one is spent.
            self._data = os.urandom(self.PAGE_BYTES)
            pos = 0
        self._pos = pos + n
        return self._data[pos : pos + n]


random_bytes = _RandomPool().take


def mask_payload(payload: bytes, key: bytes) -> bytes:
    """XOR `payload` with the repeated 4-byte `key` (its own inverse): one big-int XOR, far
    cheaper than a Python loop over the bytes for the small frames here."""
    n = len(payload)
    if len(key) != 4:
        raise ValueError("a masking key is 4 bytes")
    if n == 0:
        return b""
    stream = (key * ((n + 3) >> 2))[:n]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(stream, "big")).to_bytes(n, "big")


def encode_frame(opcode: int, payload: bytes, *, fin: bool = True, mask: bool = True) -> bytes:
    """One frame: masked with a fresh random key (a client's) or unmasked (a server's)."""
    n = len(payload)
    b0 = (0x80 if fin else 0) | opcode
    bit = 0x80 if mask else 0
    if n < 126:
        head = bytes((b0, bit | n))
    elif n < 65536:
        head = bytes((b0, bit | 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((b0, bit | 127)) + n.to_bytes(8, "big")
    if not mask:
        return head + payload
    # RFC 6455 5.3: a fresh key from a strong source (the OS's) for every frame.
    key = random_bytes(4)
    return head + key + mask_payload(payload, key)


def header_lines(headers: dict[str, str]) -> list[str]:
    """`name: value` request lines; a line break in either would smuggle a request: refused."""
    lines = []
    for name, value in headers.items():
        if any(c in name + value for c in "\r\n"):
            raise ValueError(f"header {name!r} contains a line break")
        lines.append(f"{name}: {value}")
    return lines


def close_payload(code: int, reason: str = "") -> bytes:
    if code == CLOSE_NO_STATUS:
        return b""
    return code.to_bytes(2, "big") + reason.encode()[:123]


def accept_for(key: str) -> str:
    """The `Sec-WebSocket-Accept` value a server must answer `key` with."""
    return base64.b64encode(hashlib.sha1(key.encode() + ACCEPT_GUID).digest()).decode()


def _valid_close_code(code: int) -> bool:
    # RFC 6455 7.4: codes a peer may send (1004-1006 and 1015 are reserved for local use).
    return (1000 <= code <= 1014 and code not in (1004, 1005, 1006)) or 3000 <= code <= 4999


class WebSocket(asyncio.Protocol):
    """One client connection. Messages go to `on_message` as they complete (text as `str`,
    binary as `bytes`); `on_closed(ws)` is called once, when the socket stops being open (a
    close frame from either side, a protocol failure or the TCP connection lost)."""

    def __init__(
        self,
        key: str,
        on_message: Callable[[Message], Any],
        on_closed: Callable[[WebSocket], Any] | None = None,
        max_size: int = MAX_SIZE_BYTES,
        close_timeout_s: float = CLOSE_TIMEOUT_S,
    ) -> None:
        if max_size < 125:
            raise ValueError("max_size must allow a control frame (125 bytes)")
        self.key = key
        self.on_message = on_message
        self.on_closed = on_closed
        self.max_size = max_size
        self.close_timeout_s = close_timeout_s
        self.state = CONNECTING
        # The code of the close frame received (or sent on a failure); 1006 when none came.
        self.close_code: int | None = None
        self.close_reason = ""
        self.failure = ""  # why this side failed the connection, if it did
        self.transport: asyncio.Transport | None = None
        loop = asyncio.get_running_loop()
        self._loop = loop
        self.handshake: asyncio.Future[None] = loop.create_future()
        self._lost: asyncio.Future[None] = loop.create_future()
        self._head = bytearray()
        self._buf = bytearray()
        self._parts: list[bytes] | None = None  # a fragmented message being assembled
        self._parts_size = 0
        self._parts_text = False
        self._notified = False
        self._abort_timer: asyncio.TimerHandle | None = None

    @property
    def is_open(self) -> bool:
        return self.state == OPEN

    # asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCP transport is not an asyncio.Transport subclass, though it is one in kind.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self.state == OPEN:
            self._frames(data)
        elif self.state == CONNECTING:
            self._handshake_data(data)
        elif self.state == CLOSING and self.failure == "":
            # Waiting for the server's close frame: only control frames matter now.
            self._frames(data)

    def eof_received(self) -> bool | None:
        return None  # the transport closes itself; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.state = CLOSED
        if self.close_code is None:
            self.close_code = CLOSE_ABNORMAL
        if self._abort_timer is not None:
            self._abort_timer.cancel()
        if not self.handshake.done():
            self.handshake.set_exception(
                HandshakeError(0, f"connection lost during the handshake: {exc or 'EOF'}")
            )
        if not self._lost.done():
            self._lost.set_result(None)
        self._notify_closed()

    # sending --------------------------------------------------------------------------
    def send(self, message: Message) -> None:
        """Send one message: `str` as a text frame, `bytes` as a binary frame."""
        if isinstance(message, str):
            self._send(OP_TEXT, message.encode())
        else:
            self._send(OP_BINARY, message)

    def send_text(self, payload: bytes) -> None:
        """Send already UTF-8-encoded text as a text frame (saves a decode and an encode)."""
        self._send(OP_TEXT, payload)

    def _send(self, opcode: int, payload: bytes) -> None:
        transport = self.transport
        if self.state != OPEN or transport is None:
            raise ConnectionClosed(self.close_code)
        if len(payload) > self.max_size:
            raise WsError(f"message of {len(payload)} bytes over the limit of {self.max_size}")
        if transport.get_write_buffer_size() > MAX_WRITE_BUFFER_BYTES:
            # The peer stopped reading: fail rather than buffer without bound.
            self._fail(CLOSE_INTERNAL_ERROR, "write buffer full")
            raise ConnectionClosed(self.close_code)
        transport.write(encode_frame(opcode, payload))

    # closing --------------------------------------------------------------------------
    async def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        """The close handshake: send a close frame, then wait (at most `close_timeout_s`) for
        the server to close the TCP connection, which it does after its own close frame."""
        if self.state == OPEN:
            self._write_close(code, reason)
            self.state = CLOSING
            self._notify_closed()
        if self.state == CLOSED:
            return
        self._arm_abort()
        try:
            await asyncio.shield(self._lost)
        finally:
            if self.state != CLOSED and self.transport is not None:
                self.transport.abort()

    def _write_close(self, code: int, reason: str) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(encode_frame(OP_CLOSE, close_payload(code, reason)))

    def _arm_abort(self) -> None:
        # Bounded: the socket is dropped if the server does not close it in time.
        if self._abort_timer is None and self.transport is not None:
            self._abort_timer = self._loop.call_later(self.close_timeout_s, self.transport.abort)

    def _fail(self, code: int, reason: str) -> None:
        """Fail the connection (RFC 6455 7.1.7): send a close frame with `code`, stop reading,
        close the socket."""
        if self.state == CLOSED or self.failure:
            return
        self.failure = reason
        if self.state == OPEN:
            self._write_close(code, reason)
            self.close_code = code
            self.close_reason = reason
        self.state = CLOSING
        self._parts = None
        self._buf = bytearray()
        if self.transport is not None:
            self.transport.close()  # flushes the close frame first
            self._arm_abort()
        self._notify_closed()

    def _notify_closed(self) -> None:
        if self._notified or self.handshake.cancelled() or not self.handshake.done():
            return
        if self.handshake.exception() is not None:
            return
        self._notified = True
        if self.on_closed is not None:
            self.on_closed(self)

    # the opening handshake ------------------------------------------------------------
    def request(self, host: str, target: str, headers: dict[str, str]) -> bytes:
        lines = [
            f"GET {target} HTTP/1.1",
            f"Host: {host}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {self.key}",
            "Sec-WebSocket-Version: 13",
        ]
        lines += header_lines(headers)
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _handshake_data(self, data: bytes) -> None:
        head = self._head
        head += data
        end = head.find(b"\r\n\r\n")
        if end < 0:
            if len(head) > MAX_HANDSHAKE_BYTES:
                self._refuse(HandshakeError(0, "handshake response head too large"))
            return
        if end > MAX_HANDSHAKE_BYTES:
            self._refuse(HandshakeError(0, "handshake response head too large"))
            return
        rest = bytes(head[end + 4 :])
        lines = bytes(head[:end]).decode("latin-1").split("\r\n")
        self._head = bytearray()
        status_line = lines[0].split(" ", 2)
        if len(status_line) < 2 or not status_line[0].startswith("HTTP/1."):
            self._refuse(HandshakeError(0, f"not an HTTP response: {lines[0][:80]!r}"))
            return
        try:
            status = int(status_line[1])
        except ValueError:
            self._refuse(HandshakeError(0, f"bad status line: {lines[0][:80]!r}"))
            return
        if status != 101:
            self._refuse(HandshakeError(status, lines[0][:80]))
            return
        fields: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                self._refuse(HandshakeError(status, f"bad header line: {line[:80]!r}"))
                return
            key = name.strip().lower()
            value = value.strip()
            fields[key] = f"{fields[key]}, {value}" if key in fields else value
        connection = {t.strip().lower() for t in fields.get("connection", "").split(",")}
        if fields.get("upgrade", "").lower() != "websocket" or "upgrade" not in connection:
            self._refuse(HandshakeError(status, "no Upgrade: websocket / Connection: Upgrade"))
            return
        if fields.get("sec-websocket-accept") != accept_for(self.key):
            self._refuse(HandshakeError(status, "wrong Sec-WebSocket-Accept"))
            return
        for offered_none in ("sec-websocket-extensions", "sec-websocket-protocol"):
            if offered_none in fields:
                self._refuse(HandshakeError(status, f"unrequested {offered_none}"))
                return
        self.state = OPEN
        if not self.handshake.done():
            self.handshake.set_result(None)
        if rest:
            self._frames(rest)

    def _refuse(self, exc: HandshakeError) -> None:
        self.state = CLOSED
        if not self.handshake.done():
            self.handshake.set_exception(exc)
        if self.transport is not None:
            self.transport.abort()

    # frames ---------------------------------------------------------------------------
    def _frames(self, data: bytes) -> None:
        """Parse every complete frame in the buffered bytes plus `data`; keep the rest."""
        if self._buf:
            self._buf += data
            buf: bytes | bytearray = self._buf
        else:
            buf = data
        n = len(buf)
        pos = 0
        max_size = self.max_size
        while n - pos >= 2:
            b0 = buf[pos]
            b1 = buf[pos + 1]
            if b1 & 0x80:
                self._fail(CLOSE_PROTOCOL_ERROR, "masked frame from the server")
                return
            length = b1 & 0x7F
            start = pos + 2
            if length == 126:
                if n - pos < 4:
                    break
                length = (buf[pos + 2] << 8) | buf[pos + 3]
                start = pos + 4
            elif length == 127:
                if n - pos < 10:
                    break
                length = int.from_bytes(buf[pos + 2 : pos + 10], "big")
                start = pos + 10
            opcode = b0 & 0x0F
            if b0 & 0x70:
                self._fail(CLOSE_PROTOCOL_ERROR, "reserved bits set (no extension agreed)")
                return
            if opcode >= 8:
                if not b0 & 0x80 or length > 125:
                    self._fail(CLOSE_PROTOCOL_ERROR, "fragmented or long control frame")
                    return
            elif length + self._parts_size > max_size:
                # Refused from its header alone: the payload is never buffered.
                self._fail(CLOSE_TOO_BIG, f"message over {max_size} bytes")
                return
            end = start + length
            if end > n:
                break
            payload = bytes(buf[start:end])
            pos = end
            if opcode == OP_TEXT and b0 & 0x80 and self._parts is None:
                self._complete(payload, True)  # the common case: a whole text message
            else:
                self._frame(bool(b0 & 0x80), opcode, payload)
            if self.failure or self.state == CLOSED:
                return
        if pos == 0:
            if buf is not self._buf:
                self._buf = bytearray(buf)
        elif pos < n:
            self._buf = bytearray(buf[pos:])
        elif self._buf:
            self._buf = bytearray()
        if len(self._buf) > max_size + 14:
            # Unreachable by the checks above; a bound kept explicit.
            self._fail(CLOSE_TOO_BIG, "receive buffer over its bound")

    def _deliver(self, message: Message) -> None:
        try:
            self.on_message(message)
        except Exception:
            self._fail(CLOSE_INTERNAL_ERROR, "message handler failed")
            raise

    def _frame(self, fin: bool, opcode: int, payload: bytes) -> None:
        if opcode == OP_CLOSE:
            self._close_frame(payload)
        elif opcode == OP_PING:
            if self.state == OPEN and self.transport is not None:
                self.transport.write(encode_frame(OP_PONG, payload))
        elif opcode == OP_PONG:
            return  # this client sends no pings; an unsolicited pong is allowed and ignored
        elif opcode in (OP_TEXT, OP_BINARY):
            if self._parts is not None:
                self._fail(CLOSE_PROTOCOL_ERROR, "new message inside a fragmented one")
            elif fin:
                self._complete(payload, opcode == OP_TEXT)
            else:
                self._parts = [payload]
                self._parts_size = len(payload)
                self._parts_text = opcode == OP_TEXT
        elif opcode == OP_CONTINUATION:
            if self._parts is None:
                self._fail(CLOSE_PROTOCOL_ERROR, "continuation frame without a message")
                return
            self._parts.append(payload)
            self._parts_size += len(payload)
            if fin:
                data = b"".join(self._parts)
                text = self._parts_text
                self._parts = None
                self._parts_size = 0
                self._complete(data, text)
        else:
            self._fail(CLOSE_PROTOCOL_ERROR, f"unknown opcode {opcode}")

    def _complete(self, data: bytes, text: bool) -> None:
        if self.state != OPEN:
            return  # closing: no more messages for the user
        if not text:
            self._deliver(data)
            return
        try:
            decoded = data.decode()
        except UnicodeDecodeError:
            self._fail(CLOSE_INVALID_DATA, "text message not UTF-8")
            return
        self._deliver(decoded)

    def _close_frame(self, payload: bytes) -> None:
        if len(payload) == 1:
            self._fail(CLOSE_PROTOCOL_ERROR, "close frame of one byte")
            return
        code = CLOSE_NO_STATUS
        reason = ""
        if payload:
            code = int.from_bytes(payload[:2], "big")
            if not _valid_close_code(code):
                self._fail(CLOSE_PROTOCOL_ERROR, f"invalid close code {code}")
                return
            try:
                reason = payload[2:].decode()
            except UnicodeDecodeError:
                self._fail(CLOSE_INVALID_DATA, "close reason not UTF-8")
                return
        self.close_code = code
        self.close_reason = reason
        if self.state == OPEN:
            # The server started the close: echo its code, then it closes the TCP connection.
            self._write_close(code, "")
            self.state = CLOSING
            self._notify_closed()
        self._arm_abort()


async def connect(
    url: str,
    *,
    on_message: Callable[[Message], Any],
    on_closed: Callable[[WebSocket], Any] | None = None,
    headers: dict[str, str] | None = None,
    max_size: int = MAX_SIZE_BYTES,
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S,
    close_timeout_s: float = CLOSE_TIMEOUT_S,
) -> WebSocket:
    """Open a `ws://` URL; raises `HandshakeError`, `OSError` or `TimeoutError`.

    Messages that arrive with the handshake's answer are delivered before this returns."""
    parts = urlsplit(url)
    if parts.scheme != "ws" or not parts.hostname:
        raise ValueError(f"only ws://host[:port]/path URLs are supported, not {url!r}")
    port = parts.port or 80
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    key = base64.b64encode(os.urandom(16)).decode()
    loop = asyncio.get_running_loop()
    ws = WebSocket(key, on_message, on_closed, max_size, close_timeout_s)
    request = ws.request(parts.netloc, target, headers or {})
    try:
        # asyncio.timeout arms one timer on this task: no extra task, unlike wait_for.
        async with asyncio.timeout(handshake_timeout_s):
            await loop.create_connection(lambda: ws, parts.hostname, port)
            if ws.transport is None:
                raise WsError("no transport after the connection was made")
            ws.transport.write(request)
            await ws.handshake
    except BaseException:
        if ws.transport is not None:
            ws.transport.abort()
        raise
    return ws
