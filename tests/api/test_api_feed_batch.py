"""The gateway's FeedBatcher: the sockets of one match woken together share one engine read,
and each gets its own seat's feed (nobody else's hand)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from api.routes_table import FeedBatcher
from services.common.metrics import REQUESTS
from services.common.migrate import upgrade
from tests.api.api_helpers import bearer, make_user
from tests.api.platform_stack import COMPONENTS, platform

FEEDS_ROUTE = "/internal/matches/{match_id}/feeds"


@pytest.fixture(scope="module")
def platform_db(database_url: str) -> str:
    upgrade(database_url, COMPONENTS)
    return database_url


def _feeds_calls() -> float:
    return sum(
        sample.value
        for metric in REQUESTS.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
        and sample.labels.get("service") == "engine"
        and sample.labels.get("route") == FEEDS_ROUTE
    )


async def test_reads_of_one_turn_share_one_engine_call(
    platform_db: str, internal_secret: bytes, tmp_path: Path
) -> None:
    await make_user(platform_db, "batchy")
    async with platform(platform_db, internal_secret, tmp_path) as p, p.client() as c:
        headers = await bearer(c, "batchy")
        r = await c.post("/api/lobby/cpu", json={"kind": "apuesta-1v1"}, headers=headers)
        assert r.status_code == 200, r.text
        match_id = r.json()["match_id"]
        state = p.gateway.state
        batcher: FeedBatcher = state.feed_batcher
        before = _feeds_calls()
        seat0, seat1, again = await asyncio.gather(
            batcher.read(match_id, 0, 0), batcher.read(match_id, 1, 0), batcher.read(match_id, 0, 0)
        )
        assert _feeds_calls() - before == 1
        assert seat0.events.seat == 0 and seat1.events.seat == 1
        assert seat0 == again
        # a whole log fits one page, so each read carries its seat's own snapshot
        assert seat0.snapshot is not None and seat1.snapshot is not None
        assert seat0.snapshot.seat == 0 and seat1.snapshot.seat == 1
        assert not set(seat0.snapshot.hand) & set(seat1.snapshot.hand)
        # reads in later turns go out on their own
        await batcher.read(match_id, 0, 0)
        assert _feeds_calls() - before == 2
