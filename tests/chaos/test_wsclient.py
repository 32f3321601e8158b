"""The load generator's WebSocket client (bench/wsclient.py): its frame codec against a fake
transport, then real exchanges with a `websockets` server on loopback."""

from __future__ import annotations

import asyncio
import os
from http import HTTPStatus
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed as ServerConnectionClosed

from bench import wsclient
from bench.wsclient import (
    CLOSE_PROTOCOL_ERROR,
    CLOSE_TOO_BIG,
    OP_BINARY,
    OP_CLOSE,
    OP_CONTINUATION,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    HandshakeError,
    WebSocket,
    accept_for,
    encode_frame,
    mask_payload,
)


def _naive_mask(payload: bytes, key: bytes) -> bytes:
    return bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def decode_client_frame(data: bytes) -> tuple[bool, int, bytes, int]:
    """(fin, opcode, unmasked payload, bytes used) of one masked client frame."""
    b0, b1 = data[0], data[1]
    assert b1 & 0x80, "a client frame is masked"
    length, pos = b1 & 0x7F, 2
    if length == 126:
        length, pos = int.from_bytes(data[2:4], "big"), 4
    elif length == 127:
        length, pos = int.from_bytes(data[2:10], "big"), 10
    key = data[pos : pos + 4]
    payload = _naive_mask(data[pos + 4 : pos + 4 + length], key)
    return bool(b0 & 0x80), b0 & 0x0F, payload, pos + 4 + length


def server_frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    return encode_frame(opcode, payload, fin=fin, mask=False)


class FakeTransport:
    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def get_write_buffer_size(self) -> int:
        return 0

    def frames(self) -> list[tuple[bool, int, bytes]]:
        out, data = [], bytes(self.written)
        while data:
            fin, op, payload, used = decode_client_frame(data)
            out.append((fin, op, payload))
            data = data[used:]
        return out


class Opened:
    """A WebSocket past its handshake on a fake transport; records messages and closes."""

    def __init__(self, max_size: int = wsclient.MAX_SIZE_BYTES) -> None:
        self.messages: list[Any] = []
        self.closed: list[int | None] = []
        self.ws = WebSocket(
            "dGhlIHNhbXBsZSBub25jZQ==",
            self.messages.append,
            lambda ws: self.closed.append(ws.close_code),
            max_size=max_size,
        )
        self.transport = FakeTransport()
        self.ws.connection_made(self.transport)  # type: ignore[arg-type]
        self.ws.data_received(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Accept: "
            + accept_for(self.ws.key).encode()
            + b"\r\n\r\n"
        )
        assert self.ws.is_open and self.ws.handshake.done()

    def feed(self, data: bytes, chunk: int = 0) -> None:
        if chunk <= 0:
            self.ws.data_received(data)
            return
        for i in range(0, len(data), chunk):
            self.ws.data_received(data[i : i + chunk])


# ------------------------------------------------------------------------------------- codec


@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 125, 126, 4093, 65536])
def test_masking_round_trip(n: int) -> None:
    payload, key = os.urandom(n), os.urandom(4)
    masked = mask_payload(payload, key)
    assert masked == _naive_mask(payload, key)
    assert mask_payload(masked, key) == payload


@pytest.mark.parametrize(("n", "header"), [(125, 2), (126, 4), (65535, 4), (65536, 10)])
def test_client_frame_lengths(n: int, header: int) -> None:
    payload = os.urandom(n)
    frame = encode_frame(OP_BINARY, payload)
    assert len(frame) == header + 4 + n
    assert decode_client_frame(frame) == (True, OP_BINARY, payload, len(frame))
    # A fresh key per frame: the same payload is masked differently.
    assert encode_frame(OP_BINARY, payload)[header:] != frame[header:] or n == 0


async def test_client_masks_with_a_fresh_key_each_frame() -> None:
    t = Opened()
    for _ in range(4):
        t.ws.send("same text")
    keys = set()
    data = bytes(t.transport.written)
    while data:
        keys.add(data[2:6])
        assert decode_client_frame(data)[1:3] == (OP_TEXT, b"same text")
        data = data[decode_client_frame(data)[3] :]
    assert len(keys) == 4


