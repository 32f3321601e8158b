"""Closed sockets are freed by reference counting, not left as cycles for the collector.

A cycle per closed socket becomes garbage that only a full collector pass frees, and a full
pass walks every object of a busy process: on a gateway under load those passes took hundreds
of ms of CPU, a stall of every table it serves. Each test checks its fix both ways: the object
graph is kept alive by a cycle without the fix (so the test can fail) and freed with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import weakref
from collections.abc import Iterator
from typing import Any

from litestar import WebSocket

from api.routes_table import _release
from bench.http1 import Http1Pool
from tests.uvicorn_server import UvicornServer

CONNECTIONS = 5


class _Marker:
    """Something the connection's objects hold, to see whether they were freed."""


@contextlib.contextmanager
def _collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _socket_holding(marker: _Marker) -> WebSocket[Any, Any, Any]:
    async def receive() -> Any:
        return {"type": "websocket.disconnect", "code": 1000}

    async def send(message: Any) -> None:
        return None

    scope: Any = {
        "type": "websocket",
        "path": "/",
        "headers": [],
        "query_string": b"",
        "state": {},
        "marker": marker,
    }
    return WebSocket(scope=scope, receive=receive, send=send)


def test_litestar_websocket_is_a_cycle_until_released() -> None:
    with _collector_off():
        kept = _Marker()
        kept_ref = weakref.ref(kept)
        socket = _socket_holding(kept)
        del kept, socket
        assert kept_ref() is not None  # the cycle keeps the scope (and all it holds) alive

        freed = _Marker()
        freed_ref = weakref.ref(freed)
        socket = _socket_holding(freed)
        _release(socket)
        del freed, socket
        assert freed_ref() is None


async def _app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "websocket":
        await receive()
        await send({"type": "websocket.accept"})
        while (await receive())["type"] != "websocket.disconnect":
            pass
    elif scope["type"] == "http":
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def _serving() -> UvicornServer:
    return UvicornServer(_app, http="httptools", lifespan="off", log_config=None)


async def test_closed_pool_connection_is_not_a_cycle() -> None:
    async with _serving() as served:
        port = served.port
        pool = Http1Pool("127.0.0.1", port, max_connections=1)
        request = f"GET / HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n\r\n".encode()
        assert (await pool.request(request, 5.0))[0] == 200
        conn = pool._idle[0]
        with _collector_off():
            marker = _Marker()
            marker_ref = weakref.ref(marker)
            conn.reader.marker = marker  # type: ignore[attr-defined]
            await pool.aclose()
            del conn, marker
            for _ in range(3):  # the transport lets go of its protocol in a later callback
                await asyncio.sleep(0)
            assert marker_ref() is None
