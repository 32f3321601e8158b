"""A match whose last fairness record the transparency log did not take is neither settled nor
closed until it is logged, and its actor tries again on a timer (nothing else may wake it)."""

from __future__ import annotations

from typing import Any

import pytest

from fairness.log_store import LogError
from services.engine.service import OUTBOX_RETRY_MS
from tests.engine.engine_helpers import auth, drive, spec

MATCHES = {
    # a player's action ends it, and the steps that follow it find the record pending
    "fo-players": spec("fo-players", "apuesta", {"mode": "1v1"}, 2),
    # most often a CPU player's move ends it, inside the engine's own steps
    "fo-cpus": spec("fo-cpus", "casa", {"players": 4}, 4, bots=(1, 2, 3)),
}


@pytest.mark.parametrize("match_id", sorted(MATCHES))
async def test_a_match_closes_only_once_its_last_fairness_record_is_logged(
    harness_factory: Any, internal_secret: bytes, match_id: str
) -> None:
    h = auth(internal_secret)
    async with harness_factory() as hz:
        r = await hz.client.post("/internal/matches", json=MATCHES[match_id], headers=h)
        assert r.status_code == 200, r.text
        engine = hz.engine
        actor = engine.actors[match_id]
        log_append = engine.fairness.append
        refusing = {"on": True}

        async def append(envelope: Any) -> None:
            # The log is down from the moment the match is over: its last result is pending.
            if actor.match.over and refusing["on"]:
                raise LogError("transparency log unavailable")
            await log_append(envelope)

        engine.fairness.append = append  # type: ignore[method-assign]

        def state() -> tuple[bool, int, int | None]:
            # Read from the test's thread once a request through the actor has returned (the
            # app runs on its own event loop): the actor's steps have run by then.
            return actor.closed, len(actor.match.outbox), actor._wake_at()

        final = await drive(hz.client, engine, match_id, h)
        assert final["status"] == "finished"
        assert (await hz.client.get(f"/internal/matches/{match_id}", headers=h)).status_code == 200
        closed, pending, wake_at = state()
        assert not closed and pending >= 1
        assert wake_at == hz.clock.now_ms() + OUTBOX_RETRY_MS  # no timer of its own is left
        refusing["on"] = False
        hz.clock.advance(OUTBOX_RETRY_MS)
        assert (await hz.client.get(f"/internal/matches/{match_id}", headers=h)).status_code == 200
        closed, pending, wake_at = state()
        assert closed and pending == 0 and wake_at is None
