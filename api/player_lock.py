"""Per-player advisory locks on the gateway database, one key space per use.

The cashier (api/cashier.py) and the seating path (`api.eligibility.seating_lock`) each hold a
player's lock from their checks until the service that moves his money has answered, so two
requests for him at the same instant cannot both pass a limit that only one fits.

A transaction-level advisory lock rather than a row lock: it needs no row (a player may have
no limits or settings row yet), blocks no writer of the player's rows, and goes with the
transaction even when the connection drops, so a crash never leaves a player locked.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from services.common.errors import ServiceError

_LOCK_NOT_AVAILABLE = "55P03"
_DEADLOCK_DETECTED = "40P01"


def player_key(player: str, use: bytes) -> int:
    """A signed 64-bit advisory lock key for `player`'s lock of this `use` (<= 16 bytes).

    PostgreSQL has one advisory key space per database, shared by everything that uses it
    (the ledger takes its own keys when it shares the database), so the key is a hash of the
    player id personalised by its use: a collision, at odds of 2**-64, only makes two
    players' requests wait for each other."""
    digest = hashlib.blake2b(player.encode(), digest_size=8, person=use).digest()
    return int.from_bytes(digest, "big", signed=True)


async def take_one(conn: AsyncConnection, key: int) -> None:
    """One lock, waiting at most the transaction's `lock_timeout`."""
    await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})


async def lock_keys(
    conn: AsyncConnection, keys: Iterable[int], wait_ms: int, busy: ServiceError
) -> None:
    """Take every key in `conn`'s transaction, until it commits or rolls back.

    Keys are taken in ascending order, the one order every caller shares, so two requests
    that need overlapping sets (two invitations with players in common) wait for each other
    instead of each holding what the other needs. Each wait is bounded by `wait_ms`: past it
    `busy` is raised, and the caller's transaction, rolled back, leaves nothing held."""
    await conn.execute(
        text("SELECT set_config('lock_timeout', :wait, true)"), {"wait": f"{wait_ms}ms"}
    )
    for key in sorted(set(keys)):
        try:
            await take_one(conn, key)
        except DBAPIError as exc:
            if getattr(exc.orig, "sqlstate", None) not in (_LOCK_NOT_AVAILABLE, _DEADLOCK_DETECTED):
                raise
            raise busy from None
