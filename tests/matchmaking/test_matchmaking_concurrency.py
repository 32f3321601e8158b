"""Hundreds of simultaneous joins, retries, leaves and re-joins: the seat and money invariants."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import pytest

from services.common.http import RemoteError, ServiceUnavailable
from services.common.migrate import upgrade
from services.matchmaking import contract as c
from tests.matchmaking.mm_helpers import Stack, stack

pytestmark = pytest.mark.slow

PLAYERS = 240
DEPOSIT = 10_000
STAKE = 1000
KINDS = ["apuesta-parejas", "apuesta-trios", "apuesta-1v1"]


@pytest.fixture(scope="module")
def db(database_url: str) -> str:
    upgrade(database_url, ["ledger", "matchmaking"])
    return database_url


async def _player(s: Stack, n: int, rng: random.Random, outcomes: Counter[str]) -> None:
    player = f"cc{n}"
    kind = KINDS[n % len(KINDS)]
    try:
        if rng.random() < 0.2:
            # the same request sent twice at once: one seat, one hold
            a, b = await asyncio.gather(
                s.quick(player, kind, "10", key=f"{player}-a"),
                s.quick(player, kind, "10", key=f"{player}-a"),
                return_exceptions=True,
            )
            result = a if isinstance(a, c.JoinResult) else b
            if not isinstance(result, c.JoinResult):
                raise result  # type: ignore[misc]
        else:
            result = await s.quick(player, kind, "10", key=f"{player}-a")
        outcomes["joined"] += 1
        if rng.random() < 0.35:
            await asyncio.sleep(rng.random() * 0.02)
            await s.leave(player, result.table.table_id, key=f"{player}-l")
            outcomes["left"] += 1
            if rng.random() < 0.5:
                await s.quick(player, kind, "10", key=f"{player}-b")
                outcomes["rejoined"] += 1
    except RemoteError as exc:
        outcomes[exc.code] += 1
    except ServiceUnavailable as exc:
        outcomes[f"unavailable:{exc}"[:40]] += 1


async def test_simultaneous_joins_and_leaves_keep_every_invariant(db, internal_secret):
    async with stack(db, internal_secret, pool_size=30) as s:
        await asyncio.gather(*(s.deposit(f"cc{n}", DEPOSIT) for n in range(PLAYERS)))
        rng = random.Random(7)
        outcomes: Counter[str] = Counter()
        await asyncio.gather(*(_player(s, n, rng, outcomes) for n in range(PLAYERS)))
        # Every table that filled has started without the sweeper's help.
        stuck = await s.fetch(
            "SELECT id FROM matchmaking.tables WHERE status <> 'playing' AND taken = seat_count"
        )
        assert stuck == []
        # Finish anything a refusal or race left half-done, as the background sweeper would.
        s.clock.advance(10_000)
        counts = await s.matchmaker.sweep_once()
        assert counts["full"] == counts["starting"] == counts["started"] == 0, counts

        print("outcomes", dict(outcomes))
        assert outcomes["joined"] >= PLAYERS * 0.9, outcomes
        allowed = {"joined", "left", "rejoined", "table_started", "reservation_pending"}
        assert set(outcomes) <= allowed, outcomes

        # Seats: never overfilled, nobody twice at a table, the counter matches the rows.
        tables = await s.fetch(
            "SELECT id, seat_count, taken, status, match_id FROM matchmaking.tables"
        )
        live = await s.fetch(
            "SELECT id, table_id, seat, player_id, status, stake_cents FROM matchmaking.reservations "
            "WHERE status IN ('pending','seated','staked')"
        )
        assert not [r for r in live if r["status"] == "pending"]
        leftovers = await s.fetch(
            "SELECT id FROM matchmaking.reservations WHERE status IN ('pending','releasing')"
        )
        assert leftovers == []
        by_table: dict[str, list] = {}
        for r in live:
            by_table.setdefault(r["table_id"], []).append(r)
        for t in tables:
            rows = by_table.get(t["id"], [])
            assert len(rows) == t["taken"] <= t["seat_count"]
            assert len({r["seat"] for r in rows}) == len(rows)
            assert len({r["player_id"] for r in rows}) == len(rows)
            if t["status"] in ("started", "playing"):
                assert len(rows) == t["seat_count"]
                assert all(r["status"] == "staked" for r in rows)
                assert t["match_id"] in s.engine.created
            else:
                assert t["status"] == "waiting"
                assert all(r["status"] == "seated" for r in rows)
        started = [t for t in tables if t["status"] == "playing"]
        assert len(started) >= 20

        # Money: holds == seated seats exactly; pots == staked seats; nothing created or lost.
        holds = await s.open_holds()
        seated = {r["id"]: r["stake_cents"] for r in live if r["status"] == "seated"}
        assert holds == seated
        pots = await s.fetch(
            "SELECT p.match_id, a.balance, p.stake_total FROM ledger.pots p "
            "JOIN ledger.accounts a ON a.id = p.account_id"
        )
        pot_by_match = {p["match_id"]: p["balance"] for p in pots}
        assert set(pot_by_match) == {t["match_id"] for t in started}
        for t in started:
            assert pot_by_match[t["match_id"]] == t["seat_count"] * STAKE
        stakes = await s.fetch("SELECT match_id, player FROM ledger.stakes")
        staked_rows = {(t["match_id"], r["player_id"]) for t in started for r in by_table[t["id"]]}
        assert {(x["match_id"], x["player"]) for x in stakes} == staked_rows
        wallets = await s.fetch(
            "SELECT player, balance FROM ledger.accounts WHERE kind = 'wallet' AND player LIKE 'cc%'"
        )
        per_player = Counter(r["player_id"] for r in live)
        for w in wallets:
            assert w["balance"] == DEPOSIT - STAKE * per_player[w["player"]], w["player"]
        total = (
            sum(w["balance"] for w in wallets) + sum(holds.values()) + sum(pot_by_match.values())
        )
        assert total == DEPOSIT * PLAYERS
