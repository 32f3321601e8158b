"""Two gateway apps on one database and engine: a table socket on gateway A hears an action
and a chat line made through gateway B, delivered by PostgreSQL NOTIFY or, with the Redis
backend, by the relay over a real `redis-server` (api/feed.py).

Gateway A is served by uvicorn on a loopback port in this event loop (so the socket is a real
WebSocket); its safety-net fetch is pushed out of reach, so only a notification can wake it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
from litestar import Litestar

from services.common.migrate import upgrade
from tests.api.api_helpers import bearer, make_user
from tests.api.platform_stack import COMPONENTS, platform, redis_server
from tests.uvicorn_server import UvicornServer

FRAME_TIMEOUT_S = 4.0  # well under the (disabled) safety net: only NOTIFY can deliver


@pytest.fixture(scope="module")
def platform_db(database_url: str) -> str:
    upgrade(database_url, COMPONENTS)
    return database_url


@pytest.fixture(params=["postgres", "redis"])
def feed_redis_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The gateways' feed backend: "" for PostgreSQL LISTEN/NOTIFY, or a fresh Redis's URL."""
    if request.param == "postgres":
        yield ""
        return
    with redis_server(tmp_path / "redis") as server:
        yield server.url


@asynccontextmanager
async def two_gateways(
    database_url: str, secret: bytes, key_dir: Path, redis_url: str = ""
) -> AsyncIterator[tuple[Litestar, Litestar]]:
    async with platform(database_url, secret, key_dir, gateways=2, redis_url=redis_url) as stack:
        gw_a, gw_b = stack.gateways
        for app in (gw_a, gw_b):
            await asyncio.wait_for(app.state.feed.listening.wait(), 10)
        relays = [app.state.feed.relay for app in (gw_a, gw_b) if app.state.feed.relay]
        if relays:
            # Redis: one of the two must be relaying PostgreSQL's notifications.
            waits = [asyncio.create_task(r.leading.wait()) for r in relays]
            done, pending = await asyncio.wait(waits, timeout=10, return_when="FIRST_COMPLETED")
            for task in pending:
                task.cancel()
            assert done, "no gateway became the feed relay"
            assert sum(r.leading.is_set() for r in relays) == 1
        yield gw_a, gw_b


@asynccontextmanager
async def serve(app: Litestar) -> AsyncIterator[int]:
    async with UvicornServer(app, lifespan="off", log_config=None) as served:
        yield served.port


VIEWS = ("snapshot", "update")  # the frames that carry the seat's view


@asynccontextmanager
async def cpu_match(
    app: Litestar, name: str
) -> AsyncIterator[tuple[httpx.AsyncClient, dict[str, str], str]]:
    """`name` signed in through `app` and seated at a new apuesta 1v1 against the CPU."""
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 50001))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        headers = await bearer(client, name)
        r = await client.post("/api/lobby/cpu", json={"kind": "apuesta-1v1"}, headers=headers)
        assert r.status_code == 200, r.text
        yield client, headers, str(r.json()["match_id"])


async def next_frame(ws: Any, kinds: str | tuple[str, ...], min_seq: int = -1) -> dict[str, Any]:
    kinds = (kinds,) if isinstance(kinds, str) else kinds
    async with asyncio.timeout(FRAME_TIMEOUT_S):
        while True:
            frame = json.loads(await ws.recv())
            if frame["type"] in kinds and frame.get("seq", min_seq) >= min_seq:
                return dict(frame)


@asynccontextmanager
async def table_socket(
    port: int, match_id: str, headers: dict[str, str]
) -> AsyncIterator[tuple[Any, dict[str, Any], dict[str, Any]]]:
    """The match's table socket on the gateway served at `port`: (socket, hello, first view)."""
    url = f"ws://127.0.0.1:{port}/api/matches/{match_id}/ws"
    async with websockets.connect(url, additional_headers=headers) as ws:
        hello = await next_frame(ws, "hello")
        view = (await next_frame(ws, "snapshot"))["view"]
        yield ws, hello, view


