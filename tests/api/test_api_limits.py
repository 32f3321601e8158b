"""Responsible play: deposit and loss limits, cool-off and session reminders.

The real ledger, engine and matchmaking run in-process (platform_stack); time is moved by
rewriting a pending limit's time in the database, never waited for.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from api.limits import next_reminder_at
from services.common.db import create_engine
from services.common.migrate import upgrade
from tests.api.api_helpers import make_user, sign_in
from tests.api.platform_stack import COMPONENTS
from tests.api.test_api_invitations import Players, players

PAID = {"kind": "cubana-habana", "tier": "10"}
STAKE = 1000  # tier "10"
DAY = timedelta(days=1)


@pytest.fixture(scope="module")
def platform_db(database_url: str) -> str:
    upgrade(database_url, COMPONENTS)
    return database_url


_made_finance: set[str] = set()


async def _finance(platform_db: str) -> None:
    if platform_db not in _made_finance:
        await make_user(platform_db, "caja", "finance")
        _made_finance.add(platform_db)


async def _sql(platform_db: str, statement: str, **params: object) -> list[Any]:
    engine = create_engine(platform_db, as_app_role=False)  # tests move time
    try:
        async with engine.begin() as conn:
            result = await conn.execute(text(statement), params)
            return list(result.all()) if result.returns_rows else []
    finally:
        await engine.dispose()


async def _deposit(ps: Players, player: str, amount: int, key: str | None = None) -> httpx.Response:
    async with ps.p.client() as fin:
        await sign_in(fin, "caja")
        body: dict[str, Any] = {"player": player, "amount": amount, "reference": "test deposit"}
        if key is not None:
            body["idempotency_key"] = key
        return await fin.post("/api/finance/deposits", json=body)


async def _set(client: httpx.AsyncClient, **limits: int | None) -> dict[str, Any]:
    r = await client.post("/api/me/limits", json={"limits": limits})
    assert r.status_code == 200, r.text
    return dict(r.json())


def _when(raw: str) -> datetime:
    return datetime.fromisoformat(raw.replace("Z", "+00:00"))


async def test_a_lower_limit_applies_at_once_a_higher_one_after_24_hours(
    platform_db: str, internal_secret: bytes, tmp_path: Path
) -> None:
    await _finance(platform_db)
    async with players(platform_db, internal_secret, tmp_path) as ps:
        me = await ps.add("l_ana", deposit=0)
        got = (await me.get("/api/me/limits")).json()
        assert got["deposit_day"] == {"cents": None, "pending_cents": None, "pending_at": None}
        assert got["windows"] == "rolling" and got["currency"] == "USD"
        # A first limit, then a lower one: both at once.
        assert (await _set(me, deposit_day=5000))["deposit_day"]["cents"] == 5000
        assert (await _set(me, deposit_day=3000))["deposit_day"] == {
            "cents": 3000,
            "pending_cents": None,
            "pending_at": None,
        }
        # A higher one waits 24 hours by the database's clock; the player sees both.
        raised = await _set(me, deposit_day=8000, loss_week=2000)
        assert raised["deposit_day"]["cents"] == 3000
        assert raised["deposit_day"]["pending_cents"] == 8000
        (db_now,) = (await _sql(platform_db, "SELECT now()"))[0]
        due = _when(raised["deposit_day"]["pending_at"])
        assert abs((due - db_now) - DAY) < timedelta(seconds=30)
        assert raised["loss_week"]["cents"] == 2000  # untouched limits stay; a new one at once
        # Asking again for the same rise does not restart its wait.
        again = await _set(me, deposit_day=8000)
        assert again["deposit_day"]["pending_at"] == raised["deposit_day"]["pending_at"]
        # Until then the lower limit is the one enforced.
        r = await _deposit(ps, "l_ana", 3001)
        assert r.status_code == 403 and r.json()["error"] == "deposit_limit", r.text
        # A day passes (moved in the database): the rise is the limit.
        await _sql(
            platform_db,
            "UPDATE gateway.play_limits SET pending_at = now() - interval '1 second' "
            "WHERE player = 'l_ana' AND name = 'deposit_day'",
        )
        now = (await me.get("/api/me/limits")).json()["deposit_day"]
        assert now == {"cents": 8000, "pending_cents": None, "pending_at": None}
        assert (await _deposit(ps, "l_ana", 3001)).status_code == 200
        # A removal is a rise too: pending, the limit holds meanwhile.
        removed = await _set(me, loss_week=None)
        assert removed["loss_week"]["cents"] == 2000
        assert removed["loss_week"]["pending_cents"] is None
        assert removed["loss_week"]["pending_at"] is not None
        # A decrease meanwhile cancels the pending rise, at once.
        lowered = await _set(me, loss_week=1500)
        assert lowered["loss_week"] == {"cents": 1500, "pending_cents": None, "pending_at": None}
        # The staff read is the same plain read.
        from api.limits import limits_of

        staff_view = await limits_of(ps.p.gateway.state.db, "l_ana")
        assert staff_view.loss_week.cents == 1500 and staff_view.deposit_day.cents == 8000


async def test_bad_limits_are_refused_and_change_nothing(
    platform_db: str, internal_secret: bytes, tmp_path: Path
) -> None:
    async with players(platform_db, internal_secret, tmp_path) as ps:
        me = await ps.add("l_bad", deposit=0)
        await _set(me, loss_day=700)
        before = (await me.get("/api/me/limits")).json()
        bodies: list[Any] = [
            {"limits": {"loss_day": 0}},
            {"limits": {"loss_day": -5}},
            {"limits": {"loss_day": 10_000_001}},
            {"limits": {"loss_day": "700"}},
            {"limits": {"loss_day": 7.5}},
            {"limits": {"stake_day": 100}},
            {"limits": {"loss_day": 100}, "extra": 1},
            {"reminder_min": 45},
            {"limits": []},
            [],
        ]
        for body in bodies:
            r = await me.post("/api/me/limits", json=body)
            assert r.status_code == 400, (body, r.text)
        for body in ({"hours": 23}, {"hours": 1009}, {"hours": "24"}, {"hours": 24, "x": 1}, {}):
            r = await me.post("/api/me/cool-off", json=body)
            assert r.status_code == 400, (body, r.text)
        assert (await me.get("/api/me/limits")).json() == before
        # Not for staff, nor without a session.
        async with ps.p.client() as fin:
            await sign_in(fin, "caja")
            assert (await fin.get("/api/me/limits")).status_code == 403
        async with ps.p.client() as anon:
            assert (await anon.get("/api/me/limits")).status_code == 401


async def test_a_deposit_beyond_the_daily_limit_is_refused_with_the_allowance_left(
    platform_db: str, internal_secret: bytes, tmp_path: Path
) -> None:
    await _finance(platform_db)
    async with players(platform_db, internal_secret, tmp_path) as ps:
        me = await ps.add("d_ana", deposit=0)
        await _set(me, deposit_day=5000, deposit_week=9000)
        assert (await _deposit(ps, "d_ana", 1234)).status_code == 200
        r = await _deposit(ps, "d_ana", 3767)
        assert r.status_code == 403, r.text
        assert r.json()["error"] == "deposit_limit"
        assert "daily" in r.json()["detail"] and "3766 cents" in r.json()["detail"], r.text
        # the page reads the allowance from refs, never from the words of the detail
        left = {"left_cents": ["3766"], "currency": ["USD"], "window": ["day"]}
        assert r.json()["refs"] == left, r.text
        assert await ps.balance("d_ana") == 1234
        assert (await _deposit(ps, "d_ana", 3766)).status_code == 200
        r = await _deposit(ps, "d_ana", 1)
        assert r.status_code == 403 and "0 cents" in r.json()["detail"], r.text
        assert await ps.balance("d_ana") == 5000
        # Withdrawals are not deposits: they do not free the allowance.
        async with ps.p.client() as fin:
            await sign_in(fin, "caja")
            w = await fin.post(
                "/api/finance/withdrawals",
                json={"player": "d_ana", "amount": 5000, "reference": "test"},
            )
            assert w.status_code == 200, w.text
        assert (await _deposit(ps, "d_ana", 1)).status_code == 403


async def test_a_paid_seat_past_a_loss_limit_is_refused_a_free_one_is_not(
    platform_db: str, internal_secret: bytes, tmp_path: Path
) -> None:
    await _finance(platform_db)
    async with players(platform_db, internal_secret, tmp_path) as ps:
        me = await ps.add("x_ana", deposit=5000)
        await ps.add("x_host", deposit=5000)
        await _set(me, loss_day=1500)
        first = await me.post("/api/lobby/quick-join", json=PAID)
        assert first.status_code == 200, first.text
        # His held stake counts as lost: a second stake of 1000 would pass 1500.
        r = await me.post("/api/lobby/quick-join", json={"kind": "apuesta-1v1", "tier": "10"})
        assert r.status_code == 403 and r.json()["error"] == "loss_limit", r.text
        assert "500 cents left" in r.json()["detail"], r.text
        r = await me.post("/api/lobby/private", json={"kind": "apuesta-1v1", "tier": "10"})
        assert r.status_code == 403 and r.json()["error"] == "loss_limit", r.text
        # A private table's tier is unknown before joining: the largest stake counts.
        code = (
            await ps["x_host"].post(
                "/api/lobby/private", json={"kind": "apuesta-1v1", "tier": "10"}
            )
        ).json()["invite_code"]
        r = await me.post("/api/lobby/join-code", json={"invite_code": code})
        assert r.status_code == 403 and r.json()["error"] == "loss_limit", r.text
        assert await ps.balance("x_ana") == 5000 - STAKE
        # Free tables stay open.
        r = await me.post("/api/lobby/quick-join", json={"kind": "apuesta-1v1", "tier": "free"})
        assert r.status_code == 200, r.text
        # Leaving releases the hold: nothing lost, so the seat is allowed again.
        r = await me.post("/api/lobby/leave", json={"table_id": first.json()["table_id"]})
        assert r.status_code == 200, r.text
        r = await me.post("/api/lobby/private", json={"kind": "apuesta-1v1", "tier": "10"})
        assert r.status_code == 200, r.text
        # The session summary counts the held stake as the session's result so far.
        summary = (await me.get("/api/me/session")).json()
        assert summary["net_cents"] == -STAKE and summary["currency"] == "USD"
        assert summary["reminder_min"] == 0 and summary["next_reminder_at"] is None


async def test_cool_off_refuses_paid_seats_and_deposits_and_cannot_be_shortened(
    platform_db: str, internal_secret: bytes, tmp_path: Path
) -> None:
    await _finance(platform_db)
    async with players(platform_db, internal_secret, tmp_path) as ps:
        for name in ("c_cool", "c_dani", "c_host", "c_lou"):
            await ps.add(name)
        cool = ps["c_cool"]
        code = (
            await ps["c_host"].post(
                "/api/lobby/private", json={"kind": "casa-parejas", "tier": "10"}
            )
        ).json()["invite_code"]
        # Invitations sent before the cool-off, both ways.
        pairs = {"kind": "casa-parejas", "tier": "10"}
        r = await ps["c_dani"].post("/api/lobby/quick-join", json={**pairs, "partner": "c_cool"})
        assert r.status_code == 202, r.text
        to_cool = r.json()["invitation_id"]
        r = await cool.post("/api/lobby/quick-join", json={**pairs, "partner": "c_lou"})
        assert r.status_code == 202, r.text
        from_cool = r.json()["invitation_id"]

        r = await cool.post("/api/me/cool-off", json={"hours": 72})
        assert r.status_code == 200, r.text
        until = _when(r.json()["cooling_off_until"])
        (db_now,) = (await _sql(platform_db, "SELECT now()"))[0]
        assert abs((until - db_now) - timedelta(hours=72)) < timedelta(seconds=30)

        refusals = {
            "/api/lobby/quick-join": PAID,
            "/api/lobby/private": PAID,
            "/api/lobby/join-code": {"invite_code": code},
        }
        for path, body in refusals.items():
            r = await cool.post(path, json=body)
            assert r.status_code == 403 and r.json()["error"] == "cooling_off", (path, r.text)
            assert until.strftime("%Y-%m-%dT%H:%M") in r.json()["detail"], r.text
            # Nor may he be named as a partner (nothing said of why).
            r = await ps["c_dani"].post(path, json={**body, "partner": "c_cool"})
            assert r.status_code == 403 and r.json()["error"] == "partner_unavailable", r.text
        r = await cool.post(f"/api/invitations/{to_cool}/accept")
        assert r.status_code == 403 and r.json()["error"] == "cooling_off", r.text
        r = await ps["c_lou"].post(f"/api/invitations/{from_cool}/accept")
        assert r.status_code == 403 and r.json()["error"] == "partner_unavailable", r.text
        r = await _deposit(ps, "c_cool", 100)
        assert r.status_code == 403 and r.json()["error"] == "cooling_off", r.text
        # Free tables stay open.
        r = await cool.post("/api/lobby/quick-join", json={"kind": "apuesta-1v1", "tier": "free"})
        assert r.status_code == 200, r.text
        r = await cool.post("/api/lobby/cpu", json={"kind": "apuesta-1v1"})
        assert r.status_code == 200, r.text
        # It cannot be shortened (nor cancelled: there is no route for it); it can be extended.
        r = await cool.post("/api/me/cool-off", json={"hours": 24})
        assert r.status_code == 409 and r.json()["error"] == "cool_off_active", r.text
        assert (await cool.get("/api/me/limits")).json()["cooling_off_until"] is not None
        assert _when((await cool.get("/api/me/limits")).json()["cooling_off_until"]) == until
        r = await cool.post("/api/me/cool-off", json={"hours": 1008})
        assert r.status_code == 200 and _when(r.json()["cooling_off_until"]) > until
        for name in ("c_cool", "c_dani", "c_lou"):
            assert await ps.balance(name) == 2000, name
        # Once it is over, paid tables open again.
        await _sql(
            platform_db,
            "UPDATE gateway.play_settings SET cooling_off_until = now() - interval '1 second' "
            "WHERE player = 'c_cool'",
        )
        r = await cool.post("/api/lobby/quick-join", json=PAID)
        assert r.status_code == 200, r.text


async def test_session_reminders_are_stored_and_timed_from_the_session_start(
    platform_db: str, internal_secret: bytes, tmp_path: Path
) -> None:
    async with players(platform_db, internal_secret, tmp_path) as ps:
        me = await ps.add("r_ana", deposit=0)
        r = await me.post("/api/me/limits", json={"reminder_min": 30})
        assert r.status_code == 200 and r.json()["reminder_min"] == 30, r.text
        summary = (await me.get("/api/me/session")).json()
        started = _when(summary["started_at"])
        assert _when(summary["next_reminder_at"]) == started + timedelta(minutes=30)
        assert summary["net_cents"] == 0 and summary["played_s"] >= 0
        r = await me.post("/api/me/limits", json={"reminder_min": 0})
        assert (await me.get("/api/me/session")).json()["next_reminder_at"] is None


def test_next_reminder_is_the_next_whole_interval_since_sign_in() -> None:
    start = datetime(2026, 12, 2, 1, 0, tzinfo=UTC)
    at = timedelta(minutes=1)
    assert next_reminder_at(start, 0, start + 5 * at) is None
    assert next_reminder_at(start, 30, start) == start + 30 * at
    assert next_reminder_at(start, 30, start + 29 * at) == start + 30 * at
    assert next_reminder_at(start, 30, start + 30 * at) == start + 60 * at
    assert next_reminder_at(start, 60, start + 125 * at) == start + 180 * at
    assert next_reminder_at(start, 120, start - at) == start + 120 * at
