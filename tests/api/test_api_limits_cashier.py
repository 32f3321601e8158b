"""The cashier's one checked path (api/cashier.py): the player's lock against races between a
limit or a hold and a movement, and a retry answered by the ledger's replay before any check.

The races are made, not hoped for: a movement is paused where it calls the ledger (or a hold
where it writes its audit line), and the test goes on only once the other request is seen
waiting on the player's lock in `pg_locks` (or, without the lock, has got as far as it can).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from api import cashier, limits, staff_audit
from api.backends import get_backends
from services.common.db import create_engine
from services.common.migrate import upgrade
from tests.api.api_helpers import make_user, sign_in
from tests.api.lock_helpers import lock_waiters, until
from tests.api.platform_stack import COMPONENTS
from tests.api.test_api_invitations import Players, players


@pytest.fixture(scope="module")
def platform_db(database_url: str) -> str:
    upgrade(database_url, COMPONENTS)
    return database_url


@pytest.fixture
async def su(platform_db: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(platform_db, as_app_role=False)  # reads pg_locks, holds locks
    try:
        yield engine
    finally:
        await engine.dispose()


_made: set[tuple[str, str]] = set()


async def _staff(platform_db: str, name: str, role: str) -> None:
    if (platform_db, name) not in _made:
        await make_user(platform_db, name, role)
        _made.add((platform_db, name))


async def _signed_in(ps: Players, name: str) -> httpx.AsyncClient:
    client = await ps.stack.enter_async_context(ps.p.client())
    await sign_in(client, name)
    return client


def _move(player: str, amount: int, key: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"player": player, "amount": amount, "reference": "desk"}
    if key is not None:
        body["idempotency_key"] = key
    return body


async def _lock_waiters(su: AsyncEngine, player: str) -> int:
    """Requests waiting for `player`'s cashier lock."""
    return await lock_waiters(su, [cashier.lock_key(player)])


class LedgerGate:
    """Pauses the gateway's calls to one ledger path until `go` is set."""

    def __init__(self, ps: Players, monkeypatch: pytest.MonkeyPatch, path: str) -> None:
        ledger = get_backends(ps.p.gateway.state).ledger
        original = ledger.post
        self.arrived = 0
        self.go = asyncio.Event()

        async def post(target: str, body: Any, kind: Any, **kw: Any) -> Any:
            if target == path:
                self.arrived += 1
                await self.go.wait()
            return await original(target, body, kind, **kw)

        monkeypatch.setattr(ledger, "post", post)


async def _audit_count(su: AsyncEngine, action: str, subject: str) -> int:
    async with su.connect() as conn:
        found = await conn.execute(
            text(
                "SELECT count(*) FROM gateway.staff_actions "
                "WHERE action = :action AND subject = :subject"
            ),
            {"action": action, "subject": subject},
        )
        return int(found.scalar_one())


