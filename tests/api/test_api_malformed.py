"""Malformed input is a 4xx, never a 5xx: deeply nested JSON on every route of every app (the
gateway and the three internal services, their hot routes included), odd and huge paths, nested table socket frames; and a burst of
malformed anonymous requests costs no database query, no password hash and no service call.

Every app is served by uvicorn with `mesa serve`'s options on a loopback port, in the
platform's event loop, as `mesa serve` runs it.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
from litestar import Litestar
from litestar.routes import HTTPRoute
from sqlalchemy import event

import api.passwords
from services.common.auth import header_value
from services.common.metrics import REQUESTS
from services.common.migrate import upgrade
from services.common.serve import uvicorn_options
from tests.api.api_helpers import bearer, make_user, sign_in
from tests.api.platform_stack import COMPONENTS, Platform, platform
from tests.service_auth import caller_for
from tests.uvicorn_server import UvicornServer

# The routes every seat or action goes through, once answered outside Litestar.
HOT_ROUTES = ("/actions", "/feeds", "/v1/holds", "/v1/join/quick")
NESTED_BODIES = {
    "100,000 [": b"[" * 100_000,
    '100,000 {"a":': b'{"a":' * 100_000,  # 500 KB: over the size limit
    '50,000 {"a":': b'{"a":' * 50_000,  # 250 KB: within it
    "a deep value in an object": b'{"seq": 1, "action": {"type": "play", "tile": '
    + b"[" * 50_000
    + b"]" * 50_000
    + b"}}",
}
ODD_PATHS = [
    "/" + "a" * 100_000,
    "/api/" + "b" * 100_000,
    "/%00",
    "/..%2f..",
    "/..%2f..%2fetc%2fpasswd",
    "/api/%ff",
    "/api/matches/%00/ws",
    "/api/matches/%ff%fe",
    "/api/%C3%BCn%C3%AFc%C3%B8d%C3%A9",
    "/v1/%00",
    "/internal/..%2f..",
    "/%2e%2e/%2e%2e",
    "//",
    "/api//me",
]
READ_TIMEOUT_S = 30


@pytest.fixture(scope="module")
def platform_db(database_url: str) -> str:
    upgrade(database_url, COMPONENTS)
    return database_url


@asynccontextmanager
async def served_platform(
    database_url: str, secret: bytes, key_dir: Path
) -> AsyncIterator[tuple[Platform, dict[str, str]]]:
    """The platform in-process, each app also served on a loopback port: {name: base URL}."""
    async with platform(database_url, secret, key_dir) as p, AsyncExitStack() as stack:
        urls: dict[str, str] = {}
        for name, app in {"gateway": p.gateway, **p.services}.items():
            server = UvicornServer(app, **{**uvicorn_options(), "lifespan": "off"})
            urls[name] = (await stack.enter_async_context(server)).url
        yield p, urls


def routes_of(app: Litestar) -> list[tuple[str, str, bool]]:
    """(method, a concrete path, whether it reads a body) for every HTTP route of `app`."""
    found: list[tuple[str, str, bool]] = []
    for route in app.routes:
        if not isinstance(route, HTTPRoute):
            continue  # the table socket: test_table_socket_refuses_nested_frames
        path = re.sub(r"\{[^}]+\}", "x", route.path)
        for handler in route.route_handlers:
            takes_body = "data" in handler.parsed_fn_signature.parameters
            for method in sorted(handler.http_methods - {"OPTIONS", "HEAD"}):
                found.append((method, path, takes_body))
    return found


async def test_nested_json_is_a_4xx_on_every_route_of_every_app(
    platform_db: str, internal_secret: bytes, tmp_path: Path
) -> None:
    await make_user(platform_db, "nest_player")
    async with served_platform(platform_db, internal_secret, tmp_path) as (p, urls):
        failures: list[str] = []
        sent = 0
        hot = 0
        for name, url in urls.items():
            app = p.gateway if name == "gateway" else p.services[name]
            routes = routes_of(app)
            hot += sum(path.endswith(HOT_ROUTES) for _, path, _ in routes)
            async with httpx.AsyncClient(base_url=url, timeout=READ_TIMEOUT_S) as client:
                if name == "gateway":
                    await sign_in(client, "nest_player")  # cookie session and CSRF token
                for method, path, takes_body in routes:
                    for label, body in NESTED_BODIES.items():
                        headers = {"content-type": "application/json"}
                        if name != "gateway":
                            caller = caller_for(name, method, path)
                            headers["authorization"] = header_value(internal_secret, caller, name)
                        r = await client.request(method, path, content=body, headers=headers)
                        sent += 1
                        refused = 400 <= r.status_code < 500
                        if r.status_code >= 500 or (takes_body and not refused):
                            failures.append(f"{name} {method} {path} [{label}] -> {r.status_code}")
        assert hot >= 4, "the hot routes (actions, feeds, holds, quick join) are walked"
        assert sent > 400
        assert not failures, failures[:30]


async def _raw_status(url: str, target: bytes) -> int:
    """The status of `GET target` sent byte for byte (no client normalises the path)."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(b"GET " + target + b" HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), READ_TIMEOUT_S)
        if not status_line:
            return 0  # the server closed the connection without an answer
        return int(status_line.split()[1])
    finally:
        writer.close()


async def test_odd_and_huge_paths_are_refused_not_failed(
    platform_db: str, internal_secret: bytes, tmp_path: Path
) -> None:
    async with served_platform(platform_db, internal_secret, tmp_path) as (_, urls):
        failures = []
        targets = [path.encode() for path in ODD_PATHS] + ["/api/ü/☃".encode()]
        for name, url in urls.items():
            for target in targets:
                status = await _raw_status(url, target)
                # 400/414/431: refused by the HTTP parser; 401: no service credential; the
                # page for "//".
                if status not in (200, 400, 401, 404, 405, 414, 431):
                    failures.append(f"{name} {target[:60]!r} -> {status}")
        assert not failures, failures


