"""A session's end closes its table sockets on every gateway within a second or two: signing
out (that session's sockets), an admin's lock, a self-exclusion and a cool-off (all the
user's sockets).

Two gateways on one database (tests/api/test_api_cross_gateway.py): the socket is on gateway
A, served by uvicorn; the session is ended through gateway B, so only the feed's "session
ended" notice (PostgreSQL NOTIFY, or Redis through the relay) can reach it in time; the
periodic check (`SESSION_RECHECK_S`, 30 s) is far beyond the bound.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar import Litestar

from api import accounts, routes_table
from tests.api.api_helpers import PASSWORD, make_user, sign_in
from tests.api.test_api_cross_gateway import (
    cpu_match,
    feed_redis_url,  # noqa: F401  (a fixture)
    platform_db,  # noqa: F401  (a fixture)
    serve,
    table_socket,
    two_gateways,
)

CLOSE_WITHIN_S = 2.0


async def closed(ws: Any) -> int | None:
    """Wait (at most CLOSE_WITHIN_S) for the server to close `ws`; its close code."""
    async with asyncio.timeout(CLOSE_WITHIN_S):
        await ws.wait_closed()
    code: int | None = ws.close_code
    return code


def client_of(app: Litestar) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 50002))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


@pytest.fixture(autouse=True)
def no_periodic_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(routes_table, "SESSION_RECHECK_S", 600.0)


async def test_signing_out_closes_that_sessions_sockets_on_every_gateway(
    platform_db: str,  # noqa: F811
    internal_secret: bytes,
    tmp_path: Path,
    feed_redis_url: str,  # noqa: F811
) -> None:
    name = f"bye{'r' if feed_redis_url else 'p'}"
    await make_user(platform_db, name)
    async with two_gateways(platform_db, internal_secret, tmp_path, feed_redis_url) as (
        gw_a,
        gw_b,
    ):
        async with (
            cpu_match(gw_b, name) as (b, headers, match_id),
            serve(gw_a) as port,
            table_socket(port, match_id, headers) as (ws, _, _),
        ):
            # A second session of the same user (another device) keeps its socket.
            async with client_of(gw_b) as other:
                r = await other.post(
                    "/api/auth/tokens", json={"username": name, "password": PASSWORD}
                )
                other_headers = {"Authorization": f"Bearer {r.json()['token']}"}
            async with table_socket(port, match_id, other_headers) as (ws2, _, _):
                out = await b.post("/api/auth/logout", headers=headers)
                assert out.status_code == 200, out.text
                assert await closed(ws) == routes_table.SESSION_ENDED_CLOSE_CODE
                await ws2.ping()  # still open
                assert ws2.close_code is None


async def test_signing_out_closes_the_socket_on_the_same_gateway(
    platform_db: str,  # noqa: F811
    internal_secret: bytes,
    tmp_path: Path,
) -> None:
    await make_user(platform_db, "byeself")
    async with two_gateways(platform_db, internal_secret, tmp_path) as (gw_a, _):
        async with (
            cpu_match(gw_a, "byeself") as (a, headers, match_id),
            serve(gw_a) as port,
            table_socket(port, match_id, headers) as (ws, _, _),
        ):
            out = await a.post("/api/auth/logout", headers=headers)
            assert out.status_code == 200, out.text
            assert await closed(ws) == routes_table.SESSION_ENDED_CLOSE_CODE


async def test_a_lock_closes_all_the_users_sockets(
    platform_db: str,  # noqa: F811
    internal_secret: bytes,
    tmp_path: Path,
) -> None:
    await make_user(platform_db, "locked1")
    await make_user(platform_db, "boss1", "admin")
    async with two_gateways(platform_db, internal_secret, tmp_path) as (gw_a, gw_b):
        async with (
            cpu_match(gw_b, "locked1") as (_, headers, match_id),
            serve(gw_a) as port,
            table_socket(port, match_id, headers) as (ws, _, _),
            client_of(gw_b) as admin,
        ):
            await sign_in(admin, "boss1")
            r = await admin.patch(
                "/api/admin/users/locked1", json={"status": "locked", "reason": "test"}
            )
            assert r.status_code == 200, r.text
            assert await closed(ws) == routes_table.SESSION_ENDED_CLOSE_CODE


async def test_a_self_exclusion_closes_the_users_sockets(
    platform_db: str,  # noqa: F811
    internal_secret: bytes,
    tmp_path: Path,
) -> None:
    await make_user(platform_db, "excl1")
    async with two_gateways(platform_db, internal_secret, tmp_path) as (gw_a, gw_b):
        async with (
            cpu_match(gw_b, "excl1") as (b, headers, match_id),
            serve(gw_a) as port,
            table_socket(port, match_id, headers) as (ws, _, _),
        ):
            r = await b.post("/api/me/self-exclusion", json={"days": 30}, headers=headers)
            assert r.status_code == 200, r.text
            assert await closed(ws) == routes_table.SESSION_ENDED_CLOSE_CODE


async def test_a_cool_off_closes_the_users_sockets(
    platform_db: str,  # noqa: F811
    internal_secret: bytes,
    tmp_path: Path,
) -> None:
    await make_user(platform_db, "cool1")
    async with two_gateways(platform_db, internal_secret, tmp_path) as (gw_a, gw_b):
        async with (
            cpu_match(gw_b, "cool1") as (b, headers, match_id),
            serve(gw_a) as port,
            table_socket(port, match_id, headers) as (ws, _, _),
        ):
            r = await b.post("/api/me/cool-off", json={"hours": 24}, headers=headers)
            assert r.status_code == 200, r.text
            assert await closed(ws) == routes_table.SESSION_ENDED_CLOSE_CODE


async def test_a_lost_notice_is_made_up_by_the_periodic_check(
    platform_db: str,  # noqa: F811
    internal_secret: bytes,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A session revoked with no notice at all (as if NOTIFY were lost) is found by the
    socket's own check of its session."""
    monkeypatch.setattr(routes_table, "SESSION_RECHECK_S", 0.2)
    await make_user(platform_db, "quietbye")
    async with two_gateways(platform_db, internal_secret, tmp_path) as (gw_a, gw_b):
        async with (
            cpu_match(gw_b, "quietbye") as (_, headers, match_id),
            serve(gw_a) as port,
            table_socket(port, match_id, headers) as (ws, _, _),
        ):
            await asyncio.sleep(0.5)  # a few checks pass while the session is alive
            assert ws.close_code is None
            token = headers["Authorization"].removeprefix("Bearer ")
            await accounts.revoke_session(gw_a.state.db, accounts.token_hash(token))
            assert await closed(ws) == routes_table.SESSION_ENDED_CLOSE_CODE
