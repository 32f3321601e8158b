"""Support's player search: on a table of thousands of players each prefix the route matches
(the id, the lowercased display name) is read through its index, never the whole table; and
what support types is matched literally (`%`, `_` and `\\` are not wildcards)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from api.routes_support import search_players, search_query
from api.schema import users
from services.common.db import create_engine
from services.common.migrate import upgrade

PLAYERS = 4000
FAKE_HASH = "$argon2id$v=19$m=65536,t=3,p=4$not-a-real-hash"


@pytest.fixture(scope="module")
def gateway_db(database_url: str) -> str:
    upgrade(database_url, ["gateway"])
    return database_url


async def _add_players(engine: AsyncEngine, names: dict[str, str]) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            sa.insert(users),
            [
                {"id": i, "display_name": name, "password_hash": FAKE_HASH, "role": "player"}
                for i, name in names.items()
            ],
        )


async def _explain(conn: AsyncConnection, query: sa.Select[Any]) -> dict[str, Any]:
    """The plan PostgreSQL makes for the route's own statement: the SQL text and parameters
    the driver sends, compiled from the same expression, with EXPLAIN in front."""
    compiled = query.compile(dialect=conn.dialect)
    params = [compiled.params[name] for name in compiled.positiontup or ()]
    raw = await conn.get_raw_connection()
    driver = raw.driver_connection
    assert driver is not None
    found = await driver.fetchval("EXPLAIN (FORMAT JSON) " + compiled.string, *params)
    # the engine's connections may decode json themselves
    plan: dict[str, Any] = (json.loads(found) if isinstance(found, str) else found)[0]["Plan"]
    return plan


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes.extend(_nodes(child))
    return nodes


async def test_search_reads_both_prefixes_through_their_indexes(gateway_db):
    engine = create_engine(gateway_db)
    try:
        # display names in another order than the ids, so neither index gives the other
        await _add_players(
            engine,
            {f"p{n:05d}": f"Name{n * 7919 % PLAYERS:05d} Player" for n in range(PLAYERS)},
        )
        async with engine.begin() as conn:
            await conn.execute(sa.text("ANALYZE gateway.users"))
        for q, after in (("NAME0012", ""), ("name0012", "p01000"), ("p0001", "")):
            async with engine.connect() as conn:
                nodes = _nodes(await _explain(conn, search_query(q, after, 20)))
            assert not [n for n in nodes if n["Node Type"] == "Seq Scan"], (q, nodes)
            used = {n.get("Index Name"): n.get("Index Cond", "") for n in nodes}
            # each arm of the OR is a range scan of its own index, nothing reads every row
            assert "lower(display_name) ~>=~" in used.get("users_display_name_prefix", ""), nodes
            assert "id ~>=~" in used.get("users_id_prefix", ""), nodes
        page = await search_players(engine, "NAME0012", "", 20)
        named = [f"p{n:05d}" for n in range(PLAYERS) if n * 7919 % PLAYERS // 10 == 12]
        assert [p.id for p in page.players] == named and len(named) == 10
    finally:
        await engine.dispose()


async def test_what_support_types_is_matched_literally(gateway_db):
    engine = create_engine(gateway_db)
    try:
        await _add_players(
            engine,
            {
                "lit_a": "50% off",
                "lit_b": "500 club",
                "lit_c": "a_b",
                "lit_d": "axb",
                "lit_e": "back\\slash",
                "lit_f": "backslash",
                "lit_g": "%",
            },
        )

        async def names(q: str) -> list[str]:
            return [p.display_name for p in (await search_players(engine, q, "", 50)).players]

        assert await names("50%") == ["50% off"]
        assert await names("%") == ["%"]
        assert await names("a_") == ["a_b"]
        assert await names("back\\") == ["back\\slash"]
        assert await names("_") == []  # no id nor display name starts with "_"
        assert len(await names("lit_")) == 7
    finally:
        await engine.dispose()