def _service_requests() -> float:
    total = 0.0
    for metric in REQUESTS.collect():
        for sample in metric.samples:
            if sample.name.endswith("_total") and sample.labels["service"] != "gateway":
                total += sample.value
    return total


async def test_malformed_anonymous_burst_does_no_costly_work(
    platform_db: str, internal_secret: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No query on the gateway's database, no password hash, no call to a service."""
    hashes = 0

    def counting(real: Any) -> Any:
        def wrapped(*args: Any) -> Any:
            nonlocal hashes
            hashes += 1
            return real(*args)

        return wrapped

    for name in ("hash_password", "check_password"):
        monkeypatch.setattr(api.passwords, name, counting(getattr(api.passwords, name)))
    async with served_platform(platform_db, internal_secret, tmp_path) as (p, urls):
        queries: list[str] = []

        def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            queries.append(statement)

        event.listen(p.gateway.state.db.sync_engine, "before_cursor_execute", count)
        calls_before = _service_requests()
        requests: list[tuple[str, str, bytes]] = []
        for path in ("/api/auth/login", "/api/auth/register", "/api/auth/tokens"):
            for body in (b"{", b"[" * 100_000, b'{"username": 1}', b"\xff\xfe", b"null"):
                requests.append(("POST", path, body))
        for path in ("/api/lobby/quick-join", "/api/matches/x/actions", "/api/finance/deposits"):
            requests.append(("POST", path, b"[" * 100_000))
        requests.append(("POST", "/api/auth/login", b"x" * 300_000))
        # Credentials that cannot be ours are refused by their shape, before any lookup.
        odd_credentials = [
            {"authorization": "Bearer " + "a" * 42},
            {"authorization": "Bearer " + "a" * 44},
            {"authorization": "Bearer not a token at all"},
            {"cookie": "mesa_session=" + "%" * 43},
            {"cookie": "mesa_session=" + "b" * 4000},
        ]
        async with httpx.AsyncClient(base_url=urls["gateway"], timeout=READ_TIMEOUT_S) as client:
            statuses = await asyncio.gather(
                *(
                    _send(client, method, path, body)
                    for _ in range(5)
                    for method, path, body in requests
                ),
                *(_raw_status(urls["gateway"], p.encode()) for p in ODD_PATHS if p != "//"),
                *(_send(client, "GET", "/api/me/wallet", b"", extra) for extra in odd_credentials),
            )
        event.remove(p.gateway.state.db.sync_engine, "before_cursor_execute", count)
        assert all(400 <= s < 500 for s in statuses), sorted(set(statuses))
        assert queries == []
        assert hashes == 0
        assert _service_requests() == calls_before


async def _send(
    client: httpx.AsyncClient,
    method: str,
    path: str,
    body: bytes,
    extra: dict[str, str] | None = None,
) -> int:
    headers = {"content-type": "application/json", **(extra or {})}
    r = await client.request(method, path, content=body, headers=headers)
    return r.status_code


async def test_table_socket_refuses_nested_frames_and_stays_open(
    platform_db: str, internal_secret: bytes, tmp_path: Path
) -> None:
    """A nested frame gets an error frame (the socket keeps serving); an oversized one a close
    with 1009. Before the depth check a nested frame was a RecursionError in the socket's
    receive task, which ended the table."""
    await make_user(platform_db, "nest_ws")
    async with served_platform(platform_db, internal_secret, tmp_path) as (p, urls):
        transport = httpx.ASGITransport(app=p.gateway, client=("127.0.0.1", 50002))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            headers = await bearer(c, "nest_ws")
            r = await c.post("/api/lobby/cpu", json={"kind": "apuesta-1v1"}, headers=headers)
            assert r.status_code == 200, r.text
            match_id = r.json()["match_id"]
        ws_url = urls["gateway"].replace("http://", "ws://") + f"/api/matches/{match_id}/ws"
        frames = [
            '{"x":' + "[" * 4000,
            '{"type": "action", "seq": 1, "action": {"type": "play", "tile": ' + "[" * 4000,
            '{"type": "chat", "kind": ' + "{" * 2000,
        ]
        async with websockets.connect(ws_url, additional_headers=headers) as ws:
            for frame in frames:
                await ws.send(frame)
                reply = await _next_frame(ws, ("error",))
                assert reply["error"] == "invalid_request"
                await ws.send(json.dumps({"type": "ping"}))
                assert (await _next_frame(ws, ("pong",)))["type"] == "pong"
            await ws.send("[" * 100_000)
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await _next_frame(ws, ("pong",))
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
        # A NUL in the socket's path: refused at the handshake or closed as a policy violation.
        odd_url = urls["gateway"].replace("http://", "ws://") + "/api/matches/%00/ws"
        try:
            async with websockets.connect(odd_url, additional_headers=headers) as ws:
                with pytest.raises(websockets.ConnectionClosed) as closed:
                    await _next_frame(ws, ("pong",))
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
        except websockets.InvalidStatus as refused:
            assert refused.response.status_code == 403


async def _next_frame(ws: Any, kinds: tuple[str, ...]) -> dict[str, Any]:
    async with asyncio.timeout(READ_TIMEOUT_S):
        while True:
            frame = json.loads(await ws.recv())
            if frame["type"] in kinds:
                return frame  # type: ignore[no-any-return]
