"""The engine's transparency-log writer: appends of many matches share transactions, and one
refused record fails only its own caller."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fairness.flow import void_deal
from fairness.keys import OperatorKey
from fairness.log_store import LogError
from services.common.db import create_pool
from services.engine.ports import PgFairnessLog
from tests.fairness.fairness_helpers import opened_deal

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@asynccontextmanager
async def started_log(engine_db: str) -> AsyncIterator[tuple[OperatorKey, PgFairnessLog]]:
    key = OperatorKey(Ed25519PrivateKey.generate())
    db = await create_pool(engine_db, application_name="fairness-writer-test", max_size=4)
    log = PgFairnessLog(db, key)
    try:
        await log.start()
        yield key, log
    finally:
        await log.aclose()
        await db.close()


async def test_concurrent_appends_are_all_logged_once(engine_db: str) -> None:
    async with started_log(engine_db) as (key, log):
        size0, _ = await log.store.head()
        opened = [opened_deal(key, f"fw-{i}") for i in range(20)]
        await asyncio.gather(*(log.append(o.commitment) for o in opened))
        # a record the log already holds (re-sent after a restart) is acknowledged, and the
        # closing records of other deals in the same batch still go in
        again = [log.append(opened[0].commitment)]
        closes = [log.append(void_deal(key, o, "match_void", T0)) for o in opened[:5]]
        await asyncio.gather(*again, *closes)
        size, _ = await log.store.head()
        assert size == size0 + 25
        for o in opened:
            await log.store.commitment_index(o.deal_id)


async def test_a_refused_record_fails_only_its_caller(engine_db: str) -> None:
    async with started_log(engine_db) as (key, log):
        size0, _ = await log.store.head()
        good = [opened_deal(key, f"fw-ok-{i}") for i in range(3)]
        forged = dict(opened_deal(key, "fw-forged").commitment, signature="00" * 64)
        results = await asyncio.gather(
            *(log.append(o.commitment) for o in good), log.append(forged), return_exceptions=True
        )
        assert results[:3] == [None, None, None]
        assert isinstance(results[3], LogError)
        size, _ = await log.store.head()
        assert size == size0 + 3
        with pytest.raises(LogError):
            await log.store.commitment_index("fw-forged")
