"""Money amounts are JSON integers: `"100"`, `1e2` and `100.0` are refused with 400 and change
nothing, at the public cashier routes and at the services behind them (Litestar's own body
conversion is lax: services.common.strict_json)."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.common.migrate import upgrade
from tests.api.api_helpers import bearer, make_user
from tests.api.platform_stack import COMPONENTS, platform

# Raw JSON, so the number forms reach the server exactly as written.
NOT_INTEGERS = ['"100"', "1e2", "100.0"]


@pytest.fixture(scope="module")
def platform_db(database_url: str) -> str:
    upgrade(database_url, COMPONENTS)
    return database_url


async def test_cashier_routes_take_only_integer_cents(
    platform_db: str, internal_secret: bytes, tmp_path: Path
) -> None:
    await make_user(platform_db, "cash1")
    await make_user(platform_db, "fin1", "finance")
    async with platform(platform_db, internal_secret, tmp_path) as stack, stack.client() as c:
        headers = {**await bearer(c, "fin1"), "Content-Type": "application/json"}
        for path in ("/api/finance/deposits", "/api/finance/withdrawals"):
            for n, amount in enumerate(NOT_INTEGERS):
                body = (
                    f'{{"player": "cash1", "amount": {amount}, "reference": "r{n}", '
                    f'"idempotency_key": "int-test-{path[-6:]}-{n}"}}'
                )
                r = await c.post(path, content=body, headers=headers)
                assert r.status_code == 400, (path, amount, r.text)
                assert r.json()["error"] == "invalid_request"
        # The integer itself is taken, and is all the wallet holds: nothing was posted above.
        r = await c.post(
            "/api/finance/deposits",
            content='{"player": "cash1", "amount": 100, "reference": "ok"}',
            headers=headers,
        )
        assert r.status_code == 200 and r.json()["balance"] == 100, r.text
