"""The engine's /health checks the pool its match log and fairness log write through."""

from __future__ import annotations

import asyncio
from typing import Any


async def test_engine_health_is_the_match_log_pool(harness_factory: Any) -> None:
    async with harness_factory() as hz:
        c = hz.client
        store_pool = c.app.state.engine_store.started_pool
        assert c.app.state.db is store_pool  # one database path
        assert (await c.get("/health")).status_code == 200
        # The pool belongs to the test client's own event loop (another thread): close it there.
        await asyncio.to_thread(c.blocking_portal.call, store_pool.close)
        assert (await c.get("/health")).status_code == 503
