"""Many workers on the same wallets and one hot pot: no negative balance, no double
settlement, no deadlock surfaced, and the books still add up."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator

import pytest
from ledger_helpers import funded, key, superuser

from ledger import reports
from ledger.errors import LedgerError
from ledger.ops import Ledger, Seat, Winner

PLAYERS = [f"cc_p{i}" for i in range(6)]
WORKERS = 24
OPS_PER_WORKER = 40


@pytest.fixture
async def ledger(url: str) -> AsyncIterator[Ledger]:
    ledger = await Ledger.connect(url, min_size=4, max_size=24)
    try:
        yield ledger
    finally:
        await ledger.close()


async def test_hammering_wallets_and_one_hot_pot(ledger: Ledger, url: str) -> None:
    for p in PLAYERS:
        await funded(ledger, p, 2_000)
    # a hot match everybody tries to settle or void at once
    for seat, p in enumerate(PLAYERS[:4]):
        await ledger.hold(key(), p, f"cc-hot-r{seat}", 100)
    await ledger.start_match(
        key(),
        "cc-hot",
        "gold",
        "cubana",
        [Seat(s, p, f"cc-hot-r{s}") for s, p in enumerate(PLAYERS[:4])],
    )
    unexpected: list[str] = []
    closings: list[str] = []
    rng = random.Random(7)

    async def worker(w: int) -> None:
        for i in range(OPS_PER_WORKER):
            player = rng.choice(PLAYERS)
            other = rng.choice([p for p in PLAYERS if p != player])
            op = rng.random()
            try:
                if op < 0.45:
                    r = f"cc-w{w}-{i}"
                    await ledger.hold(key(), player, r, rng.randint(1, 400))
                    if rng.random() < 0.5:
                        await ledger.release(key(), r)
                elif op < 0.6:
                    await ledger.withdraw(key(), player, rng.randint(1, 300))
                elif op < 0.7:
                    await ledger.deposit(key(), player, rng.randint(1, 300))
                elif op < 0.8:
                    # a two-seat match between two players, settled at once
                    m = f"cc-m{w}-{i}"
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
                        await ledger.settle_match(key(), "cc-hot", [Winner(PLAYERS[w % 4])], 1000)
                        closings.append("settle")
                    else:
                        await ledger.void_match(key(), "cc-hot")
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
    assert len(closings) == 1, closings  # the hot pot closed exactly once

    admin = await superuser(url)
    try:
        negative = await admin.fetchval(
            "SELECT count(*) FROM ledger.postings p JOIN ledger.accounts a ON a.id = p.account_id "
            "WHERE a.kind <> 'cashier' AND p.balance_after < 0"
        )
        assert negative == 0
        closes = await admin.fetchval(
            "SELECT count(*) FROM ledger.entries WHERE match_id = 'cc-hot' AND kind IN ('settle', 'void')"
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
