"""The ledger's internal HTTP API through Litestar's test client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from ledger_helpers import key, superuser
from litestar.testing import AsyncTestClient

from ledger.ops import Ledger
from services.common.metrics import REGISTRY
from services.ledger.app import count_open_holds, create_app, reconcile_today
from services.ledger.contract import EntryResult, WalletBalance
from tests.conftest import make_settings
from tests.service_auth import AS_DECLARED, CallerByRoute, ledger_caller


@pytest.fixture
async def client(url: str, internal_secret: bytes) -> AsyncIterator[AsyncTestClient[Any]]:
    settings = make_settings(url, internal_secret)
    app = create_app(settings, pool_size=4, seal_in_background=False)
    async with AsyncTestClient(app) as c:
        c.headers["Authorization"] = AS_DECLARED
        c.auth = CallerByRoute(internal_secret, "ledger", ledger_caller)
        yield c


async def open_wallet(client: AsyncTestClient[Any], player: str) -> None:
    response = await client.post("/v1/accounts", json={"player": player})
    assert response.status_code == 200, response.text


def entry(response: Any) -> EntryResult:
    assert response.status_code == 200, response.text
    return msgspec.json.decode(response.content, type=EntryResult)


def refusal(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"] == code, response.text


async def test_requires_a_service_credential(client: AsyncTestClient[Any]) -> None:
    del client.headers["Authorization"]
    response = await client.post(
        "/v1/deposits",
        json={"idempotency_key": key(), "player": "svc_x", "amount": 1, "reference": "r"},
    )
    refusal(response, 401, "unauthorized")
    assert (await client.get("/health")).status_code == 200


async def test_full_match_through_the_api(client: AsyncTestClient[Any]) -> None:
    for p in ("svc_a", "svc_b"):
        await open_wallet(client, p)
        entry(
            await client.post(
                "/v1/deposits",
                json={"idempotency_key": key(), "player": p, "amount": 1000, "reference": "pay"},
            )
        )
    for seat, p in enumerate(("svc_a", "svc_b")):
        held = entry(
            await client.post(
                "/v1/holds",
                json={
                    "idempotency_key": f"hold-svc-m-{seat}",
                    "player": p,
                    "reservation_id": f"svc-m-r{seat}",
                    "amount": 500,
                    "table_id": "table-9",
                },
            )
        )
        assert held.hold_account == f"hold:svc-m-r{seat}"
    start_body = {
        "idempotency_key": "start-svc-m",
        "match_id": "svc-m",
        "tier": "bronze",
        "variant": "apuesta",
        "seats": [
            {"seat": 0, "player": "svc_a", "reservation_id": "svc-m-r0"},
            {"seat": 1, "player": "svc_b", "reservation_id": "svc-m-r1"},
        ],
    }
    started = entry(await client.post("/v1/matches/start", json=start_body))
    assert started.pot == 1000
    replay = entry(await client.post("/v1/matches/start", json=start_body))
    assert replay.replayed and replay.entry_id == started.entry_id
    refusal(
        await client.post("/v1/matches/start", json={**start_body, "tier": "gold"}),
        409,
        "idempotency_key_reused",
    )
    refusal(
        await client.post(
            "/v1/matches/settle",
            json={
                "idempotency_key": key(),
                "match_id": "svc-m",
                "winners": [{"player": "svc_zed"}],
            },
        ),
        422,
        "winner_not_in_match",
    )
    settled = entry(
        await client.post(
            "/v1/matches/settle",
            json={"idempotency_key": key(), "match_id": "svc-m", "winners": [{"player": "svc_b"}]},
        )
    )
    assert settled.commission == 100 and settled.commission_rate_bp == 1000
    # the loser's statement: his stake line (a hold, made at the table before the match
    # existed) names the match, its pot's tier, variant and seats, and the house commission
    lines = (await client.get("/v1/reports/statements/svc_a")).json()["lines"]
    stake = [ln for ln in lines if ln["kind"] == "hold"]
    assert [
        (ln["match_id"], ln["tier"], ln["variant"], ln["seats"], ln["commission"]) for ln in stake
    ] == [("svc-m", "bronze", "apuesta", 2, 100)]
    deposit = next(ln for ln in lines if ln["kind"] == "deposit")
    assert (deposit["match_id"], deposit["tier"], deposit["seats"]) == (None, None, None)
    refusal(
        await client.post("/v1/matches/void", json={"idempotency_key": key(), "match_id": "svc-m"}),
        409,
        "match_already_settled",
    )
    wallet = msgspec.json.decode(
        (await client.get("/v1/wallets/svc_b")).content, type=WalletBalance
    )
    assert wallet.balance == 1400
    refusal(await client.get("/v1/wallets/svc_nobody"), 404, "unknown_account")

    pots = (await client.get("/v1/reports/pots", params={"status": "settled"})).json()
    assert [p["match_id"] for p in pots] == ["svc-m"] and pots[0]["ok"] and pots[0]["balance"] == 0
    commission = (await client.get("/v1/reports/commission", params={"by": "tier,variant"})).json()
    assert commission == [
        {
            "tier": "bronze",
            "variant": "apuesta",
            "currency": "USD",
            "matches": 1,
            "pot_total": 1000,
            "commission": 100,
        }
    ]
    csv = await client.get("/v1/reports/statements/svc_b", params={"format": "csv"})
    assert csv.headers["content-type"].startswith("text/csv") and len(csv.text.splitlines()) == 4
    tb = (await client.get("/v1/reports/trial-balance")).json()
    assert tb["balanced"] and tb["house_commission"] == {"USD": 100}
    assert (await client.get("/v1/reports/reconcile")).json()["ok"]
    assert (await client.get("/v1/reports/chain")).json()["ok"]
    refusal(
        await client.get("/v1/reports/balance", params={"account": "nope", "at": "2030-01-01"}),
        404,
        "unknown_account",
    )
    refusal(
        await client.get("/v1/reports/reconcile", params={"date": "yesterday"}), 400, "invalid_date"
    )


@pytest.mark.parametrize(
    "body",
    [
        {"player": "svc_bad", "amount": 100, "reference": "r"},  # no key
        {"idempotency_key": "k", "player": "svc_bad", "amount": 0, "reference": "r"},
        {"idempotency_key": "k", "player": "svc_bad", "amount": -100, "reference": "r"},
        {"idempotency_key": "k", "player": "svc_bad", "amount": 1.5, "reference": "r"},
        {"idempotency_key": "k", "player": "svc_bad", "amount": "100", "reference": "r"},
        {"idempotency_key": "k", "player": "svc bad!", "amount": 100, "reference": "r"},
        {"idempotency_key": "k", "player": "svc_bad", "amount": 100, "reference": "r", "x": 1},
        {
            "idempotency_key": "k",
            "player": "svc_bad",
            "amount": 100,
            "reference": "r",
            "currency": "usd",
        },
    ],
)
async def test_malformed_bodies_are_400(client: AsyncTestClient[Any], body: dict[str, Any]) -> None:
    refusal(await client.post("/v1/deposits", json=body), 400, "invalid_request")
    assert (await client.get("/v1/wallets/svc_bad")).status_code == 404  # nothing posted


async def test_a_wallet_is_opened_once_and_only_an_opened_one_takes_money(
    client: AsyncTestClient[Any],
) -> None:
    deposit = {"idempotency_key": key(), "player": "svc_new", "amount": 5, "reference": "r"}
    refusal(await client.post("/v1/deposits", json=deposit), 404, "unknown_account")
    refusal(await client.get("/v1/wallets/svc_new"), 404, "unknown_account")
    first = await client.post("/v1/accounts", json={"player": "svc_new"})
    again = await client.post("/v1/accounts", json={"player": "svc_new", "currency": "USD"})
    assert (first.json()["opened"], again.json()["opened"]) == (True, False)
    assert first.json()["account"] == "wallet:svc_new"
    refusal(
        await client.post("/v1/accounts", json={"player": "svc_new", "x": 1}),
        400,
        "invalid_request",
    )
    refusal(
        await client.post("/v1/accounts", json={"player": "svc_new", "currency": "EUR"}),
        422,
        "unsupported_currency",
    )
    assert entry(await client.post("/v1/deposits", json=deposit)).postings[1].balance_after == 5


async def test_a_replay_answers_a_posted_key_and_never_posts(
    client: AsyncTestClient[Any],
) -> None:
    await open_wallet(client, "svc_rp")
    deposit = {"idempotency_key": key(), "player": "svc_rp", "amount": 700, "reference": "r"}
    refusal(await client.post("/v1/deposits/replay", json=deposit), 404, "not_posted")
    assert (await client.get("/v1/wallets/svc_rp")).json()["balance"] == 0  # nothing posted
    posted = entry(await client.post("/v1/deposits", json=deposit))
    replayed = entry(await client.post("/v1/deposits/replay", json=deposit))
    assert replayed.replayed and not posted.replayed
    assert (replayed.entry_id, replayed.postings) == (posted.entry_id, posted.postings)
    # The same key for another request is the ledger's conflict, as a posting would be.
    other = {**deposit, "amount": 701}
    refusal(await client.post("/v1/deposits/replay", json=other), 409, "idempotency_key_reused")
    refusal(
        await client.post("/v1/withdrawals/replay", json=deposit), 409, "idempotency_key_reused"
    )
    withdrawal = {**deposit, "idempotency_key": key(), "amount": 200}
    refusal(await client.post("/v1/withdrawals/replay", json=withdrawal), 404, "not_posted")
    out = entry(await client.post("/v1/withdrawals", json=withdrawal))
    again = entry(await client.post("/v1/withdrawals/replay", json=withdrawal))
    assert again.replayed and again.entry_id == out.entry_id
    assert (await client.get("/v1/wallets/svc_rp")).json()["balance"] == 500
    refusal(
        await client.post("/v1/deposits/replay", json={**deposit, "x": 1}), 400, "invalid_request"
    )


async def test_refusals_map_to_4xx(client: AsyncTestClient[Any]) -> None:
    refusal(await client.post("/v1/deposits", content=b"{not json"), 400, "invalid_request")
    refusal(
        await client.post(
            "/v1/deposits",
            json={
                "idempotency_key": key(),
                "player": "svc_c",
                "amount": 5,
                "reference": "r",
                "currency": "EUR",
            },
        ),
        422,
        "unsupported_currency",
    )
    refusal(
        await client.post(
            "/v1/withdrawals",
            json={"idempotency_key": key(), "player": "svc_c", "amount": 5, "reference": "r"},
        ),
        404,
        "unknown_account",
    )
    refusal(
        await client.post(
            "/v1/holds",
            json={
                "idempotency_key": key(),
                "player": "svc_c",
                "reservation_id": "svc-r",
                "amount": 5,
            },
        ),
        404,
        "unknown_account",
    )
    refusal(
        await client.post(
            "/v1/holds/release", json={"idempotency_key": key(), "reservation_id": "svc-none"}
        ),
        404,
        "unknown_hold",
    )
    refusal(
        await client.post(
            "/v1/matches/settle",
            json={
                "idempotency_key": key(),
                "match_id": "svc-none",
                "winners": [{"player": "svc_c"}],
            },
        ),
        404,
        "unknown_match",
    )
    refusal(
        await client.post(
            "/v1/matches/start",
            json={
                "idempotency_key": key(),
                "match_id": "svc-one",
                "tier": "t",
                "variant": "v",
                "seats": [{"seat": 0, "player": "svc_c", "reservation_id": "x"}],
            },
        ),
        400,
        "invalid_request",
    )


async def test_posting_requests_go_through_group_commit(client: AsyncTestClient[Any]) -> None:
    """Posting requests run through the service's group commit (its batching itself is tested
    in test_ledger_batch.py: this test client hands requests to the app one at a time); each
    gets its own answer, and a refused one posts nothing."""
    await open_wallet(client, "svc_gc")
    entry(
        await client.post(
            "/v1/deposits",
            json={"idempotency_key": key(), "player": "svc_gc", "amount": 1000, "reference": "r"},
        )
    )
    group = client.app.state.group_commit
    operations = group.operations

    def hold(i: int, amount: int) -> Any:
        body = {
            "idempotency_key": f"svc-gc-{i}",
            "player": "svc_gc",
            "reservation_id": f"svc-gc-r{i}",
            "amount": amount,
            "table_id": "t",
        }
        return client.post("/v1/holds", json=body)

    # 12 holds of 100 against 1000: exactly 10 fit
    responses = await asyncio.gather(*(hold(i, 100) for i in range(12)))
    codes = sorted(r.status_code for r in responses)
    assert codes == [200] * 10 + [422] * 2, [r.text for r in responses]
    for r in responses:
        if r.status_code == 422:
            refusal(r, 422, "insufficient_funds")
    assert group.operations - operations == 12
    wallet = msgspec.json.decode(
        (await client.get("/v1/wallets/svc_gc")).content, type=WalletBalance
    )
    assert wallet.balance == 0


async def test_audit_sets_the_holds_and_reconciliation_gauges(
    client: AsyncTestClient[Any], url: str, ledger: Ledger
) -> None:
    """The service's periodic audit: open holds and today's reconciliation, as gauges (the
    alert on discrepancies reads the second)."""
    for i in range(3):
        await open_wallet(client, f"svc_au{i}")
        entry(
            await client.post(
                "/v1/deposits",
                json={
                    "idempotency_key": key(),
                    "player": f"svc_au{i}",
                    "amount": 50,
                    "reference": "r",
                },
            )
        )
        entry(
            await client.post(
                "/v1/holds",
                json={
                    "idempotency_key": key(),
                    "player": f"svc_au{i}",
                    "reservation_id": f"svc-au-r{i}",
                    "amount": 10,
                    "table_id": "t",
                },
            )
        )
    entry(
        await client.post(
            "/v1/holds/release", json={"idempotency_key": key(), "reservation_id": "svc-au-r0"}
        )
    )
    admin = await superuser(url)
    try:
        open_holds = await admin.fetchval(
            "SELECT count(*) FROM ledger.accounts WHERE kind = 'hold' AND closed_at IS NULL "
            "AND balance > 0"
        )
        assert await count_open_holds(ledger) == open_holds
        assert await count_open_holds(ledger, slice_ids=3) == open_holds  # many slices
        assert await reconcile_today(ledger) == 0
        assert REGISTRY.get_sample_value("mesa_outstanding_holds") == open_holds
        assert REGISTRY.get_sample_value("mesa_reconciliation_discrepancies") == 0
        # a balance moved behind the ledger's back, then put back
        planted = "UPDATE ledger.accounts SET balance = balance + $1 WHERE code = 'wallet:svc_au1'"
        await admin.execute(planted, 5)
        try:
            assert await reconcile_today(ledger) >= 1
            found = REGISTRY.get_sample_value("mesa_reconciliation_discrepancies")
            assert found is not None and found >= 1
        finally:
            await admin.execute(planted, -5)
        assert await reconcile_today(ledger) == 0
    finally:
        await admin.close()


async def test_a_refused_start_names_the_unusable_holds_as_data(
    client: AsyncTestClient[Any],
) -> None:
    """Matchmaking drops exactly the seats whose holds cannot be staked: the refusal carries
    them in `refs`, not in the words of its detail."""
    for p in ("svc_rf_a", "svc_rf_b"):
        await open_wallet(client, p)
        entry(
            await client.post(
                "/v1/deposits",
                json={"idempotency_key": key(), "player": p, "amount": 1000, "reference": "r"},
            )
        )
    entry(
        await client.post(
            "/v1/holds",
            json={
                "idempotency_key": key(),
                "player": "svc_rf_a",
                "reservation_id": "svc-rf-good",
                "amount": 500,
                "table_id": "t",
            },
        )
    )
    response = await client.post(
        "/v1/matches/start",
        json={
            "idempotency_key": key(),
            "match_id": "svc-rf",
            "tier": "10",
            "variant": "v",
            "seats": [
                {"seat": 0, "player": "svc_rf_a", "reservation_id": "svc-rf-good"},
                {"seat": 1, "player": "svc_rf_b", "reservation_id": "svc-rf-missing"},
            ],
        },
    )
    refusal(response, 404, "unknown_hold")
    assert response.json()["refs"] == {"reservations": ["svc-rf-missing"]}
    # a refusal about nothing in particular has no refs at all
    other = await client.post(
        "/v1/holds/release", json={"idempotency_key": key(), "reservation_id": "svc-none"}
    )
    assert "refs" not in other.json()
