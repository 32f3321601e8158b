"""A hot JSON route is an ordinary Litestar route served by stock uvicorn (`mesa serve`'s
options): over the wire it answers exactly as through Litestar's test client, with the
services' refusals ({"error", "detail"}: 400 strict decoding, 401/403 from the caller guard,
405, 409, 413, a logged 500), the request id, pipelining, `Expect: 100-continue`, the metrics,
and it is in the OpenAPI schema."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import msgspec
import pytest
from litestar import Litestar, post
from litestar.params import FromPath, JSONBody
from litestar.testing import AsyncTestClient

from services.common.app import MAX_REQUEST_BODY_BYTES, create_service_app
from services.common.auth import callers_opt, header_value
from services.common.errors import ServiceError
from services.common.metrics import REGISTRY
from services.common.serve import uvicorn_options
from tests.conftest import make_settings
from tests.uvicorn_server import UvicornServer

READ_TIMEOUT_S = 10


class Thing(msgspec.Struct, forbid_unknown_fields=True):
    amount_cents: int


class Done(msgspec.Struct):
    thing: str
    amount_cents: int


@post("/v1/things/{thing:str}", status_code=200, opt=callers_opt("matchmaking"))
async def thing_route(thing: FromPath[str], data: JSONBody[Thing]) -> Done:
    if data.amount_cents == 409:
        raise ServiceError(409, "already_done", "that was done before")
    if data.amount_cents == 500:
        raise RuntimeError("a bug")
    for _ in range(data.amount_cents % 7):  # a few turns of the loop: later requests wait
        await asyncio.sleep(0)
    return Done(thing=thing, amount_cents=data.amount_cents)


@pytest.fixture
def app(database_url: str, internal_secret: bytes) -> Litestar:
    settings = make_settings(database_url, internal_secret)
    return create_service_app("ledger", settings, [thing_route])


@pytest.fixture
async def served(app: Litestar) -> AsyncIterator[UvicornServer]:
    async with UvicornServer(app, **uvicorn_options()) as s:
        yield s


def _request(auth: str | None, path: str, body: bytes, *extra: str, method: str = "POST") -> bytes:
    head = [f"{method} {path} HTTP/1.1", "host: x", f"content-length: {len(body)}", *extra]
    if auth is not None:
        head.append(f"authorization: {auth}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def _answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:] if line)
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return int(lines[0].split(" ")[1]), headers, body


CASES: list[tuple[str, str, bytes, str]] = [
    ("ok", "/v1/things/t1", b'{"amount_cents": 3}', "POST"),
    ("malformed", "/v1/things/t1", b'{"amount_cents": "3"}', "POST"),
    ("not json", "/v1/things/t1", b"{", "POST"),
    ("unknown field", "/v1/things/t1", b'{"amount_cents": 3, "x": 1}', "POST"),
    ("refused", "/v1/things/t1", b'{"amount_cents": 409}', "POST"),
    ("bug", "/v1/things/t1", b'{"amount_cents": 500}', "POST"),
    ("too large", "/v1/things/t1", b" " * (MAX_REQUEST_BODY_BYTES + 1), "POST"),
    ("wrong method", "/v1/things/t1", b"", "PUT"),
]


async def test_a_hot_route_answers_on_the_wire_as_through_asgi(
    app: Litestar, served: UvicornServer, internal_secret: bytes
) -> None:
    auth = header_value(internal_secret, "matchmaking", "ledger")
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    over_the_wire = {}
    for name, path, body, method in CASES:  # one keep-alive connection for all of them
        writer.write(_request(auth, path, body, f"x-request-id: rid-{name[:3]}", method=method))
        over_the_wire[name] = await _answer(reader)
    writer.write(_request(None, "/v1/things/t1", b'{"amount_cents": 3}'))
    over_the_wire["no credential"] = await _answer(reader)
    writer.close()

    async with AsyncTestClient(app) as client:
        for name, path, body, method in CASES:
            response = await client.request(
                method,
                path,
                content=body,
                headers={"Authorization": auth, "x-request-id": f"rid-{name[:3]}"},
            )
            status, headers, content = over_the_wire[name]
            assert status == response.status_code, name
            # (a wrong method is refused by Litestar's router, before the route's middleware)
            assert headers.get("x-request-id") == response.headers.get("x-request-id"), name
            assert headers["content-type"] == "application/json", name
            wire = msgspec.json.decode(content)
            asgi = response.json()
            assert wire == asgi, name
        unauthorized = await client.post("/v1/things/t1", content=b'{"amount_cents": 3}')
    status, _, content = over_the_wire["no credential"]
    assert status == unauthorized.status_code == 401
    assert msgspec.json.decode(content) == unauthorized.json()
    assert over_the_wire["ok"][0] == 200
    assert over_the_wire["too large"][0] == 413
    assert over_the_wire["wrong method"][0] == 405


async def test_pipelined_requests_are_answered_in_order(
    served: UvicornServer, internal_secret: bytes
) -> None:
    auth = header_value(internal_secret, "matchmaking", "ledger")
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    amounts = [6, 0, 13, 409, None, 1, 5, 2]  # some take more turns of the loop than the next
    # None: a body over the limit, most of it taken (reading paused) while earlier ones wait
    bodies = [
        b" " * (MAX_REQUEST_BODY_BYTES + 1) if a is None else b'{"amount_cents": %d}' % a
        for a in amounts
    ]
    writer.write(
        b"".join(_request(auth, f"/v1/things/p{i}", body) for i, body in enumerate(bodies))
    )
    answers = [await _answer(reader) for _ in amounts]
    writer.close()
    assert [status for status, _, _ in answers] == [
        413 if a is None else 409 if a == 409 else 200 for a in amounts
    ]
    for i, (status, _, body) in enumerate(answers):
        if status == 200:
            assert msgspec.json.decode(body, type=Done).thing == f"p{i}"


async def test_a_body_in_pieces_and_expect_100_continue(
    served: UvicornServer, internal_secret: bytes
) -> None:
    auth = header_value(internal_secret, "matchmaking", "ledger")
    body = b'{"amount_cents": 42}'
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    head = _request(auth, "/v1/things/e", body, "expect: 100-continue")[: -len(body)]
    writer.write(head)
    interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(body[:5])
    await writer.drain()
    writer.write(body[5:])
    status, _, content = await _answer(reader)
    assert status == 200
    assert msgspec.json.decode(content, type=Done).amount_cents == 42
    writer.close()


async def test_connection_close_is_honoured_and_requests_are_counted(
    served: UvicornServer, internal_secret: bytes
) -> None:
    def counted(status: str) -> float:
        labels = {
            "service": "ledger",
            "method": "POST",
            "route": "/v1/things/{thing}",
            "status": status,
        }
        return REGISTRY.get_sample_value("mesa_http_requests_total", labels) or 0.0

    ok_before, refused_before = counted("2xx"), counted("4xx")
    auth = header_value(internal_secret, "matchmaking", "ledger")
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(_request(auth, "/v1/things/c", b'{"amount_cents": 1}', "connection: close"))
    status, headers, _ = await _answer(reader)
    assert status == 200 and headers["connection"] == "close"
    assert await asyncio.wait_for(reader.read(), READ_TIMEOUT_S) == b""  # closed by the server
    writer.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(_request(auth, "/v1/things/c", b"{"))
    assert (await _answer(reader))[0] == 400
    writer.close()
    assert counted("2xx") == ok_before + 1
    assert counted("4xx") == refused_before + 1


async def test_the_guard_honours_the_route_s_callers(
    served: UvicornServer, internal_secret: bytes
) -> None:
    """The route's declared callers, checked by the guard: another caller or another
    audience 403, a forged token 401."""
    from services.common.auth import SCHEME, mint_token

    cases = [
        (header_value(internal_secret, "matchmaking", "ledger"), 200, None),
        (header_value(internal_secret, "gateway", "ledger"), 403, "forbidden"),
        (header_value(internal_secret, "matchmaking", "engine"), 403, "forbidden"),
        (f"{SCHEME} {mint_token(b'f' * 32, 'matchmaking', 'ledger')}", 401, "unauthorized"),
    ]
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    try:
        for auth, expected, code in cases:
            writer.write(_request(auth, "/v1/things/p", b'{"amount_cents": 1}'))
            status, _, body = await _answer(reader)
            assert status == expected, body
            if code is not None:
                assert msgspec.json.decode(body)["error"] == code
    finally:
        writer.close()


async def test_the_route_is_in_the_openapi_schema(app: Litestar) -> None:
    """Every route is a Litestar route: none is answered outside the router and its schema."""
    assert "/v1/things/{thing}" in (app.openapi_schema.paths or {})
