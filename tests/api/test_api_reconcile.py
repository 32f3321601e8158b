"""Reconciliation on the finance page, through the gateway against the real services: every
check with its refs, a planted discrepancy followed down to the match, its settlement entry
and its hands; and a processor's settlement file imported, refused when malformed, a no-op
when sent twice, and written to the staff audit log."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import asyncpg
import pytest

from ledger.ops import plain_dsn
from services.common.migrate import upgrade
from tests.api.api_helpers import make_user, sign_in
from tests.api.platform_stack import COMPONENTS, platform, play_turns


@pytest.fixture(scope="module")
def recon_db(database_url: str) -> str:
    upgrade(database_url, COMPONENTS)
    return database_url


async def _sql(url: str, sql: str, *args: Any) -> Any:
    conn = await asyncpg.connect(plain_dsn(url))
    try:
        return await conn.fetch(sql, *args)
    finally:
        await conn.close()


async def _played_match(p: Any, names: list[str]) -> str:
    async with p.client() as c0, p.client() as c1:
        clients = dict(zip(names, (c0, c1), strict=True))
        for n, c in clients.items():
            await sign_in(c, n)
            r = await c.post("/api/lobby/quick-join", json={"kind": "apuesta-1v1", "tier": "10"})
            assert r.status_code == 200, r.text
        match_id = None
        for _ in range(200):
            mine = (await c0.get("/api/lobby/mine")).json()
            match_id = next((t["match_id"] for t in mine if t["match_id"]), None)
            if match_id:
                break
            await asyncio.sleep(0.05)
        assert match_id
        final = await play_turns(clients, match_id)
        assert final["state"]["status"] == "finished"
        for _ in range(200):  # the settlement reaches the ledger after the last hand
            pots = await _sql(
                p.settings.database_url,
                "SELECT status FROM ledger.pots WHERE match_id = $1",
                match_id,
            )
            if pots and pots[0]["status"] == "settled":
                return str(match_id)
            await asyncio.sleep(0.05)
    raise AssertionError("the match was not settled")


async def test_reconcile_drill_down_and_settlement_import(recon_db, internal_secret, tmp_path):
    names = ["rec_ana", "rec_beto"]
    for n in names:
        await make_user(recon_db, n)
    await make_user(recon_db, "rec_caja", "finance")
    await make_user(recon_db, "rec_audi", "auditor")
    async with platform(recon_db, internal_secret, tmp_path) as p:
        async with p.client() as fin:
            await sign_in(fin, "rec_caja")
            for n, ref in zip(names, ("PSP-A1", "PSP-B1"), strict=True):
                r = await fin.post(
                    "/api/finance/deposits",
                    json={"player": n, "amount": 2000, "reference": ref},
                )
                assert r.status_code == 200, r.text
        match_id = await _played_match(p, names)
        today = dt.datetime.now(dt.UTC).date().isoformat()
        async with p.client() as fin:
            await sign_in(fin, "rec_caja")
            clean = (await fin.get("/api/finance/reconcile")).json()
            assert clean["ok"] and clean["date"] is None
            assert all(c["ok"] and c["refs"] == [] for c in clean["checks"])
            day = await fin.get("/api/finance/reconcile", params={"date": today})
            assert day.status_code == 200 and day.json()["ok"] and day.json()["date"] == today
            bad = await fin.get("/api/finance/reconcile", params={"date": "yesterday"})
            assert bad.status_code == 400 and bad.json()["error"] == "invalid_date"

            # a superuser books 7 cents more commission on the pot than the settlement posted
            await _sql(
                recon_db,
                "UPDATE ledger.pots SET commission = commission + 7 WHERE match_id = $1",
                match_id,
            )
            try:
                report = (await fin.get("/api/finance/reconcile")).json()
                assert not report["ok"]
                checks = {c["check"]: c for c in report["checks"]}
                failed = checks["commission_rate"]
                assert not failed["ok"] and len(failed["discrepancies"]) == 1
                (ref,) = failed["refs"]
                assert ref["match_id"] == match_id and ref["entry_id"] > 0

                # drill down: the commission line -> its pots -> the match -> entry and hands
                lines = (await fin.get("/api/finance/commission?by=day,tier,variant")).json()
                line = next(x for x in lines if x["day"] == today)
                pots = await fin.get(
                    "/api/finance/pots",
                    params={"day": line["day"], "tier": line["tier"], "variant": line["variant"]},
                )
                assert pots.status_code == 200, pots.text
                assert match_id in [x["match_id"] for x in pots.json()]
                assert sum(x["commission"] for x in pots.json()) == line["commission"]
                match = await fin.get(f"/api/finance/matches/{ref['match_id']}")
                assert match.status_code == 200, match.text
                detail = match.json()
                assert detail["pot"]["match_id"] == match_id and detail["pot"]["commission"] > 0
                assert sorted(s["player"] for s in detail["stakes"]) == sorted(names)
                assert [e["kind"] for e in detail["entries"]] == ["start", "settle"]
                assert detail["entries"][1]["entry_id"] == ref["entry_id"]
                assert detail["transcripts"], "the match's hands are listed"
                entry = (await fin.get(f"/api/finance/entries/{ref['entry_id']}")).json()
                assert entry["kind"] == "settle" and entry["match_id"] == match_id
                assert sum(x["amount"] for x in entry["postings"]) == 0
                deal_id = detail["transcripts"][0]["deal_id"]
                hand = await fin.get(f"/api/transcripts/{deal_id}")
                assert hand.status_code == 200, hand.text
                missing = await fin.get("/api/finance/matches/no-such-match")
                assert missing.status_code == 404
                # the whole id is checked, a trailing newline too
                for bad_id in ("no%20such", "no-such-match%0A"):
                    refused = await fin.get(f"/api/finance/matches/{bad_id}")
                    assert refused.status_code == 400, refused.text
                    assert refused.json()["detail"] == "bad match id"
            finally:
                await _sql(
                    recon_db,
                    "UPDATE ledger.pots SET commission = commission - 7 WHERE match_id = $1",
                    match_id,
                )
            assert (await fin.get("/api/finance/reconcile")).json()["ok"]

            # the settlement file: a malformed one is refused whole and changes nothing
            malformed = (
                "reference,amount,currency,date\n"
                f"PSP-A1,20.00,USD,{today}\n"
                f"PSP-B1,20,00,USD,{today}\n"
                f"PSP-C1,5.00,US,{today}\n"
            )
            r = await fin.post(
                "/api/finance/settlements",
                json={"filename": "bad.csv", "content": malformed, "reason": "daily settlement"},
            )
            assert r.status_code == 422, r.text
            body = r.json()
            assert body["error"] == "invalid_settlement_file"
            assert [e["line"] for e in body["errors"]] == [3, 4]
            counted = "SELECT count(*) AS n FROM ledger.settlement_imports"
            assert (await _sql(recon_db, counted))[0]["n"] == 0
            good = (
                "reference,amount,currency,date\n"
                f"PSP-A1,20.00,USD,{today}\n"
                f"PSP-B1,19.99,USD,{today}\n"
                f"PSP-Z9,3.00,USD,{today}\n"
            )
            upload = {"filename": "psp.csv", "content": good, "reason": "daily settlement"}
            first = await fin.post("/api/finance/settlements", json=upload)
            assert first.status_code == 200, first.text
            result = first.json()
            assert result["matched"] == 1 and not result["replayed"]
            assert [(d["reference"], d["difference"]) for d in result["amount_differences"]] == [
                ("PSP-B1", -1)
            ]
            assert [x["reference"] for x in result["unmatched_file"]] == ["PSP-Z9"]
            assert result["unmatched_ledger"] == []
            again = (await fin.post("/api/finance/settlements", json=upload)).json()
            assert again == {**result, "replayed": True}
            assert (await _sql(recon_db, counted))[0]["n"] == 1
            listed = (await fin.get("/api/finance/settlements")).json()
            assert [x["import_id"] for x in listed] == [result["import_id"]]
            shown = (await fin.get(f"/api/finance/settlements/{result['import_id']}")).json()
            assert shown == {**result, "replayed": False}
            unknown = await fin.post("/api/finance/settlements", json={**upload, "extra": 1})
            assert unknown.status_code == 400
            # a file of 20,000 lines (over the gateway's usual 256 KiB body) goes through whole;
            # one over 1 MB is refused before it is read
            big = "reference,amount,currency,date\n" + "".join(
                f"BIG-{i},1.00,USD,{today}\n" for i in range(20_000)
            )
            assert 256 * 1024 < len(big) < 1024 * 1024
            r = await fin.post(
                "/api/finance/settlements",
                json={"filename": "big.csv", "content": big, "reason": "month"},
            )
            assert r.status_code == 200, r.text
            assert r.json()["lines"] == 20_000 and len(r.json()["unmatched_file"]) == 20_000
            huge = big + "x" * (1024 * 1024)
            r = await fin.post(
                "/api/finance/settlements",
                json={"filename": "huge.csv", "content": huge, "reason": "month"},
            )
            assert r.status_code in (400, 413), r.text
            assert (await _sql(recon_db, counted))[0]["n"] == 2
        async with p.client() as aud:
            await sign_in(aud, "rec_audi")
            log = await aud.get("/api/staff/audit", params={"action": "finance.settlement_import"})
            actions = log.json()["actions"]
            assert [a["detail"]["replayed"] for a in actions] == [False, True, False]
            assert actions[0]["detail"]["lines"] == 20_000
            assert actions[2]["subject"] == f"settlement:{result['import_id']}"
            assert actions[2]["actor"] == "rec_caja" and actions[2]["reason"] == "daily settlement"
            assert actions[2]["detail"]["matched"] == 1
            # the guards: finance's routes are finance's only
            assert (await aud.get("/api/finance/reconcile")).status_code == 403
