"""The matchmaking baseline: no seat index depends on what a confirm changes (so it can be a
HOT update), the functions use the generated flags those indexes need, and the baseline
undoes and redoes cleanly."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from alembic import command
from alembic.config import Config

from services.common.migrate import COMPONENTS, upgrade

pytestmark = pytest.mark.slow


def _alembic(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(COMPONENTS["matchmaking"][1]))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


async def _fetch(url: str, sql: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(url)
    try:
        return list(await conn.fetch(sql))
    finally:
        await conn.close()


def _indexes(url: str, table: str) -> dict[str, str]:
    rows = asyncio.run(
        _fetch(
            url,
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'matchmaking' "
            f"AND tablename = '{table}'",
        )
    )
    return {r["indexname"]: r["indexdef"] for r in rows}


def _function_texts(url: str) -> str:
    rows = asyncio.run(
        _fetch(
            url,
            "SELECT prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = 'matchmaking'",
        )
    )
    return "\n".join(r["prosrc"] for r in rows)


def test_hot_indexes_and_a_clean_round_trip(database_url):
    upgrade(database_url, ["matchmaking"])
    seats = _indexes(database_url, "reservations")
    # A confirm changes `status` only (its `updated_ms` stays the time the seat was reserved).
    assert seats and all("status" not in d for d in seats.values())
    tables = _indexes(database_url, "tables")
    assert "taken" in tables["tables_lobby"]
    assert "is_live" in _function_texts(database_url)
    options = asyncio.run(
        _fetch(
            database_url,
            "SELECT reloptions FROM pg_class WHERE oid = 'matchmaking.reservations'::regclass",
        )
    )
    assert options[0]["reloptions"] == ["fillfactor=80"]

    command.downgrade(_alembic(database_url), "base")
    assert _function_texts(database_url) == ""
    assert _indexes(database_url, "reservations") == {}

    upgrade(database_url, ["matchmaking"])
    assert _indexes(database_url, "reservations") == seats
    assert _indexes(database_url, "tables") == tables
