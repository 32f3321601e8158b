from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from services.common.migrate import upgrade
from services.engine.app import create_app
from services.engine.clock import ManualClock
from services.engine.ports import MemoryLedger
from services.engine.service import Engine
from tests.conftest import make_settings
from tests.engine.engine_helpers import write_key
from tests.service_auth import CallerByRoute, engine_caller


@pytest.fixture(scope="module")
def engine_db(database_url: str) -> str:
    upgrade(database_url, ["fairness", "engine"])
    return database_url


@pytest.fixture(scope="module")
def key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_key(tmp_path_factory.mktemp("key") / "operator_key.pem")


class Harness:
    def __init__(
        self, client: AsyncTestClient[Any], clock: ManualClock, ledger: MemoryLedger
    ) -> None:
        self.client = client
        self.clock = clock
        self.ledger = ledger

    @property
    def engine(self) -> Engine:
        engine: Engine = self.client.app.state.engine
        return engine


@pytest.fixture
def harness_factory(engine_db: str, internal_secret: bytes, key_file: Path) -> Callable[..., Any]:
    @asynccontextmanager
    async def make(
        clock: ManualClock | None = None, ledger: MemoryLedger | None = None, scan: bool = False
    ) -> AsyncIterator[Harness]:
        clock = clock or ManualClock()
        ledger = ledger or MemoryLedger()
        settings = make_settings(engine_db, internal_secret, operator_key_file=key_file)
        app = create_app(settings, clock=clock, ledger=ledger, scan=scan)
        async with AsyncTestClient(app) as client:
            client.auth = CallerByRoute(internal_secret, "engine", engine_caller)
            yield Harness(client, clock, ledger)

    return make
