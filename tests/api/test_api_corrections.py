"""Corrections by finance with four eyes: a finance user proposes reversing a cashier deposit
or withdrawal (the refund proposal of `api.refunds`, with or without a dispute); only another
finance user approves it, and the ledger posts one reversal however often it is approved; the
proposer, a player or a support user cannot decide it; an entry the ledger does not reverse is
refused with the ledger's code; each step is a line of the staff audit log."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from api.backends import call, get_backends
from api.refunds import reversal_of
from services.common.migrate import upgrade
from services.ledger.contract import EntryResult
from tests.api.api_helpers import make_user, sign_in
from tests.api.platform_stack import COMPONENTS, platform


@pytest.fixture(scope="module")
def platform_db(database_url: str) -> str:
    upgrade(database_url, COMPONENTS)
    return database_url


async def _balance(fin: httpx.AsyncClient, player: str) -> int:
    r = await fin.get(f"/api/finance/statements/{player}")
    assert r.status_code == 200, r.text
    cents: int = r.json()["closing_balance"]
    return cents


async def _audit(client: httpx.AsyncClient, player: str) -> list[dict[str, Any]]:
    r = await client.get("/api/staff/audit", params={"subject": f"user:{player}"})
    assert r.status_code == 200, r.text
    actions: list[dict[str, Any]] = r.json()["actions"]
    return actions


async def test_finance_proposes_a_correction_and_only_another_finance_user_approves_it(
    platform_db, internal_secret, tmp_path
):
    await make_user(platform_db, "co_pla")
    await make_user(platform_db, "co_fin", "finance")
    await make_user(platform_db, "co_fin2", "finance")
    await make_user(platform_db, "co_sup", "support")
    await make_user(platform_db, "co_adm", "admin")
    async with platform(platform_db, internal_secret, tmp_path) as p:
        async with (
            p.client() as fin,
            p.client() as fin2,
            p.client() as sup,
            p.client() as pla,
            p.client() as adm,
        ):
            for client, name in (
                (fin, "co_fin"),
                (fin2, "co_fin2"),
                (sup, "co_sup"),
                (pla, "co_pla"),
                (adm, "co_adm"),
            ):
                await sign_in(client, name)
            r = await fin.post(
                "/api/finance/deposits",
                json={"player": "co_pla", "amount": 4000, "reference": "typed 40 for 4"},
            )
            assert r.status_code == 200, r.text
            deposit = r.json()["entry_id"]
            assert await _balance(fin, "co_pla") == 4000

            # bad input and strangers' proposals change nothing
            for body, status, code in (
                ({"player": "co_pla", "entry_id": deposit}, 400, None),
                ({"player": "co_pla", "entry_id": deposit, "reason": "x", "x": 1}, 400, None),
                (
                    {"player": "co_pla", "entry_id": deposit, "reason": " \n"},
                    400,
                    "invalid_request",
                ),
                (
                    {"player": "co_nobody", "entry_id": deposit, "reason": "x"},
                    404,
                    "no_such_player",
                ),
                (
                    {"player": "co_pla", "entry_id": 10**9, "reason": "x"},
                    404,
                    "entry_not_in_statement",
                ),
            ):
                r = await fin.post("/api/finance/refunds", json=body)
                assert r.status_code == status, r.text
                assert code is None or r.json()["error"] == code
            for stranger in (pla, sup):
                r = await stranger.post(
                    "/api/finance/refunds",
                    json={"player": "co_pla", "entry_id": deposit, "reason": "x"},
                )
                assert r.status_code == 403 and r.json()["error"] == "forbidden"

            r = await fin.post(
                "/api/finance/refunds",
                json={"player": "co_pla", "entry_id": deposit, "reason": "typed 40 for 4"},
            )
            assert r.status_code == 201, r.text
            proposal = r.json()
            assert proposal["status"] == "proposed" and proposal["proposed_by"] == "co_fin"
            assert proposal["entry_kind"] == "deposit" and proposal["amount"] == 4000
            pid = proposal["id"]
            assert await _balance(fin, "co_pla") == 4000  # a proposal moves nothing

            # four eyes: the proposer cannot decide his own; a player or support cannot at all
            approve = {"reason": "bank shows 4.00"}
            for verdict in ("approve", "reject"):
                r = await fin.post(f"/api/finance/refunds/{pid}/{verdict}", json=approve)
                assert r.status_code == 403 and r.json()["error"] == "proposer_cannot_decide"
                r = await fin2.post(f"/api/finance/refunds/{pid}/{verdict}", json={"reason": " "})
                assert r.status_code == 400 and r.json()["error"] == "invalid_request"
            for stranger in (pla, sup):
                r = await stranger.post(f"/api/finance/refunds/{pid}/approve", json=approve)
                assert r.status_code == 403 and r.json()["error"] == "forbidden"
            assert await _balance(fin, "co_pla") == 4000

            r = await fin2.post(f"/api/finance/refunds/{pid}/approve", json=approve)
            assert r.status_code == 200, r.text
            done = r.json()
            assert done["status"] == "approved" and done["decided_by"] == "co_fin2"
            assert await _balance(fin, "co_pla") == 0
            # a retry is the same reversal; the proposer is still refused afterwards
            again = await fin2.post(f"/api/finance/refunds/{pid}/approve", json=approve)
            assert again.status_code == 200
            assert again.json()["reversal_entry_id"] == done["reversal_entry_id"]
            late = await fin.post(f"/api/finance/refunds/{pid}/approve", json=approve)
            assert late.status_code == 403 and late.json()["error"] == "proposer_cannot_decide"
            lines = (await fin.get("/api/finance/statements/co_pla")).json()["lines"]
            assert [x["kind"] for x in lines] == ["deposit", "reversal"]
            assert lines[-1]["entry_id"] == done["reversal_entry_id"]
            assert await _balance(fin, "co_pla") == 0

            # the reversal is not reversible: the ledger's code, before anyone decides
            r = await fin.post(
                "/api/finance/refunds",
                json={"player": "co_pla", "entry_id": done["reversal_entry_id"], "reason": "undo"},
            )
            assert r.status_code == 422 and r.json()["error"] == "entry_not_reversible"

            # with a dispute: support's dispute, finance's proposal, rejected by the other
            r = await sup.post(
                "/api/support/disputes", json={"player": "co_pla", "reason": "paid out twice?"}
            )
            assert r.status_code == 201, r.text
            dispute = r.json()["id"]
            r = await fin.post(
                "/api/finance/deposits",
                json={"player": "co_pla", "amount": 700, "reference": "desk"},
            )
            assert r.status_code == 200, r.text
            second = r.json()["entry_id"]
            r = await fin2.post(
                "/api/finance/refunds",
                json={
                    "player": "co_pla",
                    "entry_id": second,
                    "reason": "per the dispute",
                    "dispute_id": dispute,
                },
            )
            assert r.status_code == 201 and r.json()["dispute_id"] == dispute
            other = r.json()["id"]
            r = await fin.post(f"/api/finance/refunds/{other}/reject", json={"reason": "no"})
            assert r.status_code == 200 and r.json()["status"] == "rejected"
            assert await _balance(fin, "co_pla") == 700

            log = await _audit(adm, "co_pla")
            steps = [
                (a["action"], a["actor"], a["detail"].get("refund_id"))
                for a in log
                if "refund" in a["action"]
            ]
            assert steps == [
                ("finance.refund_reject", "co_fin", other),
                ("finance.refund_propose", "co_fin2", other),
                ("finance.refund_approve", "co_fin2", pid),
                ("finance.refund_propose", "co_fin", pid),
            ]
            approved = next(a for a in log if a["action"] == "finance.refund_approve")
            assert approved["detail"]["idempotency_key"] == f"refund-proposal:{pid}"
            assert approved["reason"] == "bank shows 4.00"


async def test_an_approval_after_a_lost_answer_replays_the_reversal_whoever_retries(
    platform_db, internal_secret, tmp_path
):
    await make_user(platform_db, "lo_pla")
    await make_user(platform_db, "lo_fin", "finance")
    await make_user(platform_db, "lo_fin2", "finance")
    await make_user(platform_db, "lo_adm", "admin")
    async with platform(platform_db, internal_secret, tmp_path) as p:
        async with p.client() as fin, p.client() as fin2, p.client() as adm:
            await sign_in(fin, "lo_fin")
            await sign_in(fin2, "lo_fin2")
            await sign_in(adm, "lo_adm")
            r = await fin.post(
                "/api/finance/deposits",
                json={"player": "lo_pla", "amount": 900, "reference": "desk"},
            )
            assert r.status_code == 200, r.text
            deposit = r.json()["entry_id"]
            r = await fin.post(
                "/api/finance/refunds",
                json={"player": "lo_pla", "entry_id": deposit, "reason": "wrong player"},
            )
            assert r.status_code == 201, r.text
            pid = r.json()["id"]
            # an approval whose answer was lost: the ledger posted, the proposal stays proposed
            lost = await call(
                "ledger",
                get_backends(p.gateway.state).ledger.post(
                    "/v1/reversals",
                    reversal_of(pid, deposit, "lo_pla", "wrong player"),
                    EntryResult,
                ),
            )
            assert not lost.replayed
            assert (await fin.get("/api/finance/refunds")).json()[0]["id"] == pid
            # another approver, with his own reason: the same posting, not a refusal
            r = await fin2.post(f"/api/finance/refunds/{pid}/approve", json={"reason": "seen"})
            assert r.status_code == 200, r.text
            assert r.json()["reversal_entry_id"] == lost.entry_id
            assert await _balance(fin, "lo_pla") == 0
            approved = [a for a in await _audit(adm, "lo_pla") if "approve" in a["action"]]
            assert [a["detail"]["replayed"] for a in approved] == [True]
