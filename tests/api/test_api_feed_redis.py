"""The gateway feed's Redis backend against a real PostgreSQL and a real `redis-server`.

Two MatchFeeds stand for two gateway processes: exactly one relays PostgreSQL's notifications
to Redis, a second takes over when the first stops, a Redis crash is survived (reconnect, and
every socket woken once), and the relay's backlog is bounded.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg

from api.feed import (
    CHAT_CHANNEL,
    ENGINE_CHANNEL,
    MatchFeed,
    RedisRelay,
    Subscription,
)
from services.common.db import asyncpg_dsn
from services.common.metrics import REGISTRY
from tests.api.platform_stack import RedisServer, redis_server

WAIT_S = 15.0  # bound on every await below (reconnect backoff is at most 5 s)


@asynccontextmanager
async def feeds(database_url: str, redis_url: str, n: int) -> AsyncIterator[list[MatchFeed]]:
    started = [MatchFeed(database_url, redis_url=redis_url) for _ in range(n)]
    try:
        for feed in started:
            await feed.start()
        for feed in started:
            await asyncio.wait_for(feed.listening.wait(), WAIT_S)
        yield started
    finally:
        for feed in started:
            await feed.stop()


async def leader_of(group: list[MatchFeed]) -> MatchFeed:
    relays = {feed: feed.relay for feed in group if feed.relay is not None}
    waits = {asyncio.create_task(r.leading.wait()): f for f, r in relays.items()}
    done, pending = await asyncio.wait(waits, timeout=WAIT_S, return_when="FIRST_COMPLETED")
    for task in pending:
        task.cancel()
    assert done, "no relay"
    leaders = [f for f, r in relays.items() if r.leading.is_set()]
    assert len(leaders) == 1, "more than one relay"
    return leaders[0]


async def notify(database_url: str, channel: str, payload: str) -> None:
    conn = await asyncpg.connect(asyncpg_dsn(database_url))
    try:
        await conn.execute("SELECT pg_notify($1, $2)", channel, payload)
    finally:
        await conn.close()


async def woken(sub: Subscription) -> None:
    await asyncio.wait_for(sub.events.wait(), WAIT_S)
    sub.events.clear()


async def until_seq(sub: Subscription, seq: int) -> None:
    """Woken with `seq` announced (a wake-all from a relay's start may come first)."""
    for _ in range(5):
        await woken(sub)
        if sub.notified_seq == seq:
            return
    raise AssertionError(f"seq {seq} never announced (have {sub.notified_seq})")


def sample(name: str, **labels: str) -> float:
    value = REGISTRY.get_sample_value(name, labels)
    return 0.0 if value is None else value


async def test_one_relay_carries_notifications_to_every_gateway_and_a_standby_takes_over(
    database_url: str, tmp_path: Path
) -> None:
    with redis_server(tmp_path / "redis") as server:
        async with feeds(database_url, server.url, 2) as (one, two):
            leader = await leader_of([one, two])
            assert sample("mesa_feed_relay_leader") == 1
            subs = [feed.subscribe("m-1") for feed in (one, two)]
            assert all(s is not None for s in subs)
            engine_before = sample("mesa_feed_messages_total", backend="redis", kind="engine")
            await notify(database_url, ENGINE_CHANNEL, "m-1:7")
            for s in subs:
                assert s is not None
                await until_seq(s, 7)
            await notify(database_url, CHAT_CHANNEL, "m-1:3")
            for s in subs:
                assert s is not None
                await asyncio.wait_for(s.chat.wait(), WAIT_S)
            assert (
                sample("mesa_feed_messages_total", backend="redis", kind="engine")
                >= engine_before + 2
            )
            assert sample("mesa_feed_lag_seconds_count") >= 2
            assert sample("mesa_feed_backend_info", backend="redis") == 1

            # The relay stops (its lock goes with its connection): the other one takes over,
            # wakes every socket once, and carries the next notification.
            standby = two if leader is one else one
            sub = subs[1] if standby is two else subs[0]
            assert sub is not None and standby.relay is not None
            await leader.stop()
            await asyncio.wait_for(standby.relay.leading.wait(), WAIT_S)
            await woken(sub)
            assert sub.forced
            sub.forced = False
            await notify(database_url, ENGINE_CHANNEL, "m-1:8")
            await until_seq(sub, 8)


async def test_a_redis_crash_is_survived_and_every_socket_fetches_once(
    database_url: str, tmp_path: Path
) -> None:
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        async with feeds(database_url, server.url, 1) as (feed,):
            await leader_of([feed])
            sub = feed.subscribe("m-2")
            assert sub is not None
            reconnects = sample("mesa_feed_reconnects_total", backend="redis")
            server.kill()
            for _ in range(int(WAIT_S * 50)):  # the listener notices the closed socket
                if not feed.listening.is_set():
                    break
                await asyncio.sleep(0.02)
            assert not feed.listening.is_set()
            assert sample("mesa_feed_connected", backend="redis") == 0
            sub.events.clear()
            sub.forced = False
            server.start()
            await asyncio.wait_for(feed.listening.wait(), WAIT_S)
            await woken(sub)
            assert sub.forced  # woken to fetch whatever was published during the outage
            assert feed.connects >= 2
            assert sample("mesa_feed_reconnects_total", backend="redis") >= reconnects + 1
            await notify(database_url, ENGINE_CHANNEL, "m-2:4")
            await until_seq(sub, 4)
    finally:
        server.kill()


async def test_relay_backlog_is_bounded_and_overflow_becomes_one_wake_all() -> None:
    relay = RedisRelay("postgresql://unused", "redis://127.0.0.1:1/0", queue_max=3)
    for seq in range(5):
        relay._heard("e", f"m-3:{seq}")
    relay._heard("e", "x" * 500)  # oversized payloads are not relayed at all
    assert len(relay.pending) == 3 and relay.dropped == 2 and relay.wake_all_pending
    message, taken = relay._next_message()
    lines = message.split("\n")
    assert taken == 3 and lines[1] == "*" and lines[2:] == ["e m-3:0", "e m-3:1", "e m-3:2"]
    assert lines[0].isdigit()

    feed = MatchFeed("postgresql://unused", redis_url="redis://127.0.0.1:1/0")
    sub = feed.subscribe("m-3")
    other = feed.subscribe("m-4")
    assert sub is not None and other is not None
    feed.deliver_batch("123\ne m-3:2\nc m-3:9\ne bad\n? what")
    assert sub.notified_seq == 2 and sub.events.is_set() and sub.chat.is_set()
    assert not other.events.is_set() and not other.forced
    feed.deliver_batch("123\n*")
    assert other.forced and other.chat.is_set()
