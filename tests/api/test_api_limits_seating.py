"""A player's paid seatings one after the other (api.eligibility.seating_lock): two at once
cannot both pass a loss limit that only one stake fits, two invitations with players in common
do not deadlock, and a seating that cannot get the lock is 503 and holds nothing.

The races are made, not hoped for: a seating is paused where it calls matchmaking (or where it
has taken its first lock), and the test goes on only once the other request is seen waiting on
a seating lock in `pg_locks` (or, without the lock, has got as far as it can).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from api import eligibility, player_lock
from api.backends import get_backends
from services.common.db import create_engine
from services.common.errors import ServiceError
from services.common.migrate import upgrade
from tests.api.api_helpers import make_user
from tests.api.lock_helpers import lock_waiters, until
from tests.api.platform_stack import COMPONENTS
from tests.api.test_api_invitations import Players, players

STAKE = 1000  # tier "10"
JOINS = ("/v1/join/quick", "/v1/tables/private", "/v1/join/code")


@pytest.fixture(scope="module")
def platform_db(database_url: str) -> str:
    upgrade(database_url, COMPONENTS)
    return database_url


@pytest.fixture
async def su(platform_db: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(platform_db, as_app_role=False)  # reads pg_locks, holds locks
    try:
        yield engine
    finally:
        await engine.dispose()


_made: set[str] = set()


async def _finance(platform_db: str) -> None:
    if platform_db not in _made:
        await make_user(platform_db, "caja", "finance")
        _made.add(platform_db)


async def _seat_lock_waiters(su: AsyncEngine, *names: str) -> int:
    """Requests waiting for one of these players' seating locks."""
    return await lock_waiters(su, [eligibility.seat_lock_key(n) for n in names])


class JoinGate:
    """Pauses the gateway's seating calls to matchmaking until `go` is set."""

    def __init__(self, ps: Players, monkeypatch: pytest.MonkeyPatch) -> None:
        mm = get_backends(ps.p.gateway.state).matchmaking
        original = mm.post
        self.arrived = 0
        self.go = asyncio.Event()

        async def post(target: str, body: Any, kind: Any, **kw: Any) -> Any:
            if target in JOINS:
                self.arrived += 1
                await self.go.wait()
            return await original(target, body, kind, **kw)

        monkeypatch.setattr(mm, "post", post)


