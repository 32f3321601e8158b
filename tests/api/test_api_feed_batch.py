"""The gateway's FeedBatcher: the sockets of one match woken together share one engine read,
and each gets its own seat's feed (nobody else's hand)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest

from api.feed import MatchFeed
from api.routes_table import FeedBatcher, WsAction, _Table
from services.common.http import RemoteError, ServiceUnavailable
from services.common.metrics import REQUESTS
from services.common.migrate import upgrade
from services.engine.contract import Action
from tests.api.api_helpers import bearer, make_user
from tests.api.platform_stack import COMPONENTS, platform

FEEDS_ROUTE = "/internal/matches/{match_id}/feeds"


@pytest.fixture(scope="module")
def platform_db(database_url: str) -> str:
    upgrade(database_url, COMPONENTS)
    return database_url


def _feeds_calls() -> float:
    return sum(
        sample.value
        for metric in REQUESTS.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
        and sample.labels.get("service") == "engine"
        and sample.labels.get("route") == FEEDS_ROUTE
    )


async def test_reads_of_one_turn_share_one_engine_call(
    platform_db: str, internal_secret: bytes, tmp_path: Path
) -> None:
    await make_user(platform_db, "batchy")
    async with platform(platform_db, internal_secret, tmp_path) as p, p.client() as c:
        headers = await bearer(c, "batchy")
        r = await c.post("/api/lobby/cpu", json={"kind": "apuesta-1v1"}, headers=headers)
        assert r.status_code == 200, r.text
        match_id = r.json()["match_id"]
        state = p.gateway.state
        batcher: FeedBatcher = state.feed_batcher
        before = _feeds_calls()
        seat0, seat1, again = await asyncio.gather(
            batcher.read(match_id, 0, 0), batcher.read(match_id, 1, 0), batcher.read(match_id, 0, 0)
        )
        assert _feeds_calls() - before == 1
        assert seat0.events.seat == 0 and seat1.events.seat == 1
        assert seat0 == again
        # a whole log fits one page, so each read carries its seat's own snapshot
        assert seat0.snapshot is not None and seat1.snapshot is not None
        assert seat0.snapshot.seat == 0 and seat1.snapshot.seat == 1
        assert not set(seat0.snapshot.hand) & set(seat1.snapshot.hand)
        # reads in later turns go out on their own
        await batcher.read(match_id, 0, 0)
        assert _feeds_calls() - before == 2


class _Socket:
    """The table socket as `_Table` uses it: frames sent, as text."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def send_text(self, text: str) -> None:
        self.sent.append(text)


class _Engine:
    """An engine whose action route fails as told, or never answers (`exc` None)."""

    def __init__(self, exc: Exception | None) -> None:
        self.exc = exc
        self.called = asyncio.Event()

    async def post(self, *_args: Any, **_kwargs: Any) -> Any:
        self.called.set()
        if self.exc is None:
            await asyncio.Event().wait()
        raise self.exc  # type: ignore[misc]


def _two_sockets(exc: Exception | None) -> tuple[_Table, _Table, _Engine]:
    """Two sockets of one match on one gateway, joined, with `_Engine(exc)` behind them."""
    engine = _Engine(exc)
    backends: Any = SimpleNamespace(engine=engine)
    reads = FeedBatcher(backends, "gw-test")
    feed = MatchFeed("postgresql://unused/unused")  # the registry only: never started
    tables = []
    for seat in (0, 1):
        sub = feed.subscribe("m1")
        assert sub is not None
        table = _Table(_Socket(), backends, None, feed, sub, "m1", seat, f"p{seat}", reads)  # type: ignore[arg-type]
        reads.join(table)
        tables.append(table)
    return tables[0], tables[1], engine


ACTION = WsAction(seq=3, action=msgspec.convert({"type": "leave"}, Action), ref="r1")


@pytest.mark.parametrize(
    ("exc", "woken"),
    [
        (ServiceUnavailable("timed out"), True),  # may have been applied, unannounced
        (RemoteError(500, "server_error", "boom"), True),
        (RemoteError(409, "stale_seq", "old seq"), False),  # refused: nothing changed
    ],
)
async def test_a_failed_action_call_wakes_the_match_s_other_sockets(
    exc: Exception, woken: bool
) -> None:
    """An action whose answer is lost may have been applied without a NOTIFY (the gateway
    asked for every socket's feed): each socket of the match reads for itself instead."""
    acting, other, _ = _two_sockets(exc)
    await acting.act(ACTION)
    assert json.loads(acting.socket.sent[-1])["type"] == "error"  # type: ignore[attr-defined]
    assert other.sub.forced is woken and other.sub.events.is_set() is woken
    assert acting.sub.forced is woken


async def test_an_action_cancelled_mid_call_wakes_the_match_s_other_sockets() -> None:
    acting, other, engine = _two_sockets(None)
    task = asyncio.create_task(acting.act(ACTION))
    await engine.called.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert other.sub.forced and other.sub.events.is_set()


async def test_an_action_names_the_gateway_only_when_it_reads_for_every_socket() -> None:
    """The engine may leave an action unannounced only when the gateway names itself, which it
    does only when the action carries a read for every socket it has subscribed to the match:
    not while a socket is between its subscription and its first feed (`join`)."""
    acting, _, engine = _two_sockets(RemoteError(409, "stale_seq", "old seq"))
    sent: list[Any] = []
    refuse = engine.post

    async def post(*args: Any, **kwargs: Any) -> Any:
        sent.append(args[1])
        return await refuse(*args, **kwargs)

    engine.post = post  # type: ignore[method-assign]
    await acting.act(ACTION)
    assert sent[-1].gateway == "gw-test" and len(sent[-1].reads) == 2
    assert acting.feed.subscribe("m1") is not None  # a third socket, not joined yet
    await acting.act(ACTION)
    assert sent[-1].gateway is None