async def test_concurrent_deposits_post_only_what_the_limit_allows(
    platform_db: str,
    internal_secret: bytes,
    tmp_path: Path,
    su: AsyncEngine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await _staff(platform_db, "caja", "finance")
    async with players(platform_db, internal_secret, tmp_path) as ps:
        me = await ps.add("lk_ana", deposit=0)
        r = await me.post("/api/me/limits", json={"limits": {"deposit_day": 5000}})
        assert r.status_code == 200, r.text
        fin = await _signed_in(ps, "caja")
        gate = LedgerGate(ps, monkeypatch, "/v1/deposits")
        # Three deposits of 20.00 at once against a daily limit of 50.00: two fit.
        moves = [
            asyncio.create_task(fin.post("/api/finance/deposits", json=_move("lk_ana", 2000)))
            for _ in range(3)
        ]

        async def all_in_place() -> bool:
            # Each is either at the ledger or waiting for the player's lock.
            return gate.arrived + await _lock_waiters(su, "lk_ana") == 3

        await until(all_in_place, "three deposits at the ledger or on the lock")
        gate.go.set()
        answers = await asyncio.gather(*moves)
        codes = sorted(
            (a.status_code, a.json().get("error", "") if a.status_code != 200 else "")
            for a in answers
        )
        assert codes == [(200, ""), (200, ""), (403, "deposit_limit")], [a.text for a in answers]
        assert await ps.balance("lk_ana") == 4000
        assert await _audit_count(su, "finance.deposit", "user:lk_ana") == 2


async def test_a_hold_placed_while_a_withdrawal_waits_on_the_lock_is_honoured(
    platform_db: str,
    internal_secret: bytes,
    tmp_path: Path,
    su: AsyncEngine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await _staff(platform_db, "caja", "finance")
    await _staff(platform_db, "lk_officer", "compliance")
    async with players(platform_db, internal_secret, tmp_path) as ps:
        await ps.add("lk_bob", deposit=3000)
        fin = await _signed_in(ps, "caja")
        officer = await _signed_in(ps, "lk_officer")
        # The hold pauses inside its transaction, after its row is written, before it commits.
        paused, resume = asyncio.Event(), asyncio.Event()
        record = staff_audit.record

        async def slow_record(db: Any, actor: Any, action: str, *args: Any) -> int:
            if action == "compliance.hold_withdrawals":
                paused.set()
                await resume.wait()
            return await record(db, actor, action, *args)

        monkeypatch.setattr(staff_audit, "record", slow_record)
        hold = asyncio.create_task(
            officer.post("/api/compliance/players/lk_bob/hold", json={"reason": "under review"})
        )
        await asyncio.wait_for(paused.wait(), 20)
        out = asyncio.create_task(fin.post("/api/finance/withdrawals", json=_move("lk_bob", 1000)))

        async def withdrawal_waits_or_ended() -> bool:
            return out.done() or await _lock_waiters(su, "lk_bob") == 1

        await until(withdrawal_waits_or_ended, "the withdrawal on the lock")
        resume.set()
        held, refused = await hold, await out
        assert held.status_code == 200, held.text
        assert refused.status_code == 403 and refused.json()["error"] == "withdrawals_held"
        assert await ps.balance("lk_bob") == 3000
        assert await _audit_count(su, "finance.withdrawal", "user:lk_bob") == 0


async def test_a_hold_waits_for_a_withdrawal_in_flight_then_refuses_the_next(
    platform_db: str,
    internal_secret: bytes,
    tmp_path: Path,
    su: AsyncEngine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await _staff(platform_db, "caja", "finance")
    await _staff(platform_db, "lk_officer", "compliance")
    async with players(platform_db, internal_secret, tmp_path) as ps:
        await ps.add("lk_cris", deposit=3000)
        fin = await _signed_in(ps, "caja")
        officer = await _signed_in(ps, "lk_officer")
        gate = LedgerGate(ps, monkeypatch, "/v1/withdrawals")
        out = asyncio.create_task(fin.post("/api/finance/withdrawals", json=_move("lk_cris", 1000)))

        async def at_the_ledger() -> bool:
            return gate.arrived == 1

        await until(at_the_ledger, "the withdrawal at the ledger")
        hold = asyncio.create_task(
            officer.post("/api/compliance/players/lk_cris/hold", json={"reason": "review"})
        )

        async def hold_waits_or_ended() -> bool:
            return hold.done() or await _lock_waiters(su, "lk_cris") == 1

        await until(hold_waits_or_ended, "the hold on the lock")
        # The hold is not placed while the withdrawal it could not stop is being posted.
        assert not hold.done()
        gate.go.set()
        assert (await out).status_code == 200
        assert (await hold).status_code == 200
        r = await fin.post("/api/finance/withdrawals", json=_move("lk_cris", 1000))
        assert r.status_code == 403 and r.json()["error"] == "withdrawals_held", r.text
        assert await ps.balance("lk_cris") == 2000


async def test_a_retry_of_a_posted_key_is_the_ledgers_replay_before_any_check(
    platform_db: str, internal_secret: bytes, tmp_path: Path, su: AsyncEngine
) -> None:
    await _staff(platform_db, "caja", "finance")
    await _staff(platform_db, "lk_officer", "compliance")
    async with players(platform_db, internal_secret, tmp_path) as ps:
        me = await ps.add("lk_dani", deposit=0)
        assert (
            await me.post("/api/me/limits", json={"limits": {"deposit_day": 5000}})
        ).status_code == 200
        fin = await _signed_in(ps, "caja")
        officer = await _signed_in(ps, "lk_officer")
        first = await fin.post("/api/finance/deposits", json=_move("lk_dani", 4000, "dep-0001"))
        assert first.status_code == 200 and first.json()["replayed"] is False, first.text
        # The day's window now counts it: only its retry may pass, as the same entry.
        retry = await fin.post("/api/finance/deposits", json=_move("lk_dani", 4000, "dep-0001"))
        assert retry.status_code == 200, retry.text
        assert retry.json()["replayed"] is True
        assert retry.json()["entry_id"] == first.json()["entry_id"]
        r = await fin.post("/api/finance/deposits", json=_move("lk_dani", 4000, "dep-0002"))
        assert r.status_code == 403 and r.json()["error"] == "deposit_limit", r.text
        # The same key for another amount is still the ledger's conflict.
        r = await fin.post("/api/finance/deposits", json=_move("lk_dani", 100, "dep-0001"))
        assert r.status_code == 409 and r.json()["error"] == "idempotency_key_reused", r.text
        # A cool-off begun since does not refuse the retry either (it posts nothing).
        assert (await me.post("/api/me/cool-off", json={"hours": 24})).status_code == 200
        retry = await fin.post("/api/finance/deposits", json=_move("lk_dani", 4000, "dep-0001"))
        assert retry.status_code == 200 and retry.json()["replayed"] is True, retry.text
        # A withdrawal's retry after a hold is its replay; a new one is held.
        out = await fin.post("/api/finance/withdrawals", json=_move("lk_dani", 1000, "out-0001"))
        assert out.status_code == 200, out.text
        r = await officer.post("/api/compliance/players/lk_dani/hold", json={"reason": "review"})
        assert r.status_code == 200, r.text
        again = await fin.post("/api/finance/withdrawals", json=_move("lk_dani", 1000, "out-0001"))
        assert again.status_code == 200 and again.json()["replayed"] is True, again.text
        assert again.json()["entry_id"] == out.json()["entry_id"]
        r = await fin.post("/api/finance/withdrawals", json=_move("lk_dani", 1000, "out-0002"))
        assert r.status_code == 403 and r.json()["error"] == "withdrawals_held", r.text
        assert await ps.balance("lk_dani") == 3000


async def test_a_movement_that_cannot_get_the_lock_is_503_and_changes_nothing(
    platform_db: str,
    internal_secret: bytes,
    tmp_path: Path,
    su: AsyncEngine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await _staff(platform_db, "caja", "finance")
    async with players(platform_db, internal_secret, tmp_path) as ps:
        await ps.add("lk_eva", deposit=1000)
        fin = await _signed_in(ps, "caja")
        monkeypatch.setattr(cashier, "LOCK_WAIT_MS", 50)
        async with su.begin() as conn:  # another movement for her holds the lock meanwhile
            await conn.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": cashier.lock_key("lk_eva")}
            )
            for path in ("/api/finance/deposits", "/api/finance/withdrawals"):
                r = await fin.post(path, json=_move("lk_eva", 500, "busy-0001"))
                assert r.status_code == 503 and r.json()["error"] == "cashier_busy", r.text
        assert await ps.balance("lk_eva") == 1000
        assert await _audit_count(su, "finance.withdrawal", "user:lk_eva") == 0
        r = await fin.post("/api/finance/deposits", json=_move("lk_eva", 500, "busy-0001"))
        assert r.status_code == 200 and r.json()["replayed"] is False, r.text


@pytest.mark.parametrize(
    ("change", "path", "body", "refusal"),
    [
        ("start_cool_off", "/api/me/cool-off", {"hours": 24}, "cooling_off"),
        ("set_limits", "/api/me/limits", {"limits": {"deposit_day": 1000}}, "deposit_limit"),
    ],
)
async def test_a_limit_change_made_while_a_deposit_waits_on_the_lock_is_honoured(
    platform_db: str,
    internal_secret: bytes,
    tmp_path: Path,
    su: AsyncEngine,
    monkeypatch: pytest.MonkeyPatch,
    change: str,
    path: str,
    body: dict[str, Any],
    refusal: str,
) -> None:
    await _staff(platform_db, "caja", "finance")
    player = f"lk_fe_{change[:3]}"
    async with players(platform_db, internal_secret, tmp_path) as ps:
        me = await ps.add(player, deposit=0)
        fin = await _signed_in(ps, "caja")
        # The player's change pauses inside its transaction, its row written, before it commits.
        paused, resume = asyncio.Event(), asyncio.Event()
        original = getattr(limits, change)

        async def slow_change(*args: Any, **kw: Any) -> Any:
            found = await original(*args, **kw)
            paused.set()
            await resume.wait()
            return found

        monkeypatch.setattr(limits, change, slow_change)
        changed = asyncio.create_task(me.post(path, json=body))
        await asyncio.wait_for(paused.wait(), 20)
        deposit = asyncio.create_task(
            fin.post("/api/finance/deposits", json=_move(player, 4000, f"fe-{change[:3]}-01"))
        )

        async def deposit_waits_or_ended() -> bool:
            return deposit.done() or await _lock_waiters(su, player) == 1

        await until(deposit_waits_or_ended, "the deposit on the lock")
        resume.set()
        done, refused = await changed, await deposit
        assert done.status_code == 200, done.text
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"] == refusal, refused.text
        assert await ps.balance(player) == 0
        assert await _audit_count(su, "finance.deposit", f"user:{player}") == 0
