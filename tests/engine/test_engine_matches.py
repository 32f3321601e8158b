"""Full matches of every variant and mode through the service API with scripted players."""

from __future__ import annotations

from typing import Any

import pytest

from tests.engine.engine_helpers import auth, drive, spec

VARIANTS: list[tuple[str, dict[str, Any], int]] = [
    ("dominicana", {"mode": "2v2"}, 4),
    ("dominicana", {"mode": "1v1"}, 2),
    ("cubana", {"preset": "habana"}, 4),
    ("cubana", {"preset": "miami"}, 4),
    ("cubana", {"preset": "oriente"}, 4),
    ("cubana", {"preset": "barrio"}, 4),
    ("casa", {"players": 4}, 4),
    ("casa", {"players": 2}, 2),
    ("casa", {"players": 4, "pairs": False, "scoring": "hands"}, 4),
    ("apuesta", {"mode": "parejas"}, 4),
    ("apuesta", {"mode": "1v1"}, 2),
    ("apuesta", {"mode": "trios"}, 3),
]


@pytest.mark.parametrize(("variant", "options", "seats"), VARIANTS)
async def test_engine_full_match(
    harness_factory: Any, internal_secret: bytes, variant: str, options: dict[str, Any], seats: int
) -> None:
    h = auth(internal_secret)
    mid = f"full-{variant}-{'-'.join(str(v) for v in options.values())}"
    async with harness_factory() as hz:
        r = await hz.client.post(
            "/internal/matches", json=spec(mid, variant, options, seats), headers=h
        )
        assert r.status_code == 200, r.text
        st = await drive(hz.client, hz.engine, mid, h)
        assert st["status"] == "finished"
        assert st["result"]["winners"]
        assert st["result"]["settled"] is True


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize(("variant", "options", "seats"), VARIANTS)
async def test_engine_views_never_leak_in_random_matches(
    harness_factory: Any,
    internal_secret: bytes,
    variant: str,
    options: dict[str, Any],
    seats: int,
    seed: int,
) -> None:
    """Random legal play (redeal requests and Salgo / Sal tu included); every seat's view and
    every event page it receives, after every action, holds no other seat's tiles, no stock
    or dormidas and no server seed while the hand is open."""
    import random

    h = auth(internal_secret)
    mid = f"rnd{seed}-{variant}-{'-'.join(str(v) for v in options.values())}"
    async with harness_factory() as hz:
        r = await hz.client.post(
            "/internal/matches", json=spec(mid, variant, options, seats), headers=h
        )
        assert r.status_code == 200, r.text
        st = await drive(
            hz.client, hz.engine, mid, h, rng=random.Random(seed), watch_all_seats=True
        )
        assert st["status"] == "finished"


@pytest.mark.parametrize("preset", ["habana", "miami", "oriente", "barrio"])
async def test_engine_cuban_kinds_play_to_the_end_against_the_cpu(
    harness_factory: Any, internal_secret: bytes, preset: str
) -> None:
    """Every Cuban kind at a free table, one player and three CPU seats: the CPU answers the
    opening draw, the secret "Salgo / Sal tú" choice (on either side, partner of the player or
    not), redeals and plays, to the end of the match (Miami: the whole series)."""
    h = auth(internal_secret)
    mid = f"cpu-{preset}"
    async with harness_factory() as hz:
        body = spec(mid, "cubana", {"preset": preset}, 4, bots=(1, 2, 3))
        r = await hz.client.post("/internal/matches", json=body, headers=h)
        assert r.status_code == 200, r.text
        st = await drive(hz.client, hz.engine, mid, h)
        assert st["status"] == "finished" and st["result"]["reason"] == "target", st
        assert [s["bot"] for s in st["seats"]] == [False, True, True, True]
        events: list[dict[str, Any]] = []
        more = True
        while more:
            after = events[-1]["seq"] if events else 0
            page = (
                await hz.client.get(
                    f"/internal/matches/{mid}/seats/0/events", params={"after": after}, headers=h
                )
            ).json()
            events += page["events"]
            more = page["more"]
        kinds = [e["kind"] for e in events]
        assert "hand_ended" in kinds
        bot_plays = [e for e in events if e["kind"] == "play" and e["data"]["by"] == "bot"]
        assert {e["data"]["seat"] for e in bot_plays} == {1, 2, 3}
        if preset in ("habana", "miami"):  # the opening pair chose: Salgo / Sal tú
            assert "choice" in kinds
