"""What the race tests of the per-player advisory locks (api.player_lock) share: waiting for a
state of the system, and counting the requests queued on a lock in `pg_locks`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine


async def lock_waiters(su: AsyncEngine, keys: Iterable[int]) -> int:
    """Requests waiting for one of these advisory lock keys (a bigint key shows in pg_locks
    as its high and low 32 bits, objsubid 1)."""
    waiting = 0
    async with su.connect() as conn:
        for signed in keys:
            key = signed & 0xFFFF_FFFF_FFFF_FFFF
            found = await conn.execute(
                text(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                    "AND objsubid = 1 AND classid::bigint = :hi AND objid::bigint = :lo"
                ),
                {"hi": key >> 32, "lo": key & 0xFFFF_FFFF},
            )
            waiting += int(found.scalar_one())
    return waiting


async def until(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    """Await a state of the system (bounded), polling it."""
    for _ in range(2000):
        if await condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never happened: {what}")
