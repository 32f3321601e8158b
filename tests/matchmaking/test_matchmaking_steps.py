"""The step functions' crash windows: each step is one commit, and a retry or the sweeper
finishes what a dead request left."""

from __future__ import annotations

import uuid

import pytest

from services.common.migrate import upgrade
from services.ledger.contract import EntryResult, ReleaseRequest
from services.matchmaking import contract as c
from services.matchmaking.config import MatchmakingConfig
from services.matchmaking.service import _hash
from tests.matchmaking.mm_helpers import refused, stack

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def db(database_url: str) -> str:
    upgrade(database_url, ["ledger", "matchmaking"])
    return database_url


async def test_leave_retried_after_a_crash_finishes_the_same_release(db, internal_secret):
    async with stack(db, internal_secret) as s:
        await s.deposit("crash1", 2000)
        joined = await s.quick("crash1", "apuesta-trios", "20")
        table_id = joined.table.table_id
        body = c.Leave(idempotency_key="lv", player_id="crash1", table_id=table_id)
        # The first attempt frees the seat (one commit) and dies before the ledger call.
        await s.fetch(
            "SELECT matchmaking.leave($1, $2, $3, $4, $5)",
            "crash1",
            "lv",
            _hash(body),
            table_id,
            s.clock(),
        )
        assert await s.balance("crash1") == 0
        assert (await s.status(table_id)).seats[0].player_id is None
        again = await s.mm.post("/v1/leave", body, c.LeaveResult)
        assert again.released and again.replayed
        assert await s.balance("crash1") == 2000
        assert await s.open_holds() == {}
        rows = await s.fetch(
            "SELECT status FROM matchmaking.reservations WHERE player_id = 'crash1'"
        )
        assert [r["status"] for r in rows] == ["released"]
        # and the answer is now stored: a third call replays it
        assert (await s.mm.post("/v1/leave", body, c.LeaveResult)).replayed


async def test_table_left_starting_after_its_pot_moved_is_started_by_the_sweeper(
    db, internal_secret
):
    config = MatchmakingConfig(sweep_interval_ms=0, repair_after_ms=1_000)
    async with stack(db, internal_secret, config) as s:
        for p in ("st1", "st2"):
            await s.deposit(p, 1000)
        first = await s.quick("st1", "casa-duelo", "10")
        table_id = first.table.table_id
        # The second joiner's request dies after its hold: it reserves and holds, confirms
        # (the table becomes 'starting'), the pot moves, and the engine is never told.
        raw = await s.fetch(
            "SELECT matchmaking.join($1, $2, 'quick', '\\x00'::bytea, ARRAY[$1], 'casa-duelo',"
            " '10', NULL, $3, 'casa', '{}'::jsonb, 1000, 'USD', 2, false, NULL, ARRAY[$4],"
            " $5, $6, 60000, 8, 5)",
            "st2",
            "k-st2",
            "t-" + uuid.uuid4().hex,
            "r-st2",
            "m-unused",
            s.clock(),
        )
        assert table_id in raw[0][0]
        mm = s.matchmaker
        [res] = await mm._load_reservations(["r-st2"])
        assert await mm._hold(res) is None
        out = await mm._confirm(table_id, ["r-st2"], "m-st")
        assert out.start and out.table.status == "starting"
        assert await mm._move_pot(out.table)
        assert await s.balance("st1") == 0 and await s.balance("st2") == 0
        assert (await s.status(table_id)).status == "starting"
        # The sweeper repeats the pot move under the same key (the ledger answers it again)
        # and hands the match to the engine.
        s.clock.advance(2_000)
        counts = await mm.sweep_once()
        assert counts["starting"] == 1
        status = await s.status(table_id)
        assert status.status == "playing" and status.match_id == "m-st"
        assert all(seat.state == "staked" for seat in status.seats)
        assert list(s.engine.created) == ["m-st"]
        pots = await s.fetch("SELECT count(*) AS n FROM ledger.pots WHERE match_id = 'm-st'")
        assert pots[0]["n"] == 1
        assert await s.open_holds() == {}


async def test_refusals_from_the_join_function_change_nothing(db, internal_secret):
    async with stack(db, internal_secret) as s:
        await s.deposit("own1", 1000)
        await s.deposit("own2", 1000)
        created = await s.mm.post(
            "/v1/tables/private",
            c.CreatePrivate(idempotency_key="pv", player_id="own1", kind="apuesta-1v1", tier="10"),
            c.JoinResult,
        )
        code = created.table.invite_code or ""
        twice = c.JoinByCode(idempotency_key="again", player_id="own1", invite_code=code)
        err = await refused(s.mm.post("/v1/join/code", twice, c.JoinResult))
        assert (err.status, err.code) == (409, "already_seated")
        pair = c.JoinByCode(
            idempotency_key="pair", player_id="own2", partner_id="own3", invite_code=code
        )
        err = await refused(s.mm.post("/v1/join/code", pair, c.JoinResult))
        assert (err.status, err.code) == (400, "partner_not_pairs")
        # nothing was kept: the keys are free and the table still has one seat taken
        rows = await s.fetch(
            "SELECT idempotency_key FROM matchmaking.requests WHERE idempotency_key IN "
            "('again', 'pair')"
        )
        assert rows == []
        status = await s.status(created.table.table_id)
        assert [x.player_id for x in status.seats] == ["own1", None]
        joined = await s.mm.post(
            "/v1/join/code",
            c.JoinByCode(idempotency_key="pair", player_id="own2", invite_code=code),
            c.JoinResult,
        )
        assert joined.table.status == "playing"
        assert [x.state for x in joined.table.seats] == ["staked", "staked"]


async def test_a_pot_refused_for_one_hold_drops_that_seat_only(db, internal_secret):
    """The ledger names the unusable hold in its refusal's `refs`; matchmaking releases that
    seat and keeps the other, and the table waits again."""
    async with stack(db, internal_secret) as s:
        for p in ("pr1", "pr2"):
            await s.deposit(p, 1000)
        first = await s.quick("pr1", "casa-duelo", "10")
        table_id = first.table.table_id
        await s.fetch(
            "SELECT matchmaking.join($1, $2, 'quick', '\\x00'::bytea, ARRAY[$1], 'casa-duelo',"
            " '10', NULL, $3, 'casa', '{}'::jsonb, 1000, 'USD', 2, false, NULL, ARRAY[$4],"
            " $5, $6, 60000, 8, 5)",
            "pr2",
            "k-pr2",
            "t-" + uuid.uuid4().hex,
            "r-pr2",
            "m-unused",
            s.clock(),
        )
        mm = s.matchmaker
        [res] = await mm._load_reservations(["r-pr2"])
        assert await mm._hold(res) is None
        # pr2's hold is released behind matchmaking's back (an operator, a repair)
        await mm.ledger.post(
            "/v1/holds/release",
            ReleaseRequest(idempotency_key="rel-pr2", reservation_id="r-pr2"),
            EntryResult,
        )
        out = await mm._confirm(table_id, ["r-pr2"], "m-pr")
        assert out.start
        assert not await mm._move_pot(out.table)
        rows = await s.fetch(
            "SELECT player_id, status, reason FROM matchmaking.reservations "
            "WHERE player_id IN ('pr1', 'pr2') ORDER BY player_id"
        )
        assert [(r["player_id"], r["status"], r["reason"]) for r in rows] == [
            ("pr1", "seated", None),
            ("pr2", "released", "pot:hold_closed"),
        ]
        assert (await s.status(table_id)).status == "waiting"
