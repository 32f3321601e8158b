"""Support (issue #27) against the real ledger, engine and matchmaking: support reads a
player's account, sessions, matches and statement but moves no money and changes no account;
dispute notes append and are logged; a refund is a proposal that a finance user other than
its proposer approves (one reversal, however often approved) or rejects (nothing moves); a
finished hand replays in the page's `stepsOf` exactly as the rules core replays it."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from fairness.transcript import decode_transcript
from fairness.verify import replay_scenario
from services.common.migrate import upgrade
from services.engine.rules.replay import replay
from tests.api.api_helpers import make_user, sign_in
from tests.api.platform_stack import COMPONENTS, platform, play_turns

STEPS_SCRIPT = Path(__file__).parent / "page" / "replay_steps.mjs"
MAX_LOCK_POLLS = 1500  # of 20 ms: the approvals reach their locks within a second or two


@pytest.fixture(scope="module")
def platform_db(database_url: str) -> str:
    upgrade(database_url, COMPONENTS)
    return database_url


@pytest.fixture(scope="module")
def node() -> str:
    found = shutil.which("node")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("node is missing in CI: .ci/run installs nodejs")
        pytest.skip("node is not installed")
    return found


async def _deposit(fin: httpx.AsyncClient, player: str, cents: int) -> int:
    r = await fin.post(
        "/api/finance/deposits", json={"player": player, "amount": cents, "reference": "desk"}
    )
    assert r.status_code == 200, r.text
    entry_id: int = r.json()["entry_id"]
    return entry_id


async def _audit(client: httpx.AsyncClient, player: str) -> list[dict[str, Any]]:
    r = await client.get("/api/staff/audit", params={"subject": f"user:{player}"})
    assert r.status_code == 200, r.text
    actions: list[dict[str, Any]] = r.json()["actions"]
    return actions


async def test_support_sees_a_player_but_moves_no_money_and_changes_no_account(
    platform_db, internal_secret, tmp_path
):
    await make_user(platform_db, "su_pat")
    await make_user(platform_db, "su_pam")  # a second match for the prefix search
    await make_user(platform_db, "su_help", "support")
    await make_user(platform_db, "su_cash", "finance")
    async with platform(platform_db, internal_secret, tmp_path) as p:
        async with p.signed_in("su_cash", "su_pat", "su_help") as (fin, pat, sup):
            await _deposit(fin, "su_pat", 1500)

            found = (await sup.get("/api/support/players", params={"q": "SU_PA"})).json()
            assert [x["id"] for x in found["players"]] == ["su_pam", "su_pat"]
            first = (
                await sup.get("/api/support/players", params={"q": "su_pa", "limit": 1})
            ).json()
            assert first["next"] == "su_pam"
            blank = await sup.get("/api/support/players", params={"q": "  "})
            assert blank.status_code == 400
            # staff are not players: support finds no staff account
            assert (await sup.get("/api/support/players", params={"q": "su_help"})).json()[
                "players"
            ] == []

            r = await pat.post("/api/me/limits", json={"limits": {"loss_day": 5000}})
            assert r.status_code == 200, r.text
            profile = (await sup.get("/api/support/players/su_pat")).json()
            assert profile["status"] == "active" and profile["wallet"]["balance"] == 1500
            # support sees the limits as they apply (the player's own, never changed here)
            assert profile["limits"]["loss_day"]["cents"] == 5000
            assert profile["limits"]["deposit_day"]["cents"] is None
            [session] = profile["sessions"]
            assert session["kind"] == "cookie" and session["live"] is True
            assert set(session) == {
                "kind",
                "label",
                "created_at",
                "expires_at",
                "revoked_at",
                "live",
            }
            raw = json.dumps(profile)
            assert "token" not in raw and "csrf" not in raw and "hash" not in raw

            statement = (await sup.get("/api/support/players/su_pat/statement")).json()
            assert [(x["kind"], x["amount"]) for x in statement["lines"]] == [("deposit", 1500)]
            matches = await sup.get("/api/support/players/su_pat/matches")
            assert matches.status_code == 200 and matches.json()["transcripts"] == []
            assert (await sup.get("/api/support/players/nobody_here")).status_code == 404
            assert (await sup.get("/api/support/players/su_cash")).status_code == 404

            # support may not move money nor change an account
            deposit = await sup.post(
                "/api/finance/deposits",
                json={"player": "su_pat", "amount": 100, "reference": "gift"},
            )
            assert deposit.status_code == 403
            lock = await sup.patch(
                "/api/admin/users/su_pat", json={"status": "locked", "reason": "because"}
            )
            assert lock.status_code == 403
            # and a player may not use support's routes
            assert (await pat.get("/api/support/players", params={"q": "su"})).status_code == 403
            assert (await pat.get("/api/support/players/su_pat")).status_code == 403
            after = (await sup.get("/api/support/players/su_pat")).json()
            assert after["wallet"]["balance"] == 1500 and after["status"] == "active"


async def test_dispute_notes_append_are_logged_and_close(platform_db, internal_secret, tmp_path):
    await make_user(platform_db, "di_pla")
    await make_user(platform_db, "di_sup", "support")
    await make_user(platform_db, "di_adm", "admin")
    async with platform(platform_db, internal_secret, tmp_path) as p:
        async with p.signed_in("di_sup", "di_adm") as (sup, adm):
            bad = await sup.post(
                "/api/support/disputes",
                json={"player": "di_pla", "reason": "x", "sneaky": True},
            )
            assert bad.status_code == 400
            assert (
                await sup.post("/api/support/disputes", json={"player": "di_pla", "reason": ""})
            ).status_code == 400
            r = await sup.post(
                "/api/support/disputes",
                json={"player": "di_pla", "reason": "says the 6-6 was his", "match_id": "m-1"},
            )
            assert r.status_code == 201, r.text
            dispute = r.json()
            assert dispute["status"] == "open" and dispute["opened_by"] == "di_sup"
            assert [n["body"] for n in dispute["notes"]] == ["says the 6-6 was his"]
            did = dispute["id"]
            r = await sup.post(f"/api/support/disputes/{did}/notes", json={"note": "replayed it"})
            assert r.status_code == 201
            assert [n["body"] for n in r.json()["notes"]] == ["says the 6-6 was his", "replayed it"]
            # admins read disputes but do not write them
            assert (await adm.get(f"/api/support/disputes/{did}")).json()["id"] == did
            listed = (await adm.get("/api/support/disputes", params={"status": "open"})).json()
            assert [(d["id"], len(d["notes"])) for d in listed] == [(did, 2)]
            assert (
                await adm.post(f"/api/support/disputes/{did}/notes", json={"note": "hi"})
            ).status_code == 403
            r = await sup.post(
                f"/api/support/disputes/{did}/close", json={"reason": "the hand was right"}
            )
            assert r.status_code == 200
            assert r.json()["status"] == "closed" and r.json()["closed_by"] == "di_sup"
            late = await sup.post(f"/api/support/disputes/{did}/notes", json={"note": "more"})
            assert late.status_code == 409 and late.json()["error"] == "dispute_closed"
            again = await sup.post(f"/api/support/disputes/{did}/close", json={"reason": "again"})
            assert again.status_code == 409
            profile = (await sup.get("/api/support/players/di_pla")).json()
            assert [d["id"] for d in profile["disputes"]] == [did]
            log = await _audit(adm, "di_pla")
            assert [(a["action"], a["actor"], a["reason"]) for a in log] == [
                ("support.dispute_close", "di_sup", "the hand was right"),
                ("support.dispute_note", "di_sup", "replayed it"),
                ("support.dispute_open", "di_sup", "says the 6-6 was his"),
            ]
            assert all(a["detail"]["dispute_id"] == did for a in log)
    conn = await asyncpg.connect(platform_db.replace("postgresql+asyncpg", "postgresql"))
    try:
        for statement in (
            "UPDATE gateway.dispute_notes SET body = 'nothing was said'",
            "DELETE FROM gateway.dispute_notes",
        ):
            with pytest.raises(asyncpg.RaiseError, match="append-only"):
                await conn.execute(statement)
    finally:
        await conn.close()


async def test_refund_is_proposed_by_support_and_decided_by_another_finance_user(
    platform_db, internal_secret, tmp_path
):
    await make_user(platform_db, "rf_pla")
    await make_user(platform_db, "rf_sup", "support")
    await make_user(platform_db, "rf_sup2", "support")
    await make_user(platform_db, "rf_fin", "finance")
    await make_user(platform_db, "rf_adm", "admin")
    async with platform(platform_db, internal_secret, tmp_path) as p:
        async with p.signed_in("rf_fin", "rf_sup", "rf_sup2", "rf_adm") as (fin, sup, sup2, adm):
            deposit = await _deposit(fin, "rf_pla", 5000)
            r = await fin.post(
                "/api/finance/withdrawals",
                json={"player": "rf_pla", "amount": 2000, "reference": "paid out twice"},
            )
            assert r.status_code == 200
            withdrawal = r.json()["entry_id"]

            async def balance() -> int:
                profile = (await sup.get("/api/support/players/rf_pla")).json()
                cents: int = profile["wallet"]["balance"]
                return cents

            assert await balance() == 3000
            # an entry that is not the player's, and a missing reason, are refused
            missing = await sup.post(
                "/api/support/refunds",
                json={"player": "rf_pla", "entry_id": 10**9, "reason": "x"},
            )
            assert missing.status_code == 404
            assert missing.json()["error"] == "entry_not_in_statement"
            assert (
                await sup.post(
                    "/api/support/refunds", json={"player": "rf_pla", "entry_id": withdrawal}
                )
            ).status_code == 400
            r = await sup.post(
                "/api/support/refunds",
                json={"player": "rf_pla", "entry_id": withdrawal, "reason": "double payout"},
            )
            assert r.status_code == 201, r.text
            proposal = r.json()
            assert proposal["status"] == "proposed" and proposal["amount"] == -2000
            assert proposal["entry_kind"] == "withdrawal" and proposal["currency"] == "USD"
            pid = proposal["id"]
            twice = await sup2.post(
                "/api/support/refunds",
                json={"player": "rf_pla", "entry_id": withdrawal, "reason": "same again"},
            )
            assert twice.status_code == 409
            assert twice.json()["error"] == "refund_already_proposed"
            assert await balance() == 3000  # a proposal moves nothing

            # support cannot approve; finance sees it pending
            approve = {"reason": "checked the bank"}
            assert (
                await sup.post(f"/api/finance/refunds/{pid}/approve", json=approve)
            ).status_code == 403
            pending = (await fin.get("/api/finance/refunds")).json()
            assert [x["id"] for x in pending] == [pid]

            r = await fin.post(f"/api/finance/refunds/{pid}/approve", json=approve)
            assert r.status_code == 200, r.text
            done = r.json()
            assert done["status"] == "approved" and done["decided_by"] == "rf_fin"
            assert await balance() == 5000
            # a retried approval is the same reversal, not a second one
            again = await fin.post(f"/api/finance/refunds/{pid}/approve", json=approve)
            assert again.status_code == 200
            assert again.json()["reversal_entry_id"] == done["reversal_entry_id"]
            assert await balance() == 5000
            lines = (await sup.get("/api/support/players/rf_pla/statement")).json()["lines"]
            assert [x["kind"] for x in lines].count("reversal") == 1
            assert (await fin.get("/api/finance/refunds")).json() == []
            # the reversal itself is not reversible: the ledger's refusal, said at once
            r = await sup.post(
                "/api/support/refunds",
                json={
                    "player": "rf_pla",
                    "entry_id": done["reversal_entry_id"],
                    "reason": "undo it",
                },
            )
            assert r.status_code == 422 and r.json()["error"] == "entry_not_reversible"

            # a proposer who later works in finance still cannot decide his own proposal
            r = await sup2.post(
                "/api/support/refunds",
                json={"player": "rf_pla", "entry_id": deposit, "reason": "deposit by mistake"},
            )
            assert r.status_code == 201
            own = r.json()["id"]
            r = await adm.patch(
                "/api/admin/users/rf_sup2", json={"role": "finance", "reason": "moved desks"}
            )
            assert r.status_code == 200
            await sign_in(sup2, "rf_sup2")
            mine = await sup2.post(f"/api/finance/refunds/{own}/approve", json=approve)
            assert mine.status_code == 403
            assert mine.json()["error"] == "proposer_cannot_decide"
            assert await balance() == 5000
            # rejected: nothing moves, and it stays rejected
            r = await fin.post(f"/api/finance/refunds/{own}/reject", json={"reason": "it was his"})
            assert r.status_code == 200 and r.json()["status"] == "rejected"
            late = await fin.post(f"/api/finance/refunds/{own}/approve", json=approve)
            assert late.status_code == 409 and late.json()["error"] == "refund_decided"
            assert await balance() == 5000

            log = await _audit(adm, "rf_pla")
            refund_log = [
                (a["action"], a["actor"], a["reason"])
                for a in log
                if a["action"].split(".")[1].startswith("refund")
            ]
            assert refund_log == [
                ("finance.refund_reject", "rf_fin", "it was his"),
                ("support.refund_propose", "rf_sup2", "deposit by mistake"),
                ("finance.refund_approve", "rf_fin", "checked the bank"),
                ("support.refund_propose", "rf_sup", "double payout"),
            ]
            approved = next(a for a in log if a["action"] == "finance.refund_approve")
            assert approved["detail"]["idempotency_key"] == f"refund-proposal:{pid}"


async def _until_waiting(conn: asyncpg.Connection, sessions: int) -> None:
    """Returns once `sessions` other sessions of this database wait on a lock (`conn` in no
    transaction: a transaction sees one snapshot of pg_stat_activity)."""
    for _ in range(MAX_LOCK_POLLS):
        waiting = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
        )
        if waiting >= sessions:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{sessions} sessions never waited on a lock")


def _core_steps(doc: dict[str, Any]) -> list[tuple[Any, ...]]:
    events = replay(replay_scenario(decode_transcript(json.dumps(doc))))["events"]
    return [
        (e["type"], e["seat"], e.get("tile") if e["type"] == "play" else None, e.get("ends"))
        for e in events
        if e["type"] in ("play", "pass", "draw")
    ]


def _page_steps(steps: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (s["kind"], s["seat"], s.get("tile") if s["kind"] == "play" else None, s.get("ends"))
        if s["kind"] == "play"
        else (s["kind"], s["seat"], None, None)
        for s in steps
        if s["kind"] in ("play", "pass", "draw")
    ]


@pytest.mark.parametrize("kind", ["apuesta-parejas", "dominicana-1v1-100", "casa-duelo"])
async def test_a_finished_hand_replays_in_the_page_as_the_rules_core_replays_it(
    platform_db, internal_secret, tmp_path, node, kind
):
    player = f"rp_{kind.split('-')[0][:4]}_{kind.split('-')[1][:3]}"
    await make_user(platform_db, player)
    await make_user(platform_db, f"rps_{kind[:5]}", "support")
    async with platform(platform_db, internal_secret, tmp_path) as p:
        async with p.signed_in(player, f"rps_{kind[:5]}") as (pla, sup):
            r = await pla.post("/api/lobby/cpu", json={"kind": kind})
            assert r.status_code == 200, r.text
            final = await play_turns({player: pla}, r.json()["match_id"])
            assert final["state"]["status"] == "finished"
            hands = (await sup.get(f"/api/support/players/{player}/matches")).json()
            docs = []
            for hand in hands["transcripts"]:
                r = await sup.get(f"/api/support/transcripts/{hand['deal_id']}")
                assert r.status_code == 200, r.text
                # the log's pseudonyms are named for support: the player and the CPU seats
                assert player in r.json()["players"] and None in r.json()["players"]
                doc = r.json()["transcript"]
                if doc["deal"]["hands"]:  # an opening draw has no hand to replay
                    docs.append(doc)
            assert docs
    files = []
    for i, doc in enumerate(docs):
        path = tmp_path / f"hand{i}.json"
        path.write_text(json.dumps(doc))
        files.append(str(path))
    out = subprocess.run(
        [node, str(STEPS_SCRIPT), *files], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    for doc, line in zip(docs, out.stdout.splitlines(), strict=True):
        steps = json.loads(line)
        assert steps[0]["kind"] == "deal" and steps[0]["ends"] is None
        assert _page_steps(steps) == _core_steps(doc)
        last = steps[-1]
        assert last["kind"] == "result" and last["result"] == doc["result"]
        if doc["result"]["end"] == "domino":
            assert 0 in last["left"]  # the winner's hand is empty


async def test_concurrent_approvals_are_one_reversal_and_a_ledger_refusal_changes_nothing(
    platform_db, internal_secret, tmp_path
):
    await make_user(platform_db, "cc_pla")
    await make_user(platform_db, "cc_sup", "support")
    await make_user(platform_db, "cc_fin", "finance")
    await make_user(platform_db, "cc_fin2", "finance")
    await make_user(platform_db, "cc_adm", "admin")
    async with platform(platform_db, internal_secret, tmp_path) as p:
        async with p.signed_in("cc_fin", "cc_fin2", "cc_sup", "cc_adm") as (fin, fin2, sup, adm):
            first = await _deposit(fin, "cc_pla", 3000)
            second = await _deposit(fin, "cc_pla", 1000)
            r = await fin.post(
                "/api/finance/withdrawals",
                json={"player": "cc_pla", "amount": 2500, "reference": "cash out"},
            )
            assert r.status_code == 200
            ids = []
            for entry in (first, second):
                r = await sup.post(
                    "/api/support/refunds",
                    json={"player": "cc_pla", "entry_id": entry, "reason": "duplicate deposit"},
                )
                assert r.status_code == 201
                ids.append(r.json()["id"])
            # the wallet (1500) no longer holds the first deposit: the ledger's refusal, and the
            # proposal stays pending with nothing logged as approved
            refused = await fin.post(
                f"/api/finance/refunds/{ids[0]}/approve", json={"reason": "ok"}
            )
            assert refused.status_code == 422
            assert refused.json()["error"] == "insufficient_funds"
            pending = (await fin.get("/api/finance/refunds")).json()
            assert {x["id"] for x in pending} == set(ids)
            # two finance users approve the second at once: one reversal between them. The
            # wallet's ledger row is held meanwhile, so both approvals are under way (two
            # sessions waiting on locks) before either can finish.
            dsn = platform_db.replace("postgresql+asyncpg", "postgresql")
            blocker, watcher = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
            try:
                held = blocker.transaction()
                await held.start()
                await blocker.execute(
                    "SELECT id FROM ledger.accounts WHERE code = 'wallet:cc_pla' FOR UPDATE"
                )
                approvals = asyncio.gather(
                    fin.post(f"/api/finance/refunds/{ids[1]}/approve", json={"reason": "a"}),
                    fin2.post(f"/api/finance/refunds/{ids[1]}/approve", json={"reason": "b"}),
                )
                await _until_waiting(watcher, 2)
                await held.rollback()
                answers = await approvals
            finally:
                await blocker.close()
                await watcher.close()
            assert [a.status_code for a in answers] == [200, 200]
            assert len({a.json()["reversal_entry_id"] for a in answers}) == 1
            lines = (await sup.get("/api/support/players/cc_pla/statement")).json()["lines"]
            assert [x["kind"] for x in lines].count("reversal") == 1
            assert lines[-1]["balance"] == 500
            log = await _audit(adm, "cc_pla")
            approvals = [a for a in log if a["action"] == "finance.refund_approve"]
            assert len(approvals) == 1 and approvals[0]["detail"]["refund_id"] == ids[1]
