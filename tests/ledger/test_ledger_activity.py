"""A player's deposits and net loss over a window (the gateway's responsible-play limits):
stakes held minus payouts, refunds and releases, in cents, since each time asked."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import pytest
from ledger_helpers import funded, key, seated_match, superuser
from litestar.testing import AsyncTestClient

from ledger import reports
from ledger.ops import Ledger, Winner
from services.ledger.app import create_app
from tests.conftest import make_settings
from tests.service_auth import AS_DECLARED, CallerByRoute, ledger_caller


async def _db_now(url: str) -> dt.datetime:
    conn = await superuser(url)
    try:
        now: dt.datetime = await conn.fetchval("SELECT now()")
        return now
    finally:
        await conn.close()


async def _activity(url: str, player: str, *sinces: dt.datetime) -> list[tuple[int, int]]:
    conn = await superuser(url)
    try:
        report = await reports.player_activity(conn, player, list(sinces))
    finally:
        await conn.close()
    assert report is not None
    return [(w["deposits"], w["net_loss"]) for w in report["windows"]]


async def test_net_loss_is_stakes_minus_payouts_refunds_and_releases(
    ledger: Ledger, url: str
) -> None:
    start = await _db_now(url) - dt.timedelta(seconds=1)
    await funded(ledger, "pa_a", 5000)
    await funded(ledger, "pa_b", 5000)
    # Lost a 200 stake; pa_b won the pot of 400 less 10% commission.
    await seated_match(ledger, "pa-m1", ["pa_a", "pa_b"], 200)
    await ledger.settle_match(key(), "pa-m1", [Winner("pa_b")], 1000)
    assert await _activity(url, "pa_a", start) == [(5000, 200)]
    assert await _activity(url, "pa_b", start) == [(5000, 200 - 360)]
    middle = await _db_now(url)
    # A voided match refunds, a released hold comes back: neither is a loss.
    await seated_match(ledger, "pa-m2", ["pa_a", "pa_b"], 300)
    await ledger.void_match(key(), "pa-m2", "aborted")
    await ledger.hold(key(), "pa_a", "pa-res-back", 100, "USD", "t")
    await ledger.release(key(), "pa-res-back")
    # A stake still held counts as lost until it comes back.
    await ledger.hold(key(), "pa_a", "pa-res-open", 50, "USD", "t")
    await ledger.deposit(key(), "pa_a", 700, "USD", "more")
    await ledger.withdraw(key(), "pa_a", 300, "USD", "out")
    assert await _activity(url, "pa_a", start, middle) == [(5700, 250), (700, 50)]
    # A window that starts after everything counts nothing.
    assert await _activity(url, "pa_a", await _db_now(url)) == [(0, 0)]
    conn = await superuser(url)
    try:
        assert await reports.player_activity(conn, "pa_nobody", [start]) is None
    finally:
        await conn.close()


@pytest.fixture
async def client(url: str, internal_secret: bytes) -> AsyncIterator[AsyncTestClient[Any]]:
    settings = make_settings(url, internal_secret)
    app = create_app(settings, pool_size=4, seal_in_background=False)
    async with AsyncTestClient(app) as c:
        c.headers["Authorization"] = AS_DECLARED
        c.auth = CallerByRoute(internal_secret, "ledger", ledger_caller)
        yield c


async def test_activity_route_is_bounded(client: AsyncTestClient[Any], ledger: Ledger) -> None:
    await funded(ledger, "pa_api", 1234)
    now = dt.datetime.now(dt.UTC)
    day = (now - dt.timedelta(days=1)).isoformat()
    month = (now - dt.timedelta(days=30)).isoformat()
    r = await client.get("/v1/players/pa_api/activity", params={"since": [day, month]})
    assert r.status_code == 200, r.text
    assert [(w["deposits"], w["net_loss"]) for w in r.json()["windows"]] == [(1234, 0), (1234, 0)]
    assert r.json()["currency"] == "USD"
    old = (now - dt.timedelta(days=32)).isoformat()
    ahead = (now + dt.timedelta(hours=1)).isoformat()
    for params in (
        {},
        {"since": old},
        {"since": ahead},
        {"since": "yesterday"},
        {"since": [day, day, day, day]},
    ):
        r = await client.get("/v1/players/pa_api/activity", params=params)
        assert r.status_code == 400, (params, r.text)
    r = await client.get("/v1/players/pa_none/activity", params={"since": day})
    assert r.status_code == 404 and r.json()["error"] == "unknown_account"
