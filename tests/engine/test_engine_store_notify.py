"""Match-log appends: acknowledged only once committed; notified by the commit, in seq order
per match; a match restored by an engine announces its current seq."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from services.common.db import asyncpg_dsn
from services.engine.contract import NOTIFY_CHANNEL
from services.engine.store import Store, lock_key
from tests.engine.engine_helpers import auth, commitment, seed_of, spec

WAIT_S = 10.0  # an upper bound only: every wait below ends on an event


@pytest.fixture
async def store(engine_db: str) -> AsyncIterator[Store]:
    s = Store(engine_db)
    await s.start()
    try:
        yield s
    finally:
        await s.stop()


async def _listen(url: str) -> tuple[asyncpg.Connection, asyncio.Queue[str]]:
    conn = await asyncpg.connect(asyncpg_dsn(url))
    heard: asyncio.Queue[str] = asyncio.Queue()
    await conn.add_listener(NOTIFY_CHANNEL, lambda _c, _p, _ch, payload: heard.put_nowait(payload))
    return conn, heard


async def _create(conn: asyncpg.Connection, match_id: str) -> None:
    """A bare match row for the store alone, closed so no engine tries to restore it."""
    await conn.execute(
        "INSERT INTO engine.matches (match_id, spec) VALUES ($1, '{}'::jsonb)", match_id
    )
    await conn.execute(
        "INSERT INTO engine.match_closed (match_id, status) VALUES ($1, 'void')", match_id
    )


async def test_engine_committed_entries_are_notified_in_seq_order(
    engine_db: str, store: Store
) -> None:
    listener, heard = await _listen(engine_db)
    try:
        ids = ["nt-a", "nt-b", "nt-c"]
        for mid in ids:
            await _create(listener, mid)
        entries = 20

        async def one_match(mid: str) -> None:
            # As a match actor does: the next entry only once the previous one is acknowledged.
            for n in range(1, entries + 1):
                await store.append(mid, n, n, b'{"k":"x"}')

        await asyncio.gather(*(one_match(mid) for mid in ids))
        got: dict[str, list[int]] = {mid: [] for mid in ids}
        for _ in range(entries * len(ids)):
            payload = await asyncio.wait_for(heard.get(), WAIT_S)
            mid, _, seq = payload.rpartition(":")
            got[mid].append(int(seq))
        assert got == {mid: list(range(1, entries + 1)) for mid in ids}
        assert store.notifies_dropped == 0
    finally:
        await listener.close()


async def test_engine_append_is_acknowledged_only_once_committed(
    engine_db: str, store: Store
) -> None:
    blocker = await asyncpg.connect(asyncpg_dsn(engine_db))
    listener, heard = await _listen(engine_db)
    try:
        await _create(blocker, "ack-1")
        # Another transaction holds the entry's key: the store's insert waits for it.
        tx = blocker.transaction()
        await tx.start()
        await blocker.execute(
            "INSERT INTO engine.match_log (match_id, log_no, seq, record)"
            " VALUES ('ack-1', 1, 1, '\\x00'::bytea)"
        )
        append = asyncio.create_task(store.append("ack-1", 1, 1, b'{"k":"x"}'))
        waiting = False
        for _ in range(500):  # bounded: until the insert is seen waiting on the key's lock
            waiting = bool(
                await listener.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND query LIKE '%INSERT INTO engine.match_log%'"
                )
            )
            if waiting:
                break
            await asyncio.sleep(0.01)
        assert waiting
        assert not append.done()
        assert heard.empty()  # nothing announced before it is committed
        await tx.rollback()
        await asyncio.wait_for(append, WAIT_S)
        # Acknowledged: the entry is visible to any other session, i.e. committed.
        seen = await listener.fetchval(
            "SELECT record FROM engine.match_log WHERE match_id = 'ack-1' AND log_no = 1"
        )
        assert seen == b'{"k":"x"}'
        assert await asyncio.wait_for(heard.get(), WAIT_S) == "ack-1:1"
    finally:
        await blocker.close()
        await listener.close()


async def test_engine_restored_match_announces_its_seq(
    harness_factory: Any, internal_secret: bytes, engine_db: str
) -> None:
    h = auth(internal_secret)
    async with harness_factory() as hz:
        body = spec("nt-restore", "casa", {"players": 2}, 2)
        assert (await hz.client.post("/internal/matches", json=body, headers=h)).status_code == 200
        seq = (await hz.client.get("/internal/matches/nt-restore", headers=h)).json()["seq"]
    listener, heard = await _listen(engine_db)
    try:
        async with harness_factory() as hz2:
            r = await hz2.client.get("/internal/matches/nt-restore", headers=h)
            assert r.status_code == 200 and r.json()["seq"] == seq
            payloads: list[str] = []
            while f"nt-restore:{seq}" not in payloads:
                payloads.append(await asyncio.wait_for(heard.get(), WAIT_S))
    finally:
        await listener.close()


async def test_engine_scanner_lists_only_matches_no_process_owns(
    engine_db: str, store: Store
) -> None:
    other = await asyncpg.connect(asyncpg_dsn(engine_db))
    try:
        # Ids whose 64-bit lock key is negative and positive, and whose low halves are too:
        # the key's oid form in pg_locks (classid, objid) must match every sign.
        ids = ["own-a", "own-b", "own-c", "own-d", "own-e", "own-f"]
        assert {lock_key(mid) < 0 for mid in ids} == {True, False}
        assert {lock_key(mid) & 0x80000000 == 0 for mid in ids} == {True, False}
        for mid in ids:
            await other.execute(
                "INSERT INTO engine.matches (match_id, spec) VALUES ($1, '{}'::jsonb)", mid
            )
        held = ids[:3]
        for mid in held:  # another replica runs these: its lock connection holds their locks
            assert await other.fetchval("SELECT pg_try_advisory_lock($1::bigint)", lock_key(mid))
        live = set(await store.live_matches())
        unowned = set(await store.live_matches(unowned=True))
        assert set(ids) <= live
        assert not set(held) & unowned and set(ids[3:]) <= unowned
        assert await store.try_lock("own-d")  # this process's own locks count as owned too
        assert "own-d" not in set(await store.live_matches(unowned=True))
        await store.unlock("own-d")
        await other.execute("SELECT pg_advisory_unlock_all()")
        assert set(ids) <= set(await store.live_matches(unowned=True))
    finally:
        for mid in ids:
            await other.execute(
                "INSERT INTO engine.match_closed (match_id, status) VALUES ($1, 'void')", mid
            )
        await other.close()


async def test_engine_leaves_unannounced_only_the_actions_of_the_only_reading_gateway(
    harness_factory: Any, internal_secret: bytes, engine_db: str
) -> None:
    """An action whose gateway is the only one that has read the match, asking for the feeds
    of all its sockets, makes entries without NOTIFY (its answer brings them); once another
    gateway has read the match, or a reader that names no gateway, or after the match was
    restored by another process, every entry is announced again (contract:
    `SubmitAction.gateway`)."""
    h = auth(internal_secret)
    mid = "nt-quiet"
    listener, heard = await _listen(engine_db)

    async def heard_until(seq: int) -> list[int]:
        """Every seq announced for the match, up to and including `seq` (commit order)."""
        seqs: list[int] = []
        while seq not in seqs:
            payload = await asyncio.wait_for(heard.get(), WAIT_S)
            if payload.startswith(f"{mid}:"):
                seqs.append(int(payload.rpartition(":")[2]))
        return seqs

    async def act(client: Any, gateway: str | None) -> int:
        """The first legal action of the first seat on the clock; the match's seq after it."""
        st = (await client.get(f"/internal/matches/{mid}", headers=h)).json()
        seat = st["deadline"]["seats"][0]
        view = (await client.get(f"/internal/matches/{mid}/seats/{seat}/view", headers=h)).json()
        first = view["legal"][0]
        action: dict[str, Any] = {"type": first["type"]}
        if first["type"] == "seed_commit":
            action["commitment"] = commitment(seed_of(seat, 1))
        elif first["type"] == "seed_reveal":
            action["seed"] = seed_of(seat, 1)
        elif first["type"] == "play":
            action["tile"] = first["tile"]
            if first["end"] is not None:
                action["end"] = first["end"]
        body: dict[str, Any] = {
            "seat": seat,
            "seq": view["seq"],
            "action": action,
            "reads": [{"seat": seat, "after": view["seq"]}],
        }
        if gateway is not None:
            body["gateway"] = gateway
        r = await client.post(f"/internal/matches/{mid}/actions", json=body, headers=h)
        assert r.status_code == 200, r.text
        return int(r.json()["seq"])

    async def read(client: Any, gateway: str) -> None:
        body = {"reads": [{"seat": 0, "after": 0}], "gateway": gateway}
        r = await client.post(f"/internal/matches/{mid}/feeds", json=body, headers=h)
        assert r.status_code == 200, r.text

    try:
        async with harness_factory() as hz:
            c = hz.client
            created = await c.post(
                "/internal/matches", json=spec(mid, "apuesta", {"mode": "1v1"}, 2), headers=h
            )
            assert created.status_code == 200
            await heard_until(created.json()["seq"])
            bad = {"reads": [{"seat": 0, "after": 0}], "gateway": "no spaces"}
            r = await c.post(f"/internal/matches/{mid}/feeds", json=bad, headers=h)
            assert r.status_code == 400 and r.json()["error"] == "invalid_request"
            await read(c, "gw-a")
            quiet = await act(c, "gw-a")
            # An action without a gateway is announced; the earlier one, in commit order
            # before it, was not.
            loud = await act(c, None)
            assert quiet not in await heard_until(loud)
            await read(c, "gw-b")  # a second gateway reads the match: announce everything
            assert await heard_until(await act(c, "gw-a"))
            # A reader that does not name its gateway (an older one, a tool) may listen too.
            mid = "nt-quiet2"
            created = await c.post(
                "/internal/matches", json=spec(mid, "apuesta", {"mode": "1v1"}, 2), headers=h
            )
            await heard_until(created.json()["seq"])
            await read(c, "gw-a")
            quiet = await act(c, "gw-a")
            assert quiet not in await heard_until(await act(c, None))
            assert (await c.get(f"/internal/matches/{mid}/seats/0/feed", headers=h)).is_success
            assert await heard_until(await act(c, "gw-a"))
    finally:
        await listener.close()
    listener, heard = await _listen(engine_db)
    try:
        async with harness_factory() as hz2:  # restored here: its readers are unknown
            await read(hz2.client, "gw-a")
            assert await heard_until(await act(hz2.client, "gw-a"))
    finally:
        await listener.close()


async def test_engine_match_locks_never_collide(engine_db: str, store: Store) -> None:
    """Two matches whose ids share a 32-bit hash are still two locks: one process owning the
    first never keeps another from taking the second."""
    other = Store(engine_db)
    await other.start()
    try:
        conn = await asyncpg.connect(asyncpg_dsn(engine_db))
        try:
            # ~10 pairs expected among 300,000 ids in a 32-bit space; the first is enough.
            pair = await conn.fetchval(
                "SELECT array_agg(id ORDER BY id) FROM (SELECT 'coll-' || i AS id"
                " FROM generate_series(1, 300000) AS i) ids GROUP BY hashtext(id)"
                " HAVING count(*) > 1 ORDER BY 1 LIMIT 1"
            )
        finally:
            await conn.close()
        first, second = pair[0], pair[1]
        assert await other.try_lock(first)
        assert await store.try_lock(second)
        assert not await store.try_lock(first)
        await store.unlock(second)
        await other.unlock(first)
    finally:
        await other.stop()
