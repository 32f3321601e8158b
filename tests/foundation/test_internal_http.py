"""InternalClient (on aiohttp's client) against a real uvicorn server on a loopback port.

Round trips, refusals and failures as `RemoteError`/`ServiceUnavailable`, timeouts, keep-alive
reuse (counted by the client ports the server sees), the idle-close race (retried once),
chunked bodies, size limits, and the credential and request id on every call.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import msgspec
import pytest
from litestar import Request, get, post
from litestar.params import FromPath, JSONBody, Parameter
from litestar.response import Stream
from structlog.contextvars import bind_contextvars, unbind_contextvars

from services.common.app import create_service_app
from services.common.auth import callers_opt, header_value
from services.common.errors import ServiceError, conflict
from services.common.http import (
    AnswerTooLarge,
    InternalClient,
    RemoteError,
    ServiceUnavailable,
)
from services.common.ports import free_port
from tests.conftest import make_settings
from tests.uvicorn_server import UvicornServer


class Echo(msgspec.Struct, forbid_unknown_fields=True):
    amount_cents: int
    note: str = ""


class Seen(msgspec.Struct):
    request_id: str | None
    caller: str | None
    query: str


CLIENT_PORTS: set[int] = set()
SLOW_STARTED = asyncio.Event()
CALLER = ("matchmaking", "ledger")  # a request to /internal/slow is being answered
ANY_SERVICE = callers_opt("gateway", "matchmaking", "engine")


def _client_port(request: Request) -> int:  # type: ignore[type-arg]
    client = request.scope["client"]
    return client[1] if client else 0  # a Unix socket's peer has no address


@get("/internal/seen", opt=ANY_SERVICE)
async def seen(request: Request) -> Seen:  # type: ignore[type-arg]
    CLIENT_PORTS.add(_client_port(request))
    return Seen(
        request_id=request.scope["state"].get("request_id"),
        caller=request.scope["state"].get("caller"),
        query=request.scope["query_string"].decode(),
    )


@post("/internal/echo", status_code=200, opt=ANY_SERVICE)
async def echo(request: Request, data: JSONBody[Echo]) -> Echo:  # type: ignore[type-arg]
    CLIENT_PORTS.add(_client_port(request))
    if data.amount_cents == 409:
        raise conflict("already_done", "that was done before")
    if data.amount_cents == 503:
        raise ServiceError(503, "database_unavailable", "try later")
    return data


@get("/internal/slow", opt=ANY_SERVICE)
async def slow(ms: int = Parameter(default=0, ge=0)) -> Echo:
    SLOW_STARTED.set()
    await asyncio.sleep(ms / 1000)
    return Echo(amount_cents=ms)


@get("/internal/chunked", opt=ANY_SERVICE)
async def chunked(parts: int = Parameter(default=1, ge=0)) -> Stream:
    async def body() -> AsyncIterator[bytes]:
        yield b"["
        for i in range(parts):
            yield (b"," if i else b"") + msgspec.json.encode(Echo(amount_cents=i, note="x" * 100))
            await asyncio.sleep(0)
        yield b"]"

    return Stream(body(), media_type="application/json")


@get("/internal/big", opt=ANY_SERVICE)
async def big(n: int = Parameter(default=0, ge=0)) -> Echo:
    return Echo(amount_cents=n, note="y" * n)


def _server(app: object, **config: object) -> UvicornServer:
    return UvicornServer(app, log_level="warning", lifespan="on", **config)


@pytest.fixture
def settings(database_url, internal_secret):
    return make_settings(database_url, internal_secret)


@contextlib.asynccontextmanager
async def serving(settings, **config) -> AsyncIterator[UvicornServer]:
    CLIENT_PORTS.clear()
    app = create_service_app("ledger", settings, [seen, echo, slow, chunked, big])
    async with _server(app, **config) as server:
        yield server


@contextlib.asynccontextmanager
async def client_of(url: str, settings, **kw) -> AsyncIterator[InternalClient]:
    client = InternalClient(url, settings, caller="matchmaking", audience="ledger", **kw)
    try:
        yield client
    finally:
        await client.aclose()


async def test_round_trip_refusals_and_failures(settings):
    async with serving(settings) as server, client_of(server.url, settings) as client:
        assert client._client is None  # aiohttp's client, not the test transport
        assert await client.post("/internal/echo", Echo(7, "é"), Echo) == Echo(7, "é")
        result = await client.get(
            "/internal/seen", Seen, params={"a": [1, 2], "b": True, "c": "x y"}
        )
        assert result.query == "a=1&a=2&b=true&c=x+y"
        with pytest.raises(RemoteError) as refused:
            await client.post("/internal/echo", Echo(409), Echo)
        assert (refused.value.status, refused.value.code) == (409, "already_done")
        assert refused.value.detail == "that was done before"
        with pytest.raises(RemoteError) as invalid:
            await client.post("/internal/echo", {"amount_cents": "nope"}, Echo)
        assert (invalid.value.status, invalid.value.code) == (400, "invalid_request")
        with pytest.raises(RemoteError) as missing:
            await client.get("/internal/nowhere", Echo)
        assert missing.value.status == 404
        with pytest.raises(ServiceUnavailable, match="503 database_unavailable"):
            await client.post("/internal/echo", Echo(503), Echo)
        # Refusals are complete responses: the one connection carried all of them.
        assert len(CLIENT_PORTS) == 1


async def test_a_unix_socket_serves_internal_calls_beside_tcp(settings, tmp_path):
    """`mesa serve` with a socket: the same app on TCP and on the socket at once; an
    `http+unix://` base URL reaches it through the same client, credential and all."""
    from services.common.config import unix_socket_url

    path = tmp_path / "ledger.sock"
    async with (
        serving(settings, unix_socket=path) as server,
        client_of(unix_socket_url(path), settings) as client,
        client_of(server.url, settings) as over_tcp,
    ):
        assert oct(path.stat().st_mode & 0o777) == "0o600"
        for i in range(3):
            assert await client.post("/internal/echo", Echo(i, "é"), Echo) == Echo(i, "é")
        assert await over_tcp.post("/internal/echo", Echo(5), Echo) == Echo(5)
        with pytest.raises(RemoteError) as refused:
            await client.post("/internal/echo", Echo(409), Echo)
        assert (refused.value.status, refused.value.code) == (409, "already_done")
        assert (await client.get("/internal/seen", Seen, params={"a": 1})).caller == "matchmaking"
        async with client_of(unix_socket_url(path), make_settings("", b"z" * 32)) as stranger:
            with pytest.raises(RemoteError) as unknown:
                await stranger.get("/internal/seen", Seen)
        assert unknown.value.status == 401
        # keep-alive over the socket too: one connection for all the calls above (and one
        # for the TCP client's)
        assert len(server.server.server_state.connections) == 2
    assert not path.exists()  # removed once the server stopped
    async with client_of(unix_socket_url(path), settings) as client:
        with pytest.raises(ServiceUnavailable, match="ClientConnectorError"):
            await client.post("/internal/echo", Echo(1), Echo)


async def test_credential_and_request_id_are_carried(settings, internal_secret):
    async with serving(settings) as server, client_of(server.url, settings) as client:
        bind_contextvars(request_id="carried-9")
        try:
            carried = await client.get("/internal/seen", Seen)
        finally:
            unbind_contextvars("request_id")
        created = await client.get("/internal/seen", Seen)
        bind_contextvars(request_id="bad\r\nX-Injected: 1")
        try:
            cleaned = await client.get("/internal/seen", Seen)
        finally:
            unbind_contextvars("request_id")
        forged = make_settings(settings.database_url, b"z" * 32)
        async with client_of(server.url, forged) as stranger:
            with pytest.raises(RemoteError) as refused:
                await stranger.get("/internal/seen", Seen)
    assert carried == Seen(request_id="carried-9", caller="matchmaking", query="")
    assert created.caller == "matchmaking" and len(created.request_id or "") == 32
    assert cleaned.request_id is not None and len(cleaned.request_id) == 32
    assert refused.value.status == 401


async def test_connection_refused_is_service_unavailable(settings):
    async with client_of(f"http://127.0.0.1:{free_port()}", settings) as client:
        with pytest.raises(ServiceUnavailable, match="ClientConnectorError"):
            await client.get("/internal/seen", Seen)


async def test_timeouts_discard_the_connection(settings):
    async with (
        serving(settings) as server,
        client_of(server.url, settings, timeout_s=0.3, max_connections=1) as client,
    ):
        with pytest.raises(ServiceUnavailable, match="TimeoutError"):
            await client.get("/internal/slow", Echo, params={"ms": 2000})
        # The late answer to the timed-out request must never be read as this one's.
        assert (await client.get("/internal/seen", Seen)).caller == "matchmaking"

        # Another caller holds the only connection past this one's deadline: the wait for a
        # connection counts in the call's timeout.
        async def hold() -> bytes:
            request = client.session().get(
                server.url + "/internal/slow",
                params={"ms": 1000},
                headers={"Authorization": header_value(settings.internal_secret, *CALLER)},
                timeout=aiohttp.ClientTimeout(total=10),
            )
            async with request as response:
                return await response.read()

        SLOW_STARTED.clear()
        holder = asyncio.create_task(hold())
        await asyncio.wait_for(SLOW_STARTED.wait(), 10)
        with pytest.raises(ServiceUnavailable, match="TimeoutError"):
            await client.get("/internal/slow", Echo, params={"ms": 0})
        await holder
        assert await client.get("/internal/slow", Echo, params={"ms": 1}) == Echo(1)


async def test_cancelled_request_does_not_leave_its_response_behind(settings):
    async with (
        serving(settings) as server,
        client_of(server.url, settings, max_connections=1) as client,
    ):
        task = asyncio.create_task(client.get("/internal/slow", Echo, params={"ms": 300}))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.4)
        assert (await client.get("/internal/seen", Seen)).caller == "matchmaking"


async def test_keep_alive_reuse_and_a_small_pool_under_many_callers(settings):
    async with (
        serving(settings) as server,
        client_of(server.url, settings, max_connections=3) as client,
    ):
        for i in range(20):
            assert await client.post("/internal/echo", Echo(i), Echo) == Echo(i)
        assert len(CLIENT_PORTS) == 1
        results = await asyncio.gather(
            *(client.post("/internal/echo", Echo(i, str(i)), Echo) for i in range(300))
        )
        assert results == [Echo(i, str(i)) for i in range(300)]
        assert len(CLIENT_PORTS) <= 3


async def test_server_closing_idle_connections(settings):
    async with (
        serving(settings, timeout_keep_alive=0.2) as server,
        client_of(server.url, settings) as client,
    ):
        for _ in range(3):
            assert (await client.get("/internal/seen", Seen)).caller == "matchmaking"
            await asyncio.sleep(0.5)  # uvicorn has closed the idle connection meanwhile
        assert len(CLIENT_PORTS) == 3


async def test_chunked_response(settings):
    async with serving(settings) as server, client_of(server.url, settings) as client:
        parts = await client.get("/internal/chunked", list[Echo], params={"parts": 500})
        assert [p.amount_cents for p in parts] == list(range(500))
        assert (await client.get("/internal/seen", Seen)).caller == "matchmaking"
        assert len(CLIENT_PORTS) == 1


async def test_oversize_responses_are_refused(settings):
    async with (
        serving(settings) as server,
        client_of(server.url, settings, max_response_bytes=4096) as client,
    ):
        assert (await client.get("/internal/big", Echo, params={"n": 1000})).amount_cents == 1000
        with pytest.raises(AnswerTooLarge, match="over the limit of 4096") as declared:
            await client.get("/internal/big", Echo, params={"n": 10_000})
        assert declared.value.code == "response_too_large"
        with pytest.raises(AnswerTooLarge, match="over the limit of 4096"):
            await client.get("/internal/chunked", list[Echo], params={"parts": 200})
        # a call's own limit, above or below the client's
        big = await client.get(
            "/internal/big", Echo, params={"n": 10_000}, max_response_bytes=20_000
        )
        assert big.amount_cents == 10_000
        with pytest.raises(AnswerTooLarge, match="over the limit of 500"):
            await client.get("/internal/big", Echo, params={"n": 1000}, max_response_bytes=500)
        assert (await client.get("/internal/seen", Seen)).caller == "matchmaking"


@pytest.mark.parametrize("size", [70_000, 300_000, 3_000_000])
async def test_answers_larger_than_the_header_limit_arrive_whole(settings, size):
    """The header limit (64 KiB) bounds the head only: a body of any size within the call's
    limit is read, whether it comes with a Content-Length or chunked, on TCP and keep-alive."""
    async with serving(settings) as server, client_of(server.url, settings) as client:
        for _ in range(2):
            big = await client.get("/internal/big", Echo, params={"n": size})
            assert (big.amount_cents, len(big.note)) == (size, size)
        parts = await client.get("/internal/chunked", list[Echo], params={"parts": size // 100})
        assert len(parts) == size // 100
        assert (await client.get("/internal/seen", Seen)).caller == "matchmaking"
        assert len(CLIENT_PORTS) == 1


# A hand-written server for what uvicorn does not do on demand ------------------------------

Handler = Callable[[int, int], Awaitable[bytes | None]]


def ok(extra: bytes = b"") -> bytes:
    body = b'{"amount_cents":1}'
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        + extra
        + b"Content-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


@contextlib.asynccontextmanager
async def raw_server(answer: Handler) -> AsyncIterator[tuple[str, list[int]]]:
    """Each connection reads requests (no bodies) and writes what `answer(connection, n)`
    returns; None closes the connection without a response."""
    connections: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        number = len(connections)
        connections.append(0)
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                connections[number] += 1
                reply = await answer(number, connections[number])
                if reply is None:
                    break
                writer.write(reply)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", connections
    finally:
        server.close()


async def test_reused_connection_closed_under_the_request_is_retried_once(settings):
    async def answer(connection: int, request: int) -> bytes | None:
        # Every connection answers its first request and closes under the second one, as a
        # server does when its keep-alive timeout fires just as the request is written.
        return ok() if request == 1 else None

    async with raw_server(answer) as (url, connections), client_of(url, settings) as client:
        for _ in range(3):
            assert await client.get("/x", Echo) == Echo(1)
        assert connections == [2, 2, 1]


async def test_fresh_connection_closed_without_response_is_not_retried(settings):
    async def answer(connection: int, request: int) -> bytes | None:
        return None

    async with raw_server(answer) as (url, connections), client_of(url, settings) as client:
        with pytest.raises(ServiceUnavailable, match="ServerDisconnectedError"):
            await client.post("/x", Echo(1), Echo)
        assert connections == [1]


async def test_connection_close_is_honoured_and_chunked_framing_parsed(settings):
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'7\r\n{"amoun\r\n'
        b'b\r\nt_cents":2}\r\n'
        b"0\r\n\r\n"
    )

    async def answer(connection: int, request: int) -> bytes | None:
        if connection == 0:
            return ok(b"Connection: close\r\n")
        return chunked

    async with raw_server(answer) as (url, connections), client_of(url, settings) as client:
        assert await client.get("/x", Echo) == Echo(1)
        assert await client.get("/x", Echo) == Echo(2)
        assert await client.get("/x", Echo) == Echo(2)
        assert connections == [1, 2]


async def test_malformed_and_header_flood_responses(settings):
    flood = b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 200 + b"Content-Length: 2\r\n\r\n{}"

    async def answer(connection: int, request: int) -> bytes | None:
        return b"NOT HTTP AT ALL\r\n\r\n" if connection == 0 else flood

    async with raw_server(answer) as (url, _), client_of(url, settings) as client:
        for _ in range(2):  # aiohttp's parser refuses both (at most 128 headers)
            with pytest.raises(ServiceUnavailable, match="ClientResponseError"):
                await client.get("/x", Echo)


# Replicas: several base URLs, each match routed to the replica that owns it -------------------


class Owned(msgspec.Struct):
    match_id: str
    replica: str


def _replica_app(settings, name: str, owns: set[str]):
    @get("/internal/matches/{match_id:str}", opt=ANY_SERVICE)
    async def state(match_id: FromPath[str]) -> Owned:
        if match_id not in owns:
            raise ServiceError(503, "not_owner", "another engine process runs this match")
        return Owned(match_id=match_id, replica=name)

    @get("/internal/busy/{match_id:str}", opt=ANY_SERVICE)
    async def busy(match_id: FromPath[str]) -> Owned:
        raise ServiceError(503, "busy", "inbox full")

    return create_service_app("engine", settings, [state, busy])


async def test_replicas_route_each_match_to_its_owner_and_remember_it(settings):
    owns_a, owns_b = {"m-a1", "m-a2"}, {"m-b1"}
    async with (
        _server(_replica_app(settings, "a", owns_a)) as a,
        _server(_replica_app(settings, "b", owns_b)) as b,
    ):
        client = InternalClient(f"{a.url},{b.url}", settings, "gateway", audience="engine")
        try:
            for match_id, replica in [("m-a1", "a"), ("m-b1", "b"), ("m-a2", "a")]:
                got = await client.get(f"/internal/matches/{match_id}", Owned)
                assert got == Owned(match_id=match_id, replica=replica)
                assert client._owners[match_id] == (0 if replica == "a" else 1)
            # ownership moves (a replica died and another took over): found again
            owns_a.discard("m-a1")
            owns_b.add("m-a1")
            assert (await client.get("/internal/matches/m-a1", Owned)).replica == "b"
            # a match nobody owns: the owner's refusal is passed on, after every replica
            with pytest.raises(ServiceUnavailable) as info:
                await client.get("/internal/matches/m-nobody", Owned)
            assert info.value.code == "not_owner"
            # other refusals are the owner's answer and are not retried elsewhere
            with pytest.raises(ServiceUnavailable) as info:
                await client.get("/internal/busy/x", Owned)
            assert info.value.code == "busy"
        finally:
            await client.aclose()


async def test_replicas_skip_one_that_cannot_be_reached(settings):
    dead = f"http://127.0.0.1:{free_port()}"
    async with _server(_replica_app(settings, "b", {"m-1", "m-2", "m-3"})) as b:
        client = InternalClient(f"{dead},{b.url}", settings, "gateway", audience="engine")
        try:
            for match_id in ("m-1", "m-2", "m-3"):
                assert (await client.get(f"/internal/matches/{match_id}", Owned)).replica == "b"
        finally:
            await client.aclose()


def test_engine_url_accepts_replicas_and_checks_each():
    from services.common.config import ConfigError, load_settings

    both = "http://127.0.0.1:8002,http://127.0.0.1:8102"
    assert load_settings({"MESA_ENGINE_URL": both}).url_of("engine") == both
    with pytest.raises(ConfigError, match="MESA_ENGINE_URL"):
        load_settings({"MESA_ENGINE_URL": "http://127.0.0.1:8002,ftp://x"})


# Ledger replicas: any replica answers anything; one is filled before the next -----------------


class Served(msgspec.Struct):
    replica: str


def _filling_app(settings, name: str, held: list[asyncio.Event], arrived: list[str]):
    @post("/v1/holds", opt=ANY_SERVICE)
    async def hold(data: JSONBody[Echo]) -> Served:
        arrived.append(name)
        gate = asyncio.Event()
        held.append(gate)
        await gate.wait()  # in flight until the test lets it go
        return Served(replica=name)

    return create_service_app("ledger", settings, [hold])


async def test_ledger_replicas_are_filled_one_after_another(settings):
    held: list[asyncio.Event] = []
    arrived: list[str] = []
    async with (
        _server(_filling_app(settings, "a", held, arrived)) as a,
        _server(_filling_app(settings, "b", held, arrived)) as b,
    ):
        client = InternalClient(
            f"{a.url},{b.url}", settings, "engine", audience="ledger", fill_first=3
        )
        try:
            calls = []
            for n in range(1, 6):
                calls.append(
                    asyncio.create_task(client.post("/v1/holds", Echo(amount_cents=1), Served))
                )
                while len(arrived) < n:  # each request in flight before the next is sent
                    await asyncio.sleep(0)
            # the first replica takes three, the second what is beyond them
            assert arrived == ["a", "a", "a", "b", "b"]
            assert client._in_flight == [3, 2]
            for gate in held[:3]:
                gate.set()
            assert [(await c).replica for c in calls[:3]] == ["a", "a", "a"]
            # the first replica has room again: it is filled first
            calls.append(
                asyncio.create_task(client.post("/v1/holds", Echo(amount_cents=1), Served))
            )
            while len(arrived) < 6:
                await asyncio.sleep(0)
            assert arrived[5] == "a"
            for gate in held[3:]:
                gate.set()
            assert [(await c).replica for c in calls[3:]] == ["b", "b", "a"]
            assert client._in_flight == [0, 0]
        finally:
            await client.aclose()


async def test_ledger_replicas_skip_one_that_cannot_be_reached(settings):
    held: list[asyncio.Event] = []
    arrived: list[str] = []
    dead = f"http://127.0.0.1:{free_port()}"
    async with _server(_filling_app(settings, "b", held, arrived)) as b:
        client = InternalClient(
            f"{dead},{b.url}", settings, "engine", audience="ledger", fill_first=16
        )
        try:
            call = asyncio.create_task(client.post("/v1/holds", Echo(amount_cents=1), Served))
            while not held:
                await asyncio.sleep(0)
            held[0].set()
            assert (await call).replica == "b"
            assert client._in_flight == [0, 0]
        finally:
            await client.aclose()


def test_ledger_url_accepts_replicas():
    from services.common.config import load_settings

    both = "http://127.0.0.1:8001,http://127.0.0.1:8101"
    assert load_settings({"MESA_LEDGER_URL": both}).url_of("ledger") == both


async def test_each_service_s_clients_get_its_replica_rule():
    """Every caller makes its clients with `InternalClient.of`: the ledger's replicas are
    filled one after the other, the engine's are chosen by match."""
    from services.common.config import load_settings
    from services.ledger.contract import REPLICA_FILL

    settings = load_settings(
        {
            "MESA_LEDGER_URL": "http://127.0.0.1:8001,http://127.0.0.1:8101",
            "MESA_ENGINE_URL": "http://127.0.0.1:8002,http://127.0.0.1:8102",
        }
    )
    ledger = InternalClient.of("ledger", settings, "engine")
    engine = InternalClient.of("engine", settings, "gateway")
    try:
        assert len(ledger._replicas) == 2 and ledger._fill_first == REPLICA_FILL
        assert len(engine._replicas) == 2 and engine._fill_first is None
    finally:
        await ledger.aclose()
        await engine.aclose()
