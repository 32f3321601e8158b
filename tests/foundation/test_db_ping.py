"""The pool's connection check: one round trip per checkout, and a connection PostgreSQL dropped is
replaced on checkout instead of failing the request that drew it."""

from __future__ import annotations

import asyncpg
from sqlalchemy import text

from services.common.db import asyncpg_dsn, create_engine


async def _backend_pids(database_url: str, application_name: str) -> list[int]:
    conn = await asyncpg.connect(asyncpg_dsn(database_url))
    try:
        rows = await conn.fetch(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1", application_name
        )
        return [int(r["pid"]) for r in rows]
    finally:
        await conn.close()


async def _terminate(database_url: str, pids: list[int]) -> None:
    conn = await asyncpg.connect(asyncpg_dsn(database_url))
    try:
        for pid in pids:
            # waits (up to 5 s) until the backend is gone
            assert await conn.fetchval("SELECT pg_terminate_backend($1, 5000)", pid)
    finally:
        await conn.close()


async def test_pool_check_replaces_a_dropped_connection(database_url: str) -> None:
    name = "mesa-light-ping-test"
    engine = create_engine(database_url, application_name=name, pool_size=1)
    try:
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT 1"))).scalar_one() == 1
        pids = await _backend_pids(database_url, name)
        assert len(pids) == 1  # the pooled connection, idle
        await _terminate(database_url, pids)
        async with engine.connect() as conn:  # the dead one is found at checkout, not here
            assert (await conn.execute(text("SELECT 2"))).scalar_one() == 2
        after = await _backend_pids(database_url, name)
        assert len(after) == 1 and after != pids
        async with engine.begin() as conn:  # transactions work as before
            assert (await conn.execute(text("SELECT 3"))).scalar_one() == 3
    finally:
        await engine.dispose()
