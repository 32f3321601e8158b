"""Group commit (`ledger.batch.GroupCommit`, `ledger.post_batch`): operations that arrive
together share one transaction, and each keeps its own outcome: posted, replayed or refused,
all or nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from ledger_helpers import balance, entry_count, funded, key, seated_match, superuser

from ledger import batch
from ledger.batch import GroupCommit
from ledger.errors import LedgerError
from ledger.models import EntryResult, decode_result
from ledger.ops import Ledger, Winner


async def _outcomes(
    group: GroupCommit, calls: list[tuple[str, tuple[Any, ...]]]
) -> list[EntryResult | LedgerError]:
    """Submit every call at once: with one call slot the first goes alone and the rest wait
    for it, so they form one batch (the calls' first steps all run before the first call's
    task does)."""
    answers = await asyncio.gather(
        *(group.call(op, *args) for op, args in calls), return_exceptions=True
    )
    out: list[EntryResult | LedgerError] = []
    for answer in answers:
        if isinstance(answer, LedgerError):
            out.append(answer)
        elif isinstance(answer, str):
            out.append(decode_result(answer))
        else:
            raise AssertionError(f"unexpected {answer!r}")
    return out


def _refused(outcome: EntryResult | LedgerError, status: int, code: str) -> None:
    if not isinstance(outcome, LedgerError) or (outcome.status, outcome.code) != (status, code):
        raise AssertionError(f"expected {status} {code}, got {outcome!r}")


def _posted(outcome: EntryResult | LedgerError) -> EntryResult:
    if not isinstance(outcome, EntryResult):
        raise AssertionError(f"expected a posted entry, got {outcome!r}")
    return outcome


async def test_one_batch_keeps_each_outcome(ledger: Ledger, url: str) -> None:
    await funded(ledger, "bt_rich", 1000)
    await funded(ledger, "bt_poor", 50)
    await funded(ledger, "bt_x", 1000)
    await seated_match(ledger, "bt-m1", ["bt_rich", "bt_x"], 100)
    before = await entry_count(url)
    group = GroupCommit(ledger, max_in_flight=1)
    k1 = key()
    calls = [
        ("hold", ledger.hold_args(key(), "bt_x", "bt-r0", 7, "USD", "first, alone")),
        ("hold", ledger.hold_args(k1, "bt_rich", "bt-r1", 100, "USD", "t1")),
        ("hold", ledger.hold_args(key(), "bt_poor", "bt-r2", 100, "USD", "t1")),
        ("hold", ledger.hold_args(k1, "bt_rich", "bt-r1", 100, "USD", "t1")),
        ("hold", ledger.hold_args(k1, "bt_rich", "bt-r1", 999, "USD", "t1")),
        ("hold", ledger.hold_args(key(), "bt_nobody", "bt-r3", 100, "USD", "t1")),
        ("hold", ledger.hold_args(key(), "bt_rich", "bt-r4", 0, "USD", "t1")),
        ("settle", ledger.settle_args(key(), "bt-m1", [], 1000)),
        ("settle", ledger.settle_args(key(), "bt-m1", _winners("bt_x"), 1000)),
        ("void", ledger.void_args(key(), "bt-m1", "too late")),
        ("release", ledger.release_args(key(), "bt-r1")),
    ]
    out = await _outcomes(group, calls)
    assert (group.calls, group.operations) == (2, len(calls))

    _posted(out[0])
    held = _posted(out[1])
    _refused(out[2], 422, "insufficient_funds")
    replay = _posted(out[3])
    assert replay.replayed and replay.entry_id == held.entry_id
    _refused(out[4], 409, "idempotency_key_reused")
    _refused(out[5], 404, "unknown_account")
    _refused(out[6], 400, "invalid_amount")
    _refused(out[7], 400, "invalid_winners")
    _posted(out[8])
    _refused(out[9], 409, "match_already_settled")
    _posted(out[10])

    # two holds, the settlement, the release: four entries; every refusal posted nothing
    assert await entry_count(url) == before + 4
    assert await balance(ledger, "wallet:bt_poor") == 50
    assert await balance(ledger, "wallet:bt_rich") == 900  # staked 100, the hold released
    assert await balance(ledger, "wallet:bt_x") == 900 - 7 + 180  # pot 200 less 10%
    assert await balance(ledger, "hold:bt-r1") == 0


async def test_a_batch_cut_mid_call_runs_each_operation_once(ledger: Ledger, url: str) -> None:
    """The batch's backend dies while it waits on a locked wallet: the outcome is unknown, so
    each operation runs again alone, by its key, and posts once."""
    await funded(ledger, "bc_a", 1000)
    await funded(ledger, "bc_b", 1000)
    await funded(ledger, "bc_c", 1000)
    group = GroupCommit(ledger, max_in_flight=1)
    admin = await superuser(url)
    try:
        tx = admin.transaction()
        await tx.start()
        await admin.execute("SELECT 1 FROM ledger.accounts WHERE code = 'wallet:bc_a' FOR UPDATE")
        calls = [
            ("hold", ledger.hold_args(key(), "bc_c", "bc-r0", 10, "USD", "t")),
            ("hold", ledger.hold_args(key(), "bc_a", "bc-r1", 100, "USD", "t")),
            ("hold", ledger.hold_args(key(), "bc_b", "bc-r2", 200, "USD", "t")),
        ]
        task = asyncio.ensure_future(_outcomes(group, calls))
        pid = None
        for _ in range(400):
            # inside a transaction, pg_stat_activity is read once unless told to look again
            await admin.execute("SELECT pg_stat_clear_snapshot()")
            pid = await admin.fetchval(
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'mesa-ledger' "
                "AND wait_event_type = 'Lock' AND datname = current_database() "
                "AND query LIKE '%post_batch%'"
            )
            if pid is not None:
                break
            await asyncio.sleep(0.01)  # polling another session's state: nothing to await
        assert pid is not None, "the batch never waited on the locked wallet"
        await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
        await tx.rollback()
        out = await task
    finally:
        await admin.close()
    for outcome in out:
        _posted(outcome)
    assert group.calls == 2
    assert await balance(ledger, "wallet:bc_a") == 900
    assert await balance(ledger, "wallet:bc_b") == 800
    assert await balance(ledger, "wallet:bc_c") == 990


async def test_a_failed_batch_call_falls_back_to_single_calls(
    ledger: Ledger, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await funded(ledger, "bf_a", 1000)
    monkeypatch.setattr(batch, "_BATCH_SQL", "SELECT ledger.no_such_batch($1::text[], $2::text[])")
    group = GroupCommit(ledger, max_in_flight=1)
    before = await entry_count(url)
    calls = [
        ("hold", ledger.hold_args(key(), "bf_a", f"bf-r{i}", 100, "USD", "t")) for i in range(4)
    ]
    out = await _outcomes(group, calls)
    assert [type(o) for o in out] == [EntryResult] * 4
    assert group.calls == 2
    assert await entry_count(url) == before + 4
    assert await balance(ledger, "wallet:bf_a") == 600


async def test_limits_are_checked(ledger: Ledger) -> None:
    with pytest.raises(ValueError):
        GroupCommit(ledger, max_batch=batch.MAX_BATCH + 1)
    with pytest.raises(ValueError):
        GroupCommit(ledger, max_in_flight=0)
    group = GroupCommit(ledger, max_in_flight=1, max_pending=1)
    await funded(ledger, "bl_a", 1000)
    calls = [
        ("hold", ledger.hold_args(key(), "bl_a", f"bl-r{i}", 10, "USD", "t")) for i in range(3)
    ]
    out = await _outcomes(group, calls)
    _posted(out[0])
    _posted(out[1])
    _refused(out[2], 503, "ledger_unavailable")  # the queue was full: refused, not queued


async def test_the_database_refuses_an_oversized_batch(ledger: Ledger) -> None:
    n = batch.MAX_BATCH + 1
    async with ledger.pool.acquire() as conn:
        with pytest.raises(Exception, match="invalid_batch"):
            await conn.fetch(
                "SELECT * FROM ledger.post_batch($1::text[], $2::text[])", ["hold"] * n, ["[]"] * n
            )


def _winners(*players: str) -> list[Winner]:
    return [Winner(p) for p in players]
