"""The engine's match spec carries the stake in cents: a JSON integer only, as everywhere."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.engine.engine_helpers import auth, spec


@pytest.mark.parametrize("stake", ['"2000"', "2e3", "2000.0"])
async def test_stake_that_is_not_an_integer_is_refused(
    harness_factory: Any, internal_secret: bytes, stake: str
) -> None:
    body = json.dumps(spec("intstake", "apuesta", {"mode": "1v1"}, 2, tier="20"))
    raw = body[:-1] + f', "stake_cents": {stake}}}'
    headers = {**auth(internal_secret), "Content-Type": "application/json"}
    async with harness_factory() as hz:
        r = await hz.client.post("/internal/matches", content=raw, headers=headers)
        assert r.status_code == 400, r.text
        assert r.json()["error"] == "invalid_request"
        assert (await hz.client.get("/internal/matches/intstake", headers=headers)).status_code == (
            404
        )