def action_for(view: dict[str, Any]) -> dict[str, Any] | None:
    legal = view["legal"]
    if not legal:
        return None
    first = legal[0]
    seed = f"x-{view['state']['deal_id']}"
    if first["type"] == "seed_commit":
        return {"type": "seed_commit", "commitment": hashlib.sha256(seed.encode()).hexdigest()}
    if first["type"] == "seed_reveal":
        return {"type": "seed_reveal", "seed": seed}
    if first["type"] == "play":
        return {"type": "play", "tile": first["tile"], "end": first.get("end")}
    if first["type"] == "choose":
        return {"type": "choose", "salgo": True}
    return None


async def act_until_acked(ws: Any, view: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Send the first legal action of the newest view on `ws` until one is acknowledged (the
    CPU may move first): (the ack, the view it was made against)."""
    for n in range(40):
        action = action_for(view)
        if action is None:
            view = (await next_frame(ws, VIEWS, view["seq"] + 1))["view"]
            continue
        ref = f"r{n}"
        frame = {"type": "action", "ref": ref, "seq": view["seq"], "action": action}
        await ws.send(json.dumps(frame))
        reply = await next_frame(ws, ("ack", "error"))
        assert reply["ref"] == ref, reply
        if reply["type"] == "ack":
            return reply, view
        assert reply["error"] == "stale_seq", reply
        view = (await next_frame(ws, VIEWS, view["seq"] + 1))["view"]
    raise AssertionError("no action was acknowledged")


async def test_socket_on_one_gateway_hears_actions_made_through_another(
    platform_db: str, internal_secret: bytes, tmp_path: Path, feed_redis_url: str
) -> None:
    name = f"xgate{'r' if feed_redis_url else ''}"
    await make_user(platform_db, name)
    async with two_gateways(platform_db, internal_secret, tmp_path, feed_redis_url) as (
        gw_a,
        gw_b,
    ):
        feed_a = gw_a.state.feed
        assert feed_a.backend == ("redis" if feed_redis_url else "postgres")
        feed_a.wake_timeout_s = feed_a.chat_wake_timeout_s = 600.0  # no safety net here
        async with (
            cpu_match(gw_b, name) as (b, headers, match_id),
            serve(gw_a) as port,
        ):
            async with table_socket(port, match_id, headers) as (ws, hello, view):
                assert hello["seat"] == view["seat"] and feed_a.subscriptions == 1
                accepted = None
                for _ in range(20):  # the CPU may move first: act on the newest view
                    action = action_for(view)
                    if action is not None:
                        a = await b.post(
                            f"/api/matches/{match_id}/actions",
                            json={"seq": view["seq"], "action": action},
                            headers=headers,
                        )
                        if a.status_code == 200:
                            accepted = a.json()["seq"]
                            break
                        assert a.status_code == 409, a.text
                    view = (await next_frame(ws, VIEWS, view["seq"] + 1))["view"]
                assert accepted is not None
                # Made through gateway B; heard on gateway A's socket, by NOTIFY only: the
                # new events and the seat's view in one frame.
                update = await next_frame(ws, "update", accepted)
                assert update["events"] and update["seq"] >= accepted
                assert update["view"]["seat"] == hello["seat"]
                assert update["view"]["seq"] == update["seq"]
                c = await b.post(
                    f"/api/matches/{match_id}/chat",
                    json={"kind": "reaction", "code": "aplauso"},
                    headers=headers,
                )
                assert c.status_code == 200, c.text
                async with asyncio.timeout(FRAME_TIMEOUT_S):
                    while True:
                        frame = json.loads(await ws.recv())
                        if frame["type"] == "chat":
                            break
                assert frame["code"] == "aplauso" and frame["id"] == c.json()["id"]
            for _ in range(100):
                if feed_a.subscriptions == 0:
                    break
                await asyncio.sleep(0.02)
            assert feed_a.subscriptions == 0


async def test_an_action_made_on_a_socket_is_acked_with_its_update(
    platform_db: str, internal_secret: bytes, tmp_path: Path
) -> None:
    """The acting socket gets one frame per action: the ack, carrying the seat's new events
    and view (docs/reference/api.md), not an ack and then a separate update."""
    name = "ackupd"
    await make_user(platform_db, name)
    async with two_gateways(platform_db, internal_secret, tmp_path) as (gw_a, _):
        async with (
            cpu_match(gw_a, name) as (_, headers, match_id),
            serve(gw_a) as port,
        ):
            async with table_socket(port, match_id, headers) as (ws, hello, view):
                for _ in range(3):
                    reply, acted_on = await act_until_acked(ws, view)
                    update = reply["update"]
                    assert update["seq"] >= reply["seq"] > acted_on["seq"]
                    assert update["events"] and update["events"][0]["seq"] > acted_on["seq"]
                    assert update["view"]["seat"] == hello["seat"]
                    assert update["view"]["seq"] == update["seq"]
                    view = update["view"]
                    if view["state"]["status"] != "playing":
                        break


async def test_an_action_on_one_gateway_reaches_the_seats_socket_on_another(
    platform_db: str, internal_secret: bytes, tmp_path: Path
) -> None:
    """A player with a socket on each gateway acts through B's: B's socket has the ack with
    the update, and A's socket gets the update by NOTIFY (its safety net is out of reach).
    The engine leaves an action unannounced only when its gateway is the match's only reader,
    and A became one with its socket's first read."""
    name = "twotabs"
    await make_user(platform_db, name)
    async with two_gateways(platform_db, internal_secret, tmp_path) as (gw_a, gw_b):
        feed_a = gw_a.state.feed
        feed_a.wake_timeout_s = feed_a.chat_wake_timeout_s = 600.0  # no safety net here
        async with (
            cpu_match(gw_b, name) as (_, headers, match_id),
            serve(gw_a) as port_a,
            serve(gw_b) as port_b,
            table_socket(port_a, match_id, headers) as (ws_a, _, view_a),
            table_socket(port_b, match_id, headers) as (ws_b, _, view),
        ):
            reply, _ = await act_until_acked(ws_b, view)
            acked = reply["seq"]
            update = await next_frame(ws_a, "update", acked)
            assert update["seq"] >= acked > view_a["seq"]


async def test_a_socket_hears_the_chat_posted_after_it_connected(
    platform_db: str, internal_secret: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A socket reads no chat until the match has chat news (docs/reference/api.md); then it gets the
    lines posted since it connected, none from before, and each later line once. Every socket
    woken at once (the listener reconnected) with no chat posted sends nothing."""
    import api.routes_table as routes_table

    monkeypatch.setattr(routes_table, "CHAT_CONNECT_GRACE_S", 0.0)
    name = "chatter"
    await make_user(platform_db, name)
    async with two_gateways(platform_db, internal_secret, tmp_path) as (gw_a, _):
        feed_a = gw_a.state.feed
        feed_a.wake_timeout_s = feed_a.chat_wake_timeout_s = 600.0  # no safety net here
        db = gw_a.state.db
        async with cpu_match(gw_a, name) as (_, headers, match_id), serve(gw_a) as port:
            before = await routes_table.post_chat(db, match_id, 0, "phrase", "buena")
            async with table_socket(port, match_id, headers) as (ws, hello, _):
                feed_a.wake_all()  # a first read that finds nothing
                seat = hello["seat"]
                lines = [
                    await routes_table.post_chat(db, match_id, seat, "reaction", code)
                    for code in ("aplauso", "risa")
                ]
                got: list[int] = []
                async with asyncio.timeout(FRAME_TIMEOUT_S):
                    while len(got) < len(lines):
                        frame = json.loads(await ws.recv())
                        if frame["type"] == "chat":
                            got.append(frame["id"])
                assert before not in got and got == lines
