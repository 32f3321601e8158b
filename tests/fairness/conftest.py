"""Fixtures for the fairness tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from fairness.keys import OperatorKey
from fairness.log_store import LogStore
from fairness.transcript import Transcript
from services.common.db import create_pool
from services.common.migrate import upgrade
from tests.fairness.fairness_helpers import example_key, make_transcript


@pytest.fixture
def operator_key() -> OperatorKey:
    return example_key()


@pytest.fixture
def transcript(operator_key: OperatorKey) -> Transcript:
    return make_transcript(operator_key)


@pytest.fixture(scope="module")
def migrated(database_url: str) -> str:
    """The module's fresh database with the fairness schema."""
    upgrade(database_url, ["fairness"])
    return database_url


@pytest.fixture
async def store(migrated: str, operator_key: OperatorKey) -> AsyncIterator[LogStore]:
    """The transparency log in PostgreSQL, with the operator key registered."""
    pool = await create_pool(migrated, application_name="fairness-test", max_size=4)
    s = LogStore(pool, operator_key)
    await s.register_key()
    yield s
    await s.aclose()
    await pool.close()
