"""The ledger service takes amounts only as JSON integers: `"100"`, `1e2`, `100.0` are 400."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from ledger_helpers import key
from litestar.testing import AsyncTestClient

from services.ledger.app import create_app
from tests.conftest import make_settings
from tests.service_auth import AS_DECLARED, CallerByRoute, ledger_caller

NOT_INTEGERS = ['"100"', "1e2", "100.0"]


@pytest.fixture
async def client(url: str, internal_secret: bytes) -> AsyncIterator[AsyncTestClient[Any]]:
    app = create_app(make_settings(url, internal_secret), pool_size=2, seal_in_background=False)
    async with AsyncTestClient(app) as c:
        c.headers["Authorization"] = AS_DECLARED
        c.auth = CallerByRoute(internal_secret, "ledger", ledger_caller)
        c.headers["Content-Type"] = "application/json"
        yield c


@pytest.mark.parametrize("amount", NOT_INTEGERS)
async def test_money_bodies_refuse_amounts_that_are_not_integers(
    client: AsyncTestClient[Any], amount: str
) -> None:
    bodies = {
        "/v1/deposits": f'{{"idempotency_key": "{key()}", "player": "int_a", '
        f'"amount": {amount}, "reference": "r"}}',
        "/v1/withdrawals": f'{{"idempotency_key": "{key()}", "player": "int_a", '
        f'"amount": {amount}, "reference": "r"}}',
        "/v1/holds": f'{{"idempotency_key": "{key()}", "player": "int_a", '
        f'"reservation_id": "int-r", "amount": {amount}, "table_id": "t"}}',
    }
    for path, body in bodies.items():
        r = await client.post(path, content=body)
        assert r.status_code == 400, (path, r.text)
        assert r.json()["error"] == "invalid_request"
    assert (await client.get("/v1/wallets/int_a")).status_code == 404  # nothing posted