async def test_two_paid_seatings_at_once_pass_a_loss_limit_only_once(
    platform_db: str,
    internal_secret: bytes,
    tmp_path: Path,
    su: AsyncEngine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await _finance(platform_db)
    async with players(platform_db, internal_secret, tmp_path) as ps:
        me = await ps.add("sl_ana", deposit=5000)
        r = await me.post("/api/me/limits", json={"limits": {"loss_day": 1500}})
        assert r.status_code == 200, r.text
        gate = JoinGate(ps, monkeypatch)
        # Two tabs: a quick join and a new private table, each a stake of 10.00; one fits.
        quick = asyncio.create_task(
            me.post("/api/lobby/quick-join", json={"kind": "cubana-habana", "tier": "10"})
        )
        await until(lambda: _true(gate.arrived == 1), "the quick join at matchmaking")
        private = asyncio.create_task(
            me.post("/api/lobby/private", json={"kind": "apuesta-1v1", "tier": "10"})
        )

        async def private_waits_or_joins() -> bool:
            return gate.arrived == 2 or await _seat_lock_waiters(su, "sl_ana") == 1

        await until(private_waits_or_joins, "the private table on the lock or at matchmaking")
        gate.go.set()
        seated, refused = await quick, await private
        assert seated.status_code == 200, seated.text
        assert refused.status_code == 403 and refused.json()["error"] == "loss_limit", refused.text
        assert await ps.balance("sl_ana") == 5000 - STAKE
        assert len(await ps.seats("sl_ana")) == 1


async def test_two_invitations_accepted_at_once_pass_a_loss_limit_only_once(
    platform_db: str,
    internal_secret: bytes,
    tmp_path: Path,
    su: AsyncEngine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await _finance(platform_db)
    async with players(platform_db, internal_secret, tmp_path) as ps:
        me = await ps.add("sl_eli", deposit=5000)
        for name in ("sl_fer", "sl_gil"):
            await ps.add(name)
        r = await me.post("/api/me/limits", json={"limits": {"loss_day": 1500}})
        assert r.status_code == 200, r.text
        ids = []
        for inviter, path, kind in (
            ("sl_fer", "/api/lobby/quick-join", "casa-parejas"),
            ("sl_gil", "/api/lobby/private", "dominicana-2v2-100"),
        ):
            body = {"kind": kind, "tier": "10", "partner": "sl_eli"}
            r = await ps[inviter].post(path, json=body)
            assert r.status_code == 202, r.text
            ids.append(r.json()["invitation_id"])
        gate = JoinGate(ps, monkeypatch)
        first = asyncio.create_task(me.post(f"/api/invitations/{ids[0]}/accept"))
        await until(lambda: _true(gate.arrived == 1), "the first acceptance at matchmaking")
        second = asyncio.create_task(me.post(f"/api/invitations/{ids[1]}/accept"))

        async def second_waits_or_joins() -> bool:
            return gate.arrived == 2 or await _seat_lock_waiters(su, "sl_eli") == 1

        await until(second_waits_or_joins, "the second acceptance on the lock or at matchmaking")
        gate.go.set()
        seated, refused = await first, await second
        assert seated.status_code == 200 and seated.json()["table"], seated.text
        assert refused.status_code == 403 and refused.json()["error"] == "loss_limit", refused.text
        assert await ps.balance("sl_eli") == 5000 - STAKE
        assert len(await ps.seats("sl_eli")) == 1


async def test_a_seating_that_cannot_get_the_lock_is_503_and_holds_nothing(
    platform_db: str,
    internal_secret: bytes,
    tmp_path: Path,
    su: AsyncEngine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await _finance(platform_db)
    async with players(platform_db, internal_secret, tmp_path) as ps:
        me = await ps.add("sl_bob", deposit=3000)
        monkeypatch.setattr(eligibility, "SEAT_LOCK_WAIT_MS", 50)
        async with su.begin() as conn:  # another seating of his holds the lock meanwhile
            await conn.execute(
                text("SELECT pg_advisory_xact_lock(:key)"),
                {"key": eligibility.seat_lock_key("sl_bob")},
            )
            for path, body in (
                ("/api/lobby/quick-join", {"kind": "apuesta-1v1", "tier": "10"}),
                ("/api/lobby/private", {"kind": "apuesta-1v1", "tier": "20"}),
                ("/api/lobby/join-code", {"invite_code": "ABCDEF"}),
            ):
                r = await me.post(path, json=body)
                assert r.status_code == 503 and r.json()["error"] == "seating_busy", r.text
            assert await ps.balance("sl_bob") == 3000 and await ps.seats("sl_bob") == []
            # A free table holds no money: it takes no lock and does not wait for one.
            r = await me.post("/api/lobby/quick-join", json={"kind": "apuesta-1v1", "tier": "free"})
            assert r.status_code == 200, r.text
        r = await me.post("/api/lobby/quick-join", json={"kind": "apuesta-1v1", "tier": "10"})
        assert r.status_code == 200, r.text
        assert await ps.balance("sl_bob") == 3000 - STAKE


async def test_two_invitations_with_the_same_players_accepted_at_once_do_not_deadlock(
    platform_db: str,
    internal_secret: bytes,
    tmp_path: Path,
    su: AsyncEngine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await _finance(platform_db)
    ana, bea = "sl_cara", "sl_dina"
    async with players(platform_db, internal_secret, tmp_path) as ps:
        await ps.add(ana, deposit=2 * STAKE)
        await ps.add(bea, deposit=2 * STAKE)
        # Ana invites Bea, and Bea invites Ana: each acceptance seats both of them.
        r = await ps[ana].post(
            "/api/lobby/quick-join", json={"kind": "casa-parejas", "tier": "10", "partner": bea}
        )
        assert r.status_code == 202, r.text
        first = r.json()["invitation_id"]
        r = await ps[bea].post(
            "/api/lobby/private",
            json={"kind": "dominicana-2v2-100", "tier": "10", "partner": ana},
        )
        assert r.status_code == 202, r.text
        second = r.json()["invitation_id"]
        # The first acceptance stops once it holds one lock, until the second holds one too or
        # waits for one: taken in the invitations' own orders (inviter first) they would cross.
        taken: list[int] = []
        take_one = player_lock.take_one

        async def other_in() -> bool:
            return len(taken) > 1 or await _seat_lock_waiters(su, ana, bea) > 0

        async def paused_take_one(conn: AsyncConnection, key: int) -> None:
            await take_one(conn, key)
            taken.append(key)
            if len(taken) == 1:
                await until(other_in, "the second acceptance on a seating lock")

        monkeypatch.setattr(player_lock, "take_one", paused_take_one)
        one = asyncio.create_task(ps[bea].post(f"/api/invitations/{first}/accept"))
        await until(lambda: _true(len(taken) == 1), "the first acceptance holding a lock")
        two = asyncio.create_task(ps[ana].post(f"/api/invitations/{second}/accept"))
        answers = [await one, await two]
        for answer in answers:
            assert answer.status_code == 200, answer.text
            assert answer.json()["status"] == "accepted" and answer.json()["table"], answer.text
        assert await ps.balance(ana) == 0 and await ps.balance(bea) == 0
        assert len(await ps.seats(ana)) == 2 and len(await ps.seats(bea)) == 2


async def _true(value: bool) -> bool:
    return value


async def test_locked_seatings_are_bounded_below_the_connection_pool(
    platform_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each holder needs a second pooled connection for its checks: past the bound a seating
    # waits for a slot (bounded too) instead of taking the pool's last connection.
    monkeypatch.setattr(eligibility, "MAX_LOCKED_SEATINGS", 1)
    monkeypatch.setattr(eligibility, "SEAT_LOCK_WAIT_MS", 50)
    engine = create_engine(platform_db)
    try:
        async with eligibility.seating_lock(engine, ["sl_hal"], "10"):
            with pytest.raises(ServiceError) as busy:
                async with eligibility.seating_lock(engine, ["sl_ivo"], "10"):
                    pass
            assert (busy.value.status, busy.value.code) == (503, "seating_busy")
            async with eligibility.seating_lock(engine, ["sl_ivo"], "free"):
                pass  # a free table needs no slot
        async with eligibility.seating_lock(engine, ["sl_ivo"], "10"):
            pass  # the slot came back
    finally:
        await engine.dispose()
