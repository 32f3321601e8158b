"""Fixtures of the ledger tests: the module's database migrated, and a library client."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from ledger_helpers import migrate

from ledger.ops import Ledger


@pytest.fixture(scope="module")
def url(database_url: str) -> str:
    return migrate(database_url)


@pytest.fixture
async def ledger(url: str) -> AsyncIterator[Ledger]:
    ledger = await Ledger.connect(url, min_size=1, max_size=4)
    try:
        yield ledger
    finally:
        await ledger.close()
