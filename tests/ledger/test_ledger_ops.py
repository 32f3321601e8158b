"""Every ledger operation and its refusals, against a real PostgreSQL."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledger_helpers import balance, entry_count, funded, key, refused, seated_match, superuser

from ledger.money import commission_shard, split_pot
from ledger.ops import Ledger, Seat, Winner


async def test_deposit_and_withdraw(ledger: Ledger) -> None:
    await ledger.open_wallet("ops_dw")
    result = await ledger.deposit(key(), "ops_dw", 2500, "USD", "pay-1")
    assert result.kind == "deposit" and not result.replayed
    assert [(p.account, p.amount) for p in result.postings] == [
        ("external:cashier", -2500),
        ("wallet:ops_dw", 2500),
    ]
    out = await ledger.withdraw(key(), "ops_dw", 1000, "USD", "wd-1")
    assert out.postings[0].balance_after == 1500
    assert await balance(ledger, "wallet:ops_dw") == 1500


async def test_deposit_and_withdraw_refusals(ledger: Ledger, url: str) -> None:
    await funded(ledger, "ops_dwr", 100)
    before = await entry_count(url)
    await refused(ledger.deposit(key(), "ops_dwr", 0), 400, "invalid_amount")
    await refused(ledger.deposit(key(), "ops_dwr", -5), 400, "invalid_amount")
    await refused(ledger.deposit(key(), "ops_dwr", 5, "EUR"), 422, "unsupported_currency")
    await refused(ledger.deposit(key(), "bad player!", 5), 400, "invalid_player")
    await refused(ledger.withdraw(key(), "ops_dwr", 101), 422, "insufficient_funds")
    await refused(ledger.withdraw(key(), "ops_nobody", 1), 404, "unknown_account")
    await refused(ledger.withdraw(key(), "ops_dwr", -1), 400, "invalid_amount")
    assert await entry_count(url) == before
    assert await balance(ledger, "wallet:ops_dwr") == 100


async def test_postings_refuse_a_wallet_that_was_never_opened(ledger: Ledger, url: str) -> None:
    """No operation opens a wallet: a deposit, a hold or a withdrawal naming a player whose
    wallet was never opened is refused (404 unknown_account), posts nothing, opens nothing."""
    before = await entry_count(url)
    await refused(ledger.deposit(key(), "ops_never", 500), 404, "unknown_account")
    await refused(ledger.hold(key(), "ops_never", "ops_never-r", 5), 404, "unknown_account")
    await refused(ledger.withdraw(key(), "ops_never", 5), 404, "unknown_account")
    assert await entry_count(url) == before
    assert await ledger.account("wallet:ops_never") is None
    first = await ledger.open_wallet("ops_never")
    again = await ledger.open_wallet("ops_never")
    assert (first.opened, again.opened) == (True, False)
    assert first.account == "wallet:ops_never" and first.currency == "USD"
    await refused(ledger.open_wallet("ops_never", "EUR"), 422, "unsupported_currency")
    await refused(ledger.open_wallet("bad player!"), 400, "invalid_player")
    assert (await ledger.deposit(key(), "ops_never", 500)).postings[1].balance_after == 500


async def test_idempotent_retry_and_key_reuse(ledger: Ledger, url: str) -> None:
    k = key()
    await ledger.open_wallet("ops_idem")
    first = await ledger.deposit(k, "ops_idem", 700, "USD", "ref")
    again = await ledger.deposit(k, "ops_idem", 700, "USD", "ref")
    assert again.replayed and again.entry_id == first.entry_id
    assert again.postings == first.postings
    await refused(ledger.deposit(k, "ops_idem", 701, "USD", "ref"), 409, "idempotency_key_reused")
    await refused(ledger.withdraw(k, "ops_idem", 700, "USD", "ref"), 409, "idempotency_key_reused")
    assert await balance(ledger, "wallet:ops_idem") == 700


async def test_concurrent_retries_of_one_request_post_once(ledger: Ledger) -> None:
    await funded(ledger, "ops_conc_idem", 1000)
    k = key()
    results = await asyncio.gather(
        *(ledger.hold(k, "ops_conc_idem", "ops-conc-r", 300, "USD", "t") for _ in range(8))
    )
    assert len({r.entry_id for r in results}) == 1
    assert sum(not r.replayed for r in results) == 1
    assert await balance(ledger, "wallet:ops_conc_idem") == 700


async def test_hold_and_release(ledger: Ledger) -> None:
    await funded(ledger, "ops_hr", 1000)
    held = await ledger.hold(key(), "ops_hr", "ops-hr-1", 400, "USD", "table-1")
    assert held.hold_account == "hold:ops-hr-1"
    assert await balance(ledger, "wallet:ops_hr") == 600
    assert await balance(ledger, "hold:ops-hr-1") == 400
    await refused(ledger.hold(key(), "ops_hr", "ops-hr-1", 100), 409, "hold_exists")
    await refused(ledger.hold(key(), "ops_hr", "ops-hr-2", 601), 422, "insufficient_funds")
    await refused(ledger.hold(key(), "ops_hr", "ops-hr-3", 0), 400, "invalid_amount")
    await refused(ledger.hold(key(), "ops_hr", "ops-hr-3", 5, "EUR"), 422, "wrong_currency")
    await refused(ledger.hold(key(), "ops_nobody", "ops-hr-4", 5), 404, "unknown_account")
    released = await ledger.release(key(), "ops-hr-1")
    assert released.postings[0].balance_after == 0
    assert await balance(ledger, "wallet:ops_hr") == 1000
    await refused(ledger.release(key(), "ops-hr-1"), 409, "hold_closed")
    await refused(ledger.release(key(), "ops-nothing"), 404, "unknown_hold")
    # the failed hold for ops-hr-2 left no account behind: the reservation is still free
    assert await ledger.account("hold:ops-hr-2") is None


async def test_start_settle_two_players(ledger: Ledger) -> None:
    for p in ("ops_s_a", "ops_s_b"):
        await funded(ledger, p, 1000)
    await seated_match(ledger, "ops-m1", ["ops_s_a", "ops_s_b"], 501)
    assert await balance(ledger, "pot:ops-m1") == 1002
    assert await balance(ledger, "hold:ops-m1-r0") == 0
    result = await ledger.settle_match(key(), "ops-m1", [Winner("ops_s_b")], 1000)
    assert result.commission == 100 and result.pot == 1002
    shard = f"house:commission:{commission_shard('ops-m1'):02d}"
    assert {p.account: p.amount for p in result.postings} == {
        "pot:ops-m1": -1002,
        shard: 100,
        "wallet:ops_s_b": 902,
    }
    assert await balance(ledger, "pot:ops-m1") == 0
    assert await balance(ledger, "wallet:ops_s_b") == 1000 - 501 + 902
    pot = await ledger.account("pot:ops-m1")
    assert pot is not None and pot["closed"]


async def test_pairs_split_odd_cent_to_lower_seat(ledger: Ledger) -> None:
    players = ["ops_p0", "ops_p1", "ops_p2", "ops_p3"]
    for p in players:
        await funded(ledger, p, 1000)
    await seated_match(ledger, "ops-pairs", players, 251)  # pot 1004, commission 100, rest 904
    # winners listed out of seat order: the leftover cent still goes to the lower seat
    result = await ledger.settle_match(
        key(), "ops-pairs", [Winner("ops_p2"), Winner("ops_p0")], 1000
    )
    assert result.payouts is not None
    assert {p.player: p.amount for p in result.payouts} == {"ops_p0": 452, "ops_p2": 452}
    expected = split_pot(1004, 1000, [1, 1])
    assert sorted(p.amount for p in result.payouts) == sorted(expected.payouts)

    await seated_match(ledger, "ops-pairs-odd", players, 250)  # pot 1000 -> rest 900 -> 450/450
    odd = await ledger.settle_match(
        key(), "ops-pairs-odd", [Winner("ops_p1"), Winner("ops_p3")], 1001
    )
    # rate 10.01%: commission 100, rest 900
    assert odd.commission == 100


async def test_start_refusals_are_all_or_nothing(ledger: Ledger, url: str) -> None:
    for p in ("ops_st_a", "ops_st_b", "ops_st_c"):
        await funded(ledger, p, 1000)
    await ledger.hold(key(), "ops_st_a", "ops-st-ra", 100)
    await ledger.hold(key(), "ops_st_b", "ops-st-rb", 100)
    await ledger.hold(key(), "ops_st_c", "ops-st-rc", 100)
    await ledger.release(key(), "ops-st-rc")
    before = await entry_count(url)
    seats = [Seat(0, "ops_st_a", "ops-st-ra"), Seat(1, "ops_st_b", "ops-st-rb")]
    await refused(
        ledger.start_match(key(), "ops-st", "t", "v", [*seats, Seat(2, "ops_st_c", "ops-st-rc")]),
        409,
        "hold_closed",
    )
    await refused(
        ledger.start_match(key(), "ops-st", "t", "v", [*seats, Seat(2, "ops_st_c", "nope")]),
        404,
        "unknown_hold",
    )
    await refused(
        ledger.start_match(key(), "ops-st", "t", "v", [Seat(0, "ops_st_b", "ops-st-ra"), seats[1]]),
        400,
        "invalid_seats",
    )
    await refused(
        ledger.start_match(key(), "ops-st", "t", "v", [Seat(0, "ops_st_c", "ops-st-ra"), seats[1]]),
        422,
        "hold_player_mismatch",
    )
    await refused(ledger.start_match(key(), "ops-st", "t", "v", seats[:1]), 400, "invalid_seats")
    await refused(
        ledger.start_match(key(), "ops-st", "t", "v", seats, currency="EUR"), 422, "wrong_currency"
    )
    assert await entry_count(url) == before
    assert await balance(ledger, "hold:ops-st-ra") == 100
    assert await ledger.account("pot:ops-st") is None
    await ledger.start_match(key(), "ops-st", "t", "v", seats)
    await refused(
        ledger.start_match(key(), "ops-st", "t", "v", seats), 409, "match_already_started"
    )
    await refused(ledger.release(key(), "ops-st-ra"), 409, "hold_closed")


async def test_settle_refusals_and_at_most_once(ledger: Ledger, url: str) -> None:
    for p in ("ops_x_a", "ops_x_b", "ops_outsider"):
        await funded(ledger, p, 1000)
    await seated_match(ledger, "ops-x", ["ops_x_a", "ops_x_b"], 300)
    before = await entry_count(url)
    await refused(
        ledger.settle_match(key(), "ops-x", [Winner("ops_outsider")], 1000),
        422,
        "winner_not_in_match",
    )
    await refused(ledger.settle_match(key(), "ops-x", [], 1000), 400, "invalid_winners")
    await refused(
        ledger.settle_match(key(), "ops-x", [Winner("ops_x_a"), Winner("ops_x_a")], 1000),
        400,
        "invalid_winners",
    )
    await refused(
        ledger.settle_match(key(), "ops-x", [Winner("ops_x_a", 0)], 1000), 400, "invalid_winners"
    )
    await refused(
        ledger.settle_match(key(), "ops-none", [Winner("ops_x_a")], 1000), 404, "unknown_match"
    )
    assert await entry_count(url) == before
    k = key()
    first = await ledger.settle_match(k, "ops-x", [Winner("ops_x_a")], 1000)
    again = await ledger.settle_match(k, "ops-x", [Winner("ops_x_a")], 1000)
    assert again.replayed and again.entry_id == first.entry_id
    await refused(
        ledger.settle_match(key(), "ops-x", [Winner("ops_x_b")], 1000), 409, "match_already_settled"
    )
    await refused(ledger.void_match(key(), "ops-x"), 409, "match_already_settled")


async def test_void_refunds_every_stake(ledger: Ledger) -> None:
    players = ["ops_v_a", "ops_v_b", "ops_v_c"]
    for p in players:
        await funded(ledger, p, 1000)
    await seated_match(ledger, "ops-v", players, 333)
    result = await ledger.void_match(key(), "ops-v", "server restart before the first hand")
    assert result.kind == "void"
    for p in players:
        assert await balance(ledger, f"wallet:{p}") == 1000
    assert await balance(ledger, "pot:ops-v") == 0
    await refused(ledger.void_match(key(), "ops-v"), 409, "match_already_voided")
    await refused(
        ledger.settle_match(key(), "ops-v", [Winner("ops_v_a")], 1000), 409, "match_already_voided"
    )


async def test_retry_after_connection_cut_posts_once(ledger: Ledger, url: str) -> None:
    """A request whose connection dies after commit, retried with its key, posts nothing new;
    one whose backend is killed while it waits is retried by the library and posts once."""
    await funded(ledger, "ops_cut", 1000)
    k = key()
    first = await ledger.hold(k, "ops_cut", "ops-cut-1", 100)
    admin = await superuser(url)
    try:
        killed = await admin.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = 'mesa-ledger' AND datname = current_database()"
        )
        assert killed >= 1
        again = await ledger.hold(k, "ops_cut", "ops-cut-1", 100)
        assert again.replayed and again.entry_id == first.entry_id
        assert await balance(ledger, "wallet:ops_cut") == 900

        # mid-request: block the wallet row, let the operation wait on it, kill its backend
        k2 = key()
        tx = admin.transaction()
        await tx.start()
        await admin.execute(
            "SELECT 1 FROM ledger.accounts WHERE code = 'wallet:ops_cut' FOR UPDATE"
        )
        task = asyncio.create_task(ledger.hold(k2, "ops_cut", "ops-cut-2", 200))
        pid = None
        for _ in range(200):
            pid = await admin.fetchval(
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'mesa-ledger' "
                "AND wait_event_type = 'Lock' AND datname = current_database()"
            )
            if pid:
                break
            await asyncio.sleep(0.01)
        assert pid, "the hold never waited on the locked wallet"
        await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
        await asyncio.sleep(0.05)
        await tx.rollback()
        result = await asyncio.wait_for(task, 10)
        retried = await ledger.hold(k2, "ops_cut", "ops-cut-2", 200)
        assert retried.entry_id == result.entry_id and retried.replayed
        assert await balance(ledger, "wallet:ops_cut") == 700
        n = await admin.fetchval(
            "SELECT count(*) FROM ledger.entries WHERE idempotency_key = ANY($1)", [k, k2]
        )
        assert n == 2
    finally:
        await admin.close()


async def test_posted_entries_cannot_be_changed(ledger: Ledger, url: str) -> None:
    await funded(ledger, "ops_ro", 100)
    app = await asyncpg.connect(url, server_settings={"role": "mesa_app"})
    admin = await superuser(url)
    try:
        for sql in (
            "UPDATE ledger.entries SET reference = 'x'",
            "DELETE FROM ledger.postings",
            "TRUNCATE ledger.postings CASCADE",
            "UPDATE ledger.accounts SET kind = 'cashier'",
            "DELETE FROM ledger.accounts",
        ):
            with pytest.raises(asyncpg.exceptions.InsufficientPrivilegeError):
                await app.execute(sql)
        # even a superuser meets the triggers
        for sql in (
            "UPDATE ledger.postings SET amount = amount + 1",
            "DELETE FROM ledger.entries",
            "TRUNCATE ledger.entries CASCADE",
        ):
            with pytest.raises(asyncpg.PostgresError, match="append_only"):
                await admin.execute(sql)
        # the balance floor is also a constraint, not only a check in the function
        with pytest.raises(asyncpg.exceptions.CheckViolationError):
            await admin.execute(
                "UPDATE ledger.accounts SET balance = -1 WHERE code = 'wallet:ops_ro'"
            )
    finally:
        await app.close()
        await admin.close()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    pot=st.integers(min_value=0, max_value=10**12),
    rate=st.integers(min_value=0, max_value=10_000),
    shares=st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=16),
)
def test_sql_split_matches_python(url: str, pot: int, rate: int, shares: list[int]) -> None:
    async def sql_split() -> list[int]:
        conn = await asyncpg.connect(url)
        try:
            return list(
                await conn.fetchval("SELECT ledger.split_pot($1, $2, $3)", pot, rate, shares)
            )
        finally:
            await conn.close()

    expected = split_pot(pot, rate, shares)
    assert asyncio.run(sql_split()) == [expected.commission, *expected.payouts]
