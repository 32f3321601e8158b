"""The engine's integrity feed pages its finished matches oldest first or newest first, a
cursor carrying each read on where the page ended; both reads cover the same matches (ties on
the close time broken by match id). Real PostgreSQL with the engine's schema."""

from __future__ import annotations

import datetime as dt

import asyncpg
import pytest

from services.common.migrate import upgrade
from services.engine.integrity_feed import (
    _FINISHED_PAGE,
    _FINISHED_PAGE_NEWEST_FIRST,
    _finished_page,
    _next_cursor,
)

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


async def test_both_reads_go_through_the_finished_index(engine_db: str) -> None:
    """A page is read from the index on finished matches by close time, not by scanning
    every closed match (the table holds one row per match ever played)."""
    pool = await asyncpg.create_pool(engine_db, min_size=1, max_size=1)
    try:
        await pool.execute(
            "INSERT INTO engine.matches (match_id, spec)"
            " SELECT 'fx-' || i, '{}' FROM generate_series(1, 4000) i"
        )
        await pool.execute(
            "INSERT INTO engine.match_closed (match_id, status, closed_at)"
            " SELECT 'fx-' || i, CASE WHEN i % 10 = 0 THEN 'void' ELSE 'finished' END,"
            " $1::timestamptz + i * interval '1 minute' FROM generate_series(1, 4000) i",
            T0,
        )
        await pool.execute("ANALYZE engine.matches")
        await pool.execute("ANALYZE engine.match_closed")
        since = T0 + dt.timedelta(days=2)
        for sql, after in ((_FINISHED_PAGE, T0), (_FINISHED_PAGE_NEWEST_FIRST, None)):
            plan = "\n".join(r[0] for r in await pool.fetch("EXPLAIN " + sql, since, after, "", 50))
            assert "match_closed_finished_at" in plan, plan
            assert "Seq Scan on match_closed" not in plan, plan
    finally:
        await pool.close()