@pytest.mark.parametrize("n", [125, 126, 65536])
async def test_server_frame_lengths_whole_and_in_pieces(n: int) -> None:
    t = Opened()
    text = "é" * (n // 2) + "x" * (n % 2)
    t.feed(server_frame(OP_TEXT, text.encode()))
    t.feed(server_frame(OP_BINARY, b"\x00" * n), chunk=7)
    assert t.messages == [text, b"\x00" * n]


async def test_several_frames_in_one_read() -> None:
    t = Opened()
    t.feed(b"".join(server_frame(OP_TEXT, f"m{i}".encode()) for i in range(5)))
    assert t.messages == [f"m{i}" for i in range(5)]


async def test_fragmented_message_with_a_ping_inside() -> None:
    t = Opened()
    t.feed(
        server_frame(OP_TEXT, b"hel", fin=False)
        + server_frame(OP_CONTINUATION, b"lo ", fin=False)
        + server_frame(OP_PING, b"p1")
        + server_frame(OP_CONTINUATION, b"world")
    )
    assert t.messages == ["hello world"]
    assert t.transport.frames() == [(True, OP_PONG, b"p1")]


async def test_ping_is_answered_with_pong_and_pong_ignored() -> None:
    t = Opened()
    t.feed(server_frame(OP_PING, b"are you there"))
    t.feed(server_frame(OP_PONG, b"unsolicited"))
    assert t.transport.frames() == [(True, OP_PONG, b"are you there")]
    assert t.messages == [] and t.ws.is_open


async def test_server_close_is_echoed() -> None:
    t = Opened()
    t.feed(server_frame(OP_CLOSE, (4000).to_bytes(2, "big") + b"bye"))
    assert t.transport.frames() == [(True, OP_CLOSE, (4000).to_bytes(2, "big"))]
    assert not t.ws.is_open and t.closed == [4000] and t.ws.close_reason == "bye"
    t.feed(server_frame(OP_TEXT, b"late"))  # after the close: not a message
    assert t.messages == []
    with pytest.raises(wsclient.ConnectionClosed):
        t.ws.send("after close")
    t.ws.connection_lost(None)
    assert t.closed == [4000]  # called once


async def test_client_close_waits_for_the_server_then_returns() -> None:
    t = Opened()
    closing = asyncio.ensure_future(t.ws.close())
    await asyncio.sleep(0)
    assert t.transport.frames() == [(True, OP_CLOSE, (1000).to_bytes(2, "big"))]
    assert t.closed == [None] and not closing.done()
    t.feed(server_frame(OP_CLOSE, (1000).to_bytes(2, "big")))
    t.ws.connection_lost(None)
    await asyncio.wait_for(closing, 5)
    assert t.ws.close_code == 1000


async def test_client_close_is_bounded() -> None:
    messages: list[Any] = []
    ws = WebSocket("a2V5a2V5a2V5a2V5a2V5a2V5", messages.append, close_timeout_s=0.01)
    transport = FakeTransport()
    ws.connection_made(transport)  # type: ignore[arg-type]
    ws.data_received(
        b"HTTP/1.1 101 OK\r\nUpgrade: websocket\r\nConnection: upgrade\r\n"
        b"Sec-WebSocket-Accept: " + accept_for(ws.key).encode() + b"\r\n\r\n"
    )
    aborts: list[bool] = []

    def abort() -> None:
        aborts.append(True)
        ws.connection_lost(None)

    transport.abort = abort  # type: ignore[method-assign]
    await asyncio.wait_for(ws.close(), 5)  # the server never answers: the timer drops it
    assert aborts == [True] and ws.close_code == wsclient.CLOSE_ABNORMAL


@pytest.mark.parametrize("fragmented", [False, True])
async def test_oversized_message_refused_with_1009(fragmented: bool) -> None:
    t = Opened(max_size=1000)
    if fragmented:
        t.feed(server_frame(OP_TEXT, b"a" * 600, fin=False))
        t.feed(server_frame(OP_CONTINUATION, b"b" * 600)[:4])  # the header says enough
    else:
        t.feed(server_frame(OP_TEXT, b"a" * 1001)[:4])
    assert t.messages == []
    assert t.transport.frames()[0][:2] == (True, OP_CLOSE)
    assert int.from_bytes(t.transport.frames()[0][2][:2], "big") == CLOSE_TOO_BIG
    assert t.transport.closed and t.closed == [CLOSE_TOO_BIG]
    t.feed(server_frame(OP_TEXT, b"ignored"))
    assert t.messages == []


async def test_masked_server_frame_refused_with_1002() -> None:
    t = Opened()
    t.feed(encode_frame(OP_TEXT, b"masked", mask=True))
    assert t.messages == []
    (fin, op, payload), *_ = t.transport.frames()
    assert op == OP_CLOSE and int.from_bytes(payload[:2], "big") == CLOSE_PROTOCOL_ERROR
    assert t.transport.closed and t.closed == [CLOSE_PROTOCOL_ERROR]


@pytest.mark.parametrize(
    "bad",
    [
        server_frame(OP_CONTINUATION, b"no start"),
        server_frame(OP_PING, b"x", fin=False),
        server_frame(OP_PING, b"x" * 126),
        server_frame(0x3, b"reserved opcode"),
        bytes((0xC1, 0x01)) + b"x",  # RSV1 without an extension
        server_frame(OP_CLOSE, b"\x03"),
        server_frame(OP_TEXT, b"a", fin=False) + server_frame(OP_TEXT, b"b"),
    ],
)
async def test_protocol_errors_fail_with_1002(bad: bytes) -> None:
    t = Opened()
    t.feed(bad)
    assert t.messages == [] and t.closed == [CLOSE_PROTOCOL_ERROR]


async def test_invalid_utf8_text_fails_with_1007() -> None:
    t = Opened()
    t.feed(server_frame(OP_TEXT, b"\xff\xfe"))
    assert t.messages == [] and t.closed == [wsclient.CLOSE_INVALID_DATA]


async def test_handshake_refusals() -> None:
    for response, status in [
        (b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n", 403),
        (
            b"HTTP/1.1 101 OK\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: wrong\r\n\r\n",
            101,
        ),
        (b"SSH-2.0-OpenSSH\r\n\r\n", 0),
    ]:
        ws = WebSocket("dGhlIHNhbXBsZSBub25jZQ==", print)
        transport = FakeTransport()
        ws.connection_made(transport)  # type: ignore[arg-type]
        ws.data_received(response)
        with pytest.raises(HandshakeError) as info:
            await ws.handshake
        assert info.value.status == status and transport.aborted
    ws = WebSocket("dGhlIHNhbXBsZSBub25jZQ==", print)
    transport = FakeTransport()
    ws.connection_made(transport)  # type: ignore[arg-type]
    ws.data_received(b"HTTP/1.1 101 OK\r\n" + b"X: y\r\n" * 3000)
    with pytest.raises(HandshakeError, match="too large"):
        await ws.handshake


# ------------------------------------------------------------------------ a real server


async def _echo(conn: ServerConnection) -> None:
    auth = conn.request.headers.get("Authorization") if conn.request else None
    await conn.send(f"hello {auth}")
    try:
        async for message in conn:
            if message == "ping me":
                await asyncio.wait_for(await conn.ping(b"srv"), 5)  # our pong answers it
                await conn.send("pong seen")
            elif message == "close me":
                await conn.close(4001, "as asked")
            else:
                await conn.send(message)
    except ServerConnectionClosed:
        pass


def _refuse_bad_path(conn: ServerConnection, request: Any) -> Any:
    if request.path.startswith("/refused"):
        return conn.respond(HTTPStatus.FORBIDDEN, "no\n")
    return None


async def test_end_to_end_with_a_websockets_server() -> None:
    await _exchange()


def test_end_to_end_on_uvloop() -> None:
    """The load generator runs on uvloop, whose transports are not asyncio's classes."""
    uvloop = pytest.importorskip("uvloop")
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_exchange())


async def _exchange() -> None:
    async with serve(
        _echo, "127.0.0.1", 0, process_request=_refuse_bad_path, max_size=1 << 21,
        compression=None,
    ) as server:  # fmt: skip
        port = server.sockets[0].getsockname()[1]
        queue: asyncio.Queue[Any] = asyncio.Queue()
        closed: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()

        def on_closed(w: WebSocket) -> None:
            if not closed.done():
                closed.set_result(w.close_code)

        ws = await wsclient.connect(
            f"ws://127.0.0.1:{port}/table?after=3",
            on_message=queue.put_nowait,
            on_closed=on_closed,
            headers={"Authorization": "Bearer t0k"},
        )
        assert await asyncio.wait_for(queue.get(), 5) == "hello Bearer t0k"
        big = os.urandom(70_000)
        ws.send("café")
        ws.send_text(b'{"type":"snapshot"}')
        ws.send(big)
        assert await asyncio.wait_for(queue.get(), 5) == "café"
        assert await asyncio.wait_for(queue.get(), 5) == '{"type":"snapshot"}'
        assert await asyncio.wait_for(queue.get(), 5) == big
        ws.send("ping me")
        assert await asyncio.wait_for(queue.get(), 5) == "pong seen"
        ws.send("close me")
        assert await asyncio.wait_for(closed, 5) == 4001
        await asyncio.wait_for(ws.close(), 5)
        assert ws.state == wsclient.CLOSED and queue.empty()

        # The client closes: the server sees a normal close.
        ws = await wsclient.connect(f"ws://127.0.0.1:{port}/", on_message=queue.put_nowait)
        assert await asyncio.wait_for(queue.get(), 5) == "hello None"
        await asyncio.wait_for(ws.close(), 5)
        assert ws.close_code == 1000 and ws.state == wsclient.CLOSED

        with pytest.raises(HandshakeError) as info:
            await wsclient.connect(f"ws://127.0.0.1:{port}/refused", on_message=print)
        assert info.value.status == 403

    with pytest.raises(OSError):  # nobody listens any more
        await wsclient.connect(f"ws://127.0.0.1:{port}/", on_message=print)
