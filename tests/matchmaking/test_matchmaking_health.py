"""/health checks the pool that serves the service's traffic: when that pool cannot answer,
the service reports 503 instead of 200 from a pool that serves nothing."""

from __future__ import annotations

import httpx
import pytest
from litestar import Litestar

from services.common.migrate import upgrade
from tests.matchmaking.mm_helpers import stack


@pytest.fixture(scope="module")
def db(database_url: str) -> str:
    upgrade(database_url, ["ledger", "matchmaking"])
    return database_url


async def _health(app: Litestar) -> int:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://svc"
    ) as client:
        return (await client.get("/health")).status_code


async def test_matchmaking_health_is_the_join_pool(db: str, internal_secret: bytes) -> None:
    async with stack(db, internal_secret) as s:
        assert s.app.state.db is s.matchmaker.db  # one database path
        assert await _health(s.app) == 200
        await s.matchmaker.db.close()  # the pool that serves joins is gone
        assert await _health(s.app) == 503


async def test_ledger_health_is_the_posting_pool(db: str, internal_secret: bytes) -> None:
    from services.ledger.app import create_app
    from tests.conftest import make_settings

    app = create_app(make_settings(db, internal_secret), seal_in_background=False)
    async with app.lifespan():
        assert app.state.db is app.state.ledger.pool
        assert await _health(app) == 200
        await app.state.ledger.pool.close()
        assert await _health(app) == 503
