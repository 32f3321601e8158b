"""The engine's integrity feed pages its finished matches oldest first or newest first, a
cursor carrying each read on where the page ended; both reads cover the same matches (ties on
the close time broken by match id). Real PostgreSQL with the engine's schema."""

from __future__ import annotations

import datetime as dt

import asyncpg
import pytest

from services.common.migrate import upgrade
from services.engine.integrity_feed import _finished_page, _next_cursor

T0 = dt.datetime(2026, 11, 1, 12, tzinfo=dt.UTC)
# (match, minutes after T0, status): two share a close time; a void one is never served
CLOSED = [
    ("fo-a", 0, "finished"),
    ("fo-b", 1, "finished"),
    ("fo-c", 1, "finished"),
    ("fo-d", 2, "void"),
    ("fo-e", 3, "finished"),
    ("fo-f", 4, "finished"),
]


@pytest.fixture(scope="module")
def engine_db(database_url: str) -> str:
    upgrade(database_url, ["engine"])
    return database_url


async def _read(pool: asyncpg.Pool, since: str, newest_first: bool) -> list[list[str]]:
    pages: list[list[str]] = []
    after: str | None = None
    for _ in range(10):
        rows = await _finished_page(pool, since, after, 2, newest_first)
        pages.append([r["match_id"] for r in rows])
        if len(rows) < 2:
            break
        after = _next_cursor(rows)
    return pages


async def test_pages_read_oldest_or_newest_first_with_their_cursor(engine_db: str) -> None:
    pool = await asyncpg.create_pool(engine_db, min_size=1, max_size=2)
    try:
        for match_id, minutes, status in CLOSED:
            await pool.execute(
                "INSERT INTO engine.matches (match_id, spec) VALUES ($1, '{}')", match_id
            )
            await pool.execute(
                "INSERT INTO engine.match_closed (match_id, status, closed_at) VALUES ($1, $2, $3)",
                match_id,
                status,
                T0 + dt.timedelta(minutes=minutes),
            )
        since = (T0 + dt.timedelta(seconds=30)).isoformat()  # fo-a closed before the window
        assert await _read(pool, since, False) == [["fo-b", "fo-c"], ["fo-e", "fo-f"], []]
        assert await _read(pool, since, True) == [["fo-f", "fo-e"], ["fo-c", "fo-b"], []]
        everything = T0.isoformat()
        assert await _read(pool, everything, True) == [["fo-f", "fo-e"], ["fo-c", "fo-b"], ["fo-a"]]
    finally:
        await pool.close()
