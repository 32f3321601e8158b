"""The services' HTTP protocol writes a response's headers and body in one write."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from services.common.serve import HttpProtocol
from tests.uvicorn_server import UvicornServer


class _CountingTransport:
    """The real transport, with every write recorded."""

    def __init__(self, real: asyncio.Transport, writes: list[bytes]) -> None:
        self._real = real
        self._writes = writes

    def write(self, data: bytes) -> None:
        self._writes.append(bytes(data))
        self._real.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def _counting(base: type[HttpToolsProtocol], writes: list[bytes]) -> type[HttpToolsProtocol]:
    class Counting(base):  # type: ignore[valid-type, misc]
        def connection_made(self, transport: Any) -> None:
            super().connection_made(_CountingTransport(transport, writes))

    return Counting


async def _app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await receive()
    if scope["path"] == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for part in (b"one,", b"two,", b"three"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    elif scope["path"] == "/broken":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise RuntimeError("the handler failed after starting its response")
    else:
        body = b'{"ok":true}'
        headers = [(b"content-type", b"application/json"), (b"content-length", b"11")]
        await send({"type": "http.response.start", "status": 201, "headers": headers})
        await send({"type": "http.response.body", "body": body})


async def _exchange(protocol: type[HttpToolsProtocol], paths: list[str]) -> list[bytes]:
    """Serve `_app` with `protocol`, request each path on one keep-alive connection and return
    what the client read of each answer (to the end of the connection where it has no length)."""
    async with UvicornServer(_app, http=protocol, lifespan="off", log_config=None) as served:
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        answers = []
        for path in paths:
            writer.write(f"GET {path} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
            await writer.drain()
            if path == "/broken":
                answers.append(await asyncio.wait_for(reader.read(), 10))
                continue
            head = await reader.readuntil(b"\r\n\r\n")
            if b"content-length: " in head:
                length = int(head.split(b"content-length: ")[1].split(b"\r\n")[0])
                answers.append(head + await reader.readexactly(length))
            else:
                answers.append(head + await asyncio.wait_for(reader.read(), 10))
        writer.close()
        return answers


def _dateless(answer: bytes) -> bytes:
    """The answer without its date header (two exchanges may fall in different seconds)."""
    return re.sub(rb"\r\ndate: [^\r]*", b"", answer)


async def test_a_response_is_one_write_where_uvicorn_makes_two() -> None:
    writes: list[bytes] = []
    answers = await _exchange(_counting(HttpProtocol, writes), ["/a", "/b"])
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 201 Created\r\n")
        assert answer.endswith(b'\r\n\r\n{"ok":true}')
    assert len(writes) == 2  # one per response
    assert writes[0] == answers[0] and writes[1] == answers[1]

    plain: list[bytes] = []
    same = await _exchange(_counting(HttpToolsProtocol, plain), ["/a"])
    assert [_dateless(a) for a in same] == [_dateless(a) for a in answers[:1]]
    assert len(plain) == 2  # uvicorn's own: the headers, then the body


async def test_a_streamed_response_keeps_its_chunks() -> None:
    writes: list[bytes] = []
    (answer,) = await _exchange(_counting(HttpProtocol, writes), ["/stream"])
    assert b"transfer-encoding: chunked" in answer
    assert answer.endswith(b"\r\n\r\n4\r\none,\r\n4\r\ntwo,\r\n5\r\nthree\r\n0\r\n\r\n")
    assert writes[0].endswith(b"\r\n\r\n4\r\none,\r\n")  # the headers with the first chunk
    assert len(writes) == 4


async def test_a_handler_failing_after_its_headers_closes_the_connection() -> None:
    writes: list[bytes] = []
    (answer,) = await _exchange(_counting(HttpProtocol, writes), ["/broken"])
    assert answer == b""  # neither headers nor a body: the connection closed (read to EOF)


def test_unix_socket_binding_replaces_only_a_dead_socket(tmp_path):
    import socket as sockets

    import pytest

    from services.common.serve import SocketInUse, bind_unix_socket

    path = tmp_path / "run" / "ledger.sock"
    live = bind_unix_socket(path)  # the folder is created
    try:
        assert path.is_socket() and oct(path.stat().st_mode & 0o777) == "0o600"
        live.listen(1)
        with pytest.raises(SocketInUse, match="in use by a running server"):
            bind_unix_socket(path)
    finally:
        live.close()  # the file stays, as after a kill -9: nobody listens on it now
    assert path.is_socket()
    replaced = bind_unix_socket(path)
    replaced.listen(1)
    probe = sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM)
    probe.connect(str(path))
    probe.close()
    replaced.close()
    path.unlink()
    path.write_text("not a socket")
    with pytest.raises(SocketInUse, match="not a socket"):
        bind_unix_socket(path)
    assert path.read_text() == "not a socket"


def test_a_start_that_cannot_bind_its_port_leaves_no_socket_file(tmp_path):
    import socket as sockets

    import pytest
    import uvicorn

    from services.common.serve import ServerWithSocket

    taken = sockets.socket(sockets.AF_INET, sockets.SOCK_STREAM)
    taken.setsockopt(sockets.SOL_SOCKET, sockets.SO_REUSEADDR, 0)
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        port = taken.getsockname()[1]
        path = tmp_path / "run" / "ledger.sock"
        server = ServerWithSocket(uvicorn.Config(app=None, host="127.0.0.1", port=port), path)
        with pytest.raises(SystemExit):  # uvicorn logs that the port is in use and exits
            server.bind()
        assert not path.exists()
    finally:
        taken.close()
