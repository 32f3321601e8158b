"""Helpers shared by the ledger tests (imported by name; tests/ledger has no package)."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from ledger.errors import LedgerError
from ledger.ops import Ledger, Seat
from services.common.migrate import upgrade


def migrate(database_url: str) -> str:
    upgrade(database_url, ["ledger"])
    return database_url


def key(prefix: str = "k") -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


async def superuser(url: str) -> asyncpg.Connection:
    return await asyncpg.connect(url)


async def funded(ledger: Ledger, player: str, cents: int) -> None:
    await ledger.open_wallet(player)
    await ledger.deposit(key("dep"), player, cents, "USD", "test funding")


async def seated_match(
    ledger: Ledger, match_id: str, players: list[str], stake: int, tier: str = "bronze"
) -> list[Seat]:
    seats = []
    for seat, player in enumerate(players):
        reservation = f"{match_id}-r{seat}"
        await ledger.hold(key("hold"), player, reservation, stake, "USD", match_id)
        seats.append(Seat(seat, player, reservation))
    await ledger.start_match(key("start"), match_id, tier, "dominicana", seats)
    return seats


async def balance(ledger: Ledger, code: str) -> int:
    acc = await ledger.account(code)
    if acc is None:
        raise KeyError(code)
    return int(acc["balance"])


async def entry_count(url: str) -> int:
    conn = await superuser(url)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM ledger.entries"))
    finally:
        await conn.close()


async def refused(coro: object, status: int, code: str) -> LedgerError:
    """Await `coro`, which must be refused with this status and machine-readable code."""
    with pytest.raises(LedgerError) as info:
        await coro  # type: ignore[misc]
    if (info.value.status, info.value.code) != (status, code):
        raise AssertionError(f"expected {status} {code}, got {info.value}")
    return info.value
