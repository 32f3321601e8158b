"""Corrections as reversing entries: a cashier deposit or withdrawal reversed at most once,
every refusal, idempotent retries, and the books (reconcile, hash chain) still hold."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from ledger_helpers import balance, entry_count, funded, key, refused, seated_match, superuser
from litestar.testing import AsyncTestClient

from ledger import cashier_cli, chain, cli, reports
from ledger.errors import LedgerError
from ledger.ops import Ledger, Winner
from services.ledger.app import create_app
from services.ledger.contract import EntryResult
from tests.conftest import make_settings
from tests.service_auth import AS_DECLARED, CallerByRoute, ledger_caller


async def test_reverse_a_deposit_and_a_withdrawal(ledger: Ledger) -> None:
    await ledger.open_wallet("rv_a")
    dep = await ledger.deposit(key(), "rv_a", 2500, "USD", "pay-1")
    rev = await ledger.reverse(key(), dep.entry_id, "typo-1")
    assert rev.kind == "reversal" and not rev.replayed
    assert rev.reverses_entry_id == dep.entry_id and rev.reverses_kind == "deposit"
    assert rev.player == "rv_a" and rev.reference == "typo-1"
    assert [(p.account, p.amount) for p in rev.postings] == [
        ("external:cashier", 2500),
        ("wallet:rv_a", -2500),
    ]
    assert await balance(ledger, "wallet:rv_a") == 0

    await funded(ledger, "rv_a", 1000)
    wd = await ledger.withdraw(key(), "rv_a", 400, "USD", "wd-1")
    assert await balance(ledger, "wallet:rv_a") == 600
    back = await ledger.reverse(key(), wd.entry_id, "wd-not-sent")
    assert [(p.account, p.amount) for p in back.postings] == [
        ("wallet:rv_a", 400),
        ("external:cashier", -400),
    ]
    assert await balance(ledger, "wallet:rv_a") == 1000


async def test_reversal_refusals_post_nothing(ledger: Ledger, url: str) -> None:
    await funded(ledger, "rv_b", 5000)
    await funded(ledger, "rv_c", 5000)
    await ledger.open_wallet("rv_b")
    dep = await ledger.deposit(key(), "rv_b", 300, "USD", "pay-b")
    hold = await ledger.hold(key(), "rv_b", "rv-res-1", 100, "USD", "t1")
    await seated_match(ledger, "rv-m1", ["rv_b", "rv_c"], 200)
    settle = await ledger.settle_match(key(), "rv-m1", [Winner("rv_b")], 1000)
    await seated_match(ledger, "rv-m2", ["rv_b", "rv_c"], 200)
    void = await ledger.void_match(key(), "rv-m2", "aborted")
    first = await ledger.reverse(key(), dep.entry_id, "fix-b")

    before = await entry_count(url)
    wallet_before = await balance(ledger, "wallet:rv_b")
    await refused(ledger.reverse(key(), 10**12, "x"), 404, "unknown_entry")
    await refused(ledger.reverse(key(), dep.entry_id, "again"), 409, "entry_already_reversed")
    for entry_id in (hold.entry_id, settle.entry_id, void.entry_id, first.entry_id):
        await refused(ledger.reverse(key(), entry_id, "x"), 422, "entry_not_reversible")
    conn = await superuser(url)
    try:
        start_id = await conn.fetchval(
            "SELECT id FROM ledger.entries WHERE kind = 'start' AND match_id = 'rv-m1'"
        )
    finally:
        await conn.close()
    await refused(ledger.reverse(key(), int(start_id), "x"), 422, "entry_not_reversible")
    assert await entry_count(url) == before
    assert await balance(ledger, "wallet:rv_b") == wallet_before


async def test_reversing_a_spent_deposit_is_insufficient_funds(ledger: Ledger, url: str) -> None:
    await ledger.open_wallet("rv_d")
    dep = await ledger.deposit(key(), "rv_d", 1000, "USD", "pay-d")
    await ledger.withdraw(key(), "rv_d", 700, "USD", "cash-out")
    before = await entry_count(url)
    error = await refused(ledger.reverse(key(), dep.entry_id, "fix-d"), 422, "insufficient_funds")
    assert "wallet:rv_d" in error.detail
    assert await entry_count(url) == before
    assert await balance(ledger, "wallet:rv_d") == 300
    # once the money is back the reversal goes through (it was refused, not recorded)
    await funded(ledger, "rv_d", 700)
    await ledger.reverse(key(), dep.entry_id, "fix-d")
    assert await balance(ledger, "wallet:rv_d") == 0


async def test_idempotent_retry_and_key_reuse(ledger: Ledger, url: str) -> None:
    await ledger.open_wallet("rv_e")
    dep = await ledger.deposit(key(), "rv_e", 900, "USD", "pay-e")
    await ledger.open_wallet("rv_e")
    other = await ledger.deposit(key(), "rv_e", 100, "USD", "pay-e2")
    k = key("rev")
    first = await ledger.reverse(k, dep.entry_id, "fix-e")
    again = await ledger.reverse(k, dep.entry_id, "fix-e")
    assert again.replayed and again.entry_id == first.entry_id
    assert again.postings == first.postings
    await refused(ledger.reverse(k, dep.entry_id, "other"), 409, "idempotency_key_reused")
    await refused(ledger.reverse(k, other.entry_id, "fix-e"), 409, "idempotency_key_reused")
    await refused(ledger.deposit(k, "rv_e", 900, "USD", "fix-e"), 409, "idempotency_key_reused")
    assert await balance(ledger, "wallet:rv_e") == 100


async def test_concurrent_reversals_of_one_entry_post_once(ledger: Ledger) -> None:
    await funded(ledger, "rv_f", 10_000)
    await ledger.open_wallet("rv_f")
    dep = await ledger.deposit(key(), "rv_f", 500, "USD", "pay-f")
    k = key("same")
    outcomes = await asyncio.gather(
        *(ledger.reverse(k, dep.entry_id, "fix-f") for _ in range(3)),
        *(ledger.reverse(key(), dep.entry_id, f"fix-f{i}") for i in range(5)),
        return_exceptions=True,
    )
    posted = {o.entry_id for o in outcomes if not isinstance(o, BaseException)}
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(posted) == 1
    assert all(isinstance(e, LedgerError) and e.code == "entry_already_reversed" for e in errors)
    assert await balance(ledger, "wallet:rv_f") == 10_000


async def test_books_hold_with_reversals(
    ledger: Ledger, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    await ledger.open_wallet("rv_g")
    dep = await ledger.deposit(key(), "rv_g", 1234, "USD", "pay-g")
    # `mesa cashier` posts no correction: a reversal is a refund proposal that a second
    # finance user approves (api/refunds.py); the command is a usage error, nothing posted
    argv = ["reverse", str(dep.entry_id), "--reference", "rv-fix-g"]
    assert await cashier_cli.run(argv, url) == 2
    assert "invalid choice: 'reverse'" in capsys.readouterr().err
    assert await balance(ledger, "wallet:rv_g") == 1234
    k = key("fix-g")
    first = await ledger.reverse(k, dep.entry_id, "rv-fix-g")
    assert first.reverses_entry_id == dep.entry_id
    assert await balance(ledger, "wallet:rv_g") == 0
    assert (await ledger.reverse(k, dep.entry_id, "rv-fix-g")).replayed
    await refused(ledger.reverse(key(), dep.entry_id, "b"), 409, "entry_already_reversed")
    await refused(ledger.reverse(key(), 999_999_999, "c"), 404, "unknown_entry")

    today = dt.datetime.now(dt.UTC).date().isoformat()
    assert await cli.run(["reconcile"], url) == 0
    assert await cli.run(["reconcile", "--date", today], url) == 0
    assert await cli.run(["verify-chain"], url) == 0
    capsys.readouterr()
    conn = await superuser(url)
    try:
        report = await reports.statement(conn, "rv_g", None, None)
        assert report is not None
        assert [line["kind"] for line in report["lines"]] == ["deposit", "reversal"]
        await chain.seal(conn)
        verified = await chain.verify(conn)
        assert verified.ok and verified.verified >= 2
    finally:
        await conn.close()


async def test_reconcile_names_a_forged_reversal(url: str, ledger: Ledger) -> None:
    hold = await ledger.hold(key(), "rv_a", "rv-res-forged", 10, "USD", "t")
    conn = await superuser(url)
    try:
        # a superuser records a hold entry as "reversing" a deposit: reconcile names it
        dep_id = await conn.fetchval(
            "SELECT id FROM ledger.entries WHERE kind = 'deposit' "
            "AND id NOT IN (SELECT reversed_entry_id FROM ledger.reversals) ORDER BY id LIMIT 1"
        )
        await conn.execute(
            "INSERT INTO ledger.reversals (reversed_entry_id, reversal_entry_id) VALUES ($1, $2)",
            dep_id,
            hold.entry_id,
        )
        report = await reports.reconcile(conn)
        problems = [d for d in report["discrepancies"] if d.startswith("reversals:")]
        assert problems == [
            f"reversals: entry {hold.entry_id} is recorded as reversing entry {dep_id} "
            "but is a hold"
        ]
        await conn.execute("ALTER TABLE ledger.reversals DISABLE TRIGGER reversals_append_only")
        await conn.execute(
            "DELETE FROM ledger.reversals WHERE reversal_entry_id = $1", hold.entry_id
        )
        await conn.execute("ALTER TABLE ledger.reversals ENABLE TRIGGER reversals_append_only")
        assert (await reports.reconcile(conn))["ok"]
    finally:
        await conn.close()


async def test_reversals_cannot_be_changed(url: str, ledger: Ledger) -> None:
    await ledger.open_wallet("rv_h")
    dep = await ledger.deposit(key(), "rv_h", 50, "USD", "pay-h")
    await ledger.reverse(key(), dep.entry_id, "fix-h")
    app = await Ledger.connect(url, min_size=1, max_size=1)
    try:
        async with app.pool.acquire() as conn:
            for sql in (
                "UPDATE ledger.reversals SET reversal_entry_id = reversal_entry_id",
                "DELETE FROM ledger.reversals",
            ):
                with pytest.raises(Exception) as info:
                    await conn.execute(sql)
                assert "permission denied" in str(info.value) or "append_only" in str(info.value)
    finally:
        await app.close()


@pytest.fixture
async def client(url: str, internal_secret: bytes) -> AsyncIterator[AsyncTestClient[Any]]:
    settings = make_settings(url, internal_secret)
    app = create_app(settings, pool_size=4, seal_in_background=False)
    async with AsyncTestClient(app) as c:
        c.headers["Authorization"] = AS_DECLARED
        c.auth = CallerByRoute(internal_secret, "ledger", ledger_caller)
        yield c


async def test_reversals_through_the_api(client: AsyncTestClient[Any]) -> None:
    assert (await client.post("/v1/accounts", json={"player": "rv_api"})).status_code == 200
    response = await client.post(
        "/v1/deposits",
        json={"idempotency_key": key(), "player": "rv_api", "amount": 800, "reference": "p"},
    )
    assert response.status_code == 200, response.text
    dep = msgspec.json.decode(response.content, type=EntryResult)
    body = {"idempotency_key": key(), "entry_id": dep.entry_id, "reference": "fix"}
    first = await client.post("/v1/reversals", json=body)
    assert first.status_code == 200, first.text
    rev = msgspec.json.decode(first.content, type=EntryResult)
    assert rev.kind == "reversal" and rev.reverses_entry_id == dep.entry_id
    again = await client.post("/v1/reversals", json=body)
    assert again.status_code == 200 and again.json()["replayed"] is True
    assert again.json()["entry_id"] == rev.entry_id

    def refusal(response: Any, status: int, code: str) -> None:
        assert response.status_code == status, response.text
        assert response.json()["error"] == code, response.text

    refusal(await client.post("/v1/reversals", json={**body, "reference": "other"}), 409,
            "idempotency_key_reused")  # fmt: skip
    refusal(
        await client.post("/v1/reversals", json={**body, "idempotency_key": key()}),
        409,
        "entry_already_reversed",
    )
    refusal(
        await client.post(
            "/v1/reversals", json={**body, "idempotency_key": key(), "entry_id": rev.entry_id}
        ),
        422,
        "entry_not_reversible",
    )
    refusal(
        await client.post(
            "/v1/reversals", json={**body, "idempotency_key": key(), "entry_id": 10**12}
        ),
        404,
        "unknown_entry",
    )
    for bad in (
        {**body, "entry_id": 0},
        {**body, "entry_id": "1"},
        {"idempotency_key": key(), "entry_id": 1},
        {**body, "extra": 1},
    ):
        refusal(await client.post("/v1/reversals", json=bad), 400, "invalid_request")
    wallet = await client.get("/v1/wallets/rv_api")
    assert wallet.json()["balance"] == 0
