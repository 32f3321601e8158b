"""Many workers on the same wallets and one hot pot: no negative balance, no double
settlement, no deadlock surfaced, and the books still add up."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator

import asyncpg
import pytest
from ledger_helpers import funded, key, superuser

from ledger import reports
from ledger.batch import GroupCommit
from ledger.errors import LedgerError
from ledger.ops import APP_ROLE, SQL, Ledger, Seat, Winner, plain_dsn

WORKERS = 24
OPS_PER_WORKER = 40


@pytest.fixture
async def ledger(url: str) -> AsyncIterator[Ledger]:
    ledger = await Ledger.connect(url, min_size=4, max_size=24)
    try:
        yield ledger
    finally:
        await ledger.close()


@pytest.mark.parametrize("grouped", [False, True], ids=["alone", "group_commit"])
async def test_hammering_wallets_and_one_hot_pot(ledger: Ledger, url: str, grouped: bool) -> None:
    """Alone: every operation its own call. Group commit: as the service runs them, several
    to a transaction (`ledger.post_batch`), which must keep the same guarantees, deadlocks
    included: a batch takes its row locks in the one global order too."""
    # small batches, so that several calls run at once (a call opens when half a batch waits)
    group = GroupCommit(ledger, max_batch=4) if grouped else None
    if group is not None:
        ledger.runner = group.call
    tag = "ccg" if grouped else "cc"  # one database for the module: ids of their own
    hot = f"{tag}-hot"
    players = [f"{tag}_p{i}" for i in range(6)]
    for p in players:
        await funded(ledger, p, 2_000)
    # a hot match everybody tries to settle or void at once
    for seat, p in enumerate(players[:4]):
        await ledger.hold(key(), p, f"{hot}-r{seat}", 100)
    await ledger.start_match(
        key(),
        hot,
        "gold",
        "cubana",
        [Seat(s, p, f"{hot}-r{s}") for s, p in enumerate(players[:4])],
    )
    unexpected: list[str] = []
    closings: list[str] = []
    rng = random.Random(7)

    async def worker(w: int) -> None:
        for i in range(OPS_PER_WORKER):
            player = rng.choice(players)
            other = rng.choice([p for p in players if p != player])
            op = rng.random()
            try:
                if op < 0.45:
                    r = f"{tag}-w{w}-{i}"
                    await ledger.hold(key(), player, r, rng.randint(1, 400))
                    if rng.random() < 0.5:
                        await ledger.release(key(), r)
                elif op < 0.6:
                    await ledger.withdraw(key(), player, rng.randint(1, 300))
                elif op < 0.7:
                    await ledger.deposit(key(), player, rng.randint(1, 300))
                elif op < 0.8:
                    # a two-seat match between two players, settled at once
                    m = f"{tag}-m{w}-{i}"
                    await ledger.hold(key(), player, m + "-a", 50)
                    await ledger.hold(key(), other, m + "-b", 50)
                    await ledger.start_match(
                        key(),
                        m,
                        "bronze",
                        "casa",
                        [Seat(0, player, m + "-a"), Seat(1, other, m + "-b")],
                    )
                    await ledger.settle_match(key(), m, [Winner(rng.choice([player, other]))], 1000)
                else:
                    if rng.random() < 0.5:
                        await ledger.settle_match(key(), hot, [Winner(players[w % 4])], 1000)
                        closings.append("settle")
                    else:
                        await ledger.void_match(key(), hot)
                        closings.append("void")
            except LedgerError as exc:
                if exc.code not in (
                    "insufficient_funds",
                    "match_already_settled",
                    "match_already_voided",
                    "hold_closed",
                ):
                    unexpected.append(f"{exc.status} {exc.code}: {exc.detail}")

    await asyncio.gather(*(worker(w) for w in range(WORKERS)))
    assert unexpected == []
    if group is not None:
        # the run really grouped operations, and ran several calls at once
        assert group.operations > group.calls * 2, (group.operations, group.calls)
        assert group.most_in_flight > 1
    assert len(closings) == 1, closings  # the hot pot closed exactly once

    admin = await superuser(url)
    try:
        negative = await admin.fetchval(
            "SELECT count(*) FROM ledger.postings p JOIN ledger.accounts a ON a.id = p.account_id "
            "WHERE a.kind <> 'cashier' AND p.balance_after < 0"
        )
        assert negative == 0
        closes = await admin.fetchval(
            "SELECT count(*) FROM ledger.entries WHERE match_id = $1 AND kind IN ('settle', 'void')",
            hot,
        )
        assert closes == 1
        deadlocks = await admin.fetchval(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        )
        assert deadlocks == 0
        report = await reports.reconcile(admin)
        assert report["ok"], report["discrepancies"]
    finally:
        await admin.close()


async def test_start_match_never_waits_on_wallet_locks(ledger: Ledger, url: str) -> None:
    """Regression for the rare deadlock of the hammer test. `start_match` locks only the holds
    and the pot, but its `stakes` rows reference the wallets, and the foreign-key check takes
    KEY SHARE on each wallet in seat order, not id order. While posters locked accounts with
    FOR UPDATE (which conflicts with KEY SHARE), a start could hold one wallet's KEY SHARE and
    wait on the next wallet while a void of another match held that wallet and waited on the
    first: a cycle outside the sorted order. Posters now lock FOR NO KEY UPDATE, which does not
    conflict with KEY SHARE, so a start never waits on wallet locks at all; `lock_timeout`
    turns any such wait into an error instead of a slow test."""
    players = ["dl_a", "dl_b"]
    for p in players:
        await funded(ledger, p, 1_000)
    # seat order against id order: the wallet created last sits first
    seats = [Seat(0, "dl_b", "dl-m-r0"), Seat(1, "dl_a", "dl-m-r1")]
    for s in seats:
        await ledger.hold(key(), s.player, s.reservation_id, 100)
    args = ledger.start_args(key(), "dl-m", "bronze", "casa", seats, "USD")
    blocker = await asyncpg.connect(plain_dsn(url), server_settings={"role": APP_ROLE})
    starter = await asyncpg.connect(plain_dsn(url), server_settings={"role": APP_ROLE})
    admin = await superuser(url)
    try:
        deadlocks_before = await admin.fetchval(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        )
        wallets = await admin.fetchval(
            "SELECT array_agg(id ORDER BY id) FROM ledger.accounts WHERE code = ANY($1)",
            [f"wallet:{p}" for p in players],
        )
        async with blocker.transaction():
            # another poster (e.g. a void paying both players) holds both wallets' row locks
            await blocker.execute("SELECT ledger._lock($1)", wallets)
            await starter.execute("SET lock_timeout = '5s'")
            raw = await starter.fetchval(SQL["start"], *args)
        assert '"kind":"start"' in raw.replace(" ", "")
        deadlocks_after = await admin.fetchval(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        )
        assert deadlocks_after == deadlocks_before
    finally:
        await blocker.close()
        await starter.close()
        await admin.close()
