"""The daily close through the gateway: finance only, four eyes with the actor taken from the
session, staff audit rows, and the closed day's report as JSON (signed), CSV, XLSX and HTML.

The ledger is given a clock one day ahead so that today is over and can be closed (see
tests/ledger/test_ledger_closing.py for why); every posting is real and really dated today.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from typing import Any

import asyncpg
import msgspec
import pytest
from openpyxl import load_workbook

from api.routes_closing import render_html
from ledger import closing
from services.common.migrate import upgrade
from tests.api.api_helpers import make_user, sign_in
from tests.api.platform_stack import COMPONENTS, platform


@pytest.fixture(scope="module")
def close_db(database_url: str) -> str:
    upgrade(database_url, COMPONENTS)
    return database_url


def tomorrow() -> dt.datetime:
    return dt.datetime.now(dt.UTC) + dt.timedelta(days=1)


def refused(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"] == code, response.text


def deposits(report: dict[str, Any]) -> dict[str, int]:
    (line,) = [a for a in report["activity"] if a["line"] == "deposits"]
    return {"count": line["count"], "amount": line["amount"]}


async def test_close_a_day_with_four_eyes_and_download_its_report(
    close_db: str, internal_secret: bytes, tmp_path: Any
) -> None:
    users = {"dc_fa": "finance", "dc_fb": "finance", "dc_pl": "player", "dc_au": "auditor"}
    for name, role in users.items():
        await make_user(close_db, name, role)
    await make_user(close_db, "dc_ad", "admin")
    await make_user(close_db, "dc_su", "support")
    today = dt.datetime.now(dt.UTC).date().isoformat()
    async with platform(close_db, internal_secret, tmp_path, ledger_clock=tomorrow) as p:
        # not finance: refused, whatever the route
        async with p.client() as anon:
            assert (await anon.get("/api/finance/closes")).status_code == 401
        for name in ("dc_pl", "dc_au", "dc_ad", "dc_su"):
            async with p.client() as other:
                await sign_in(other, name)
                assert (await other.get("/api/finance/closes")).status_code == 403
                r = await other.post(f"/api/finance/closes/{today}/propose", json={"reason": "x"})
                assert r.status_code == 403
                assert (await other.get(f"/api/finance/closes/{today}/report")).status_code == 403

        async with p.client() as fa, p.client() as fb:
            await sign_in(fa, "dc_fa")
            await sign_in(fb, "dc_fb")
            r = await fa.post(
                "/api/finance/deposits",
                json={"player": "dc_pl", "amount": 12_345, "reference": "cash desk 1"},
            )
            assert r.status_code == 200, r.text
            listed = (await fa.get("/api/finance/closes")).json()
            assert listed["next_day"] == today
            draft = (await fa.get(f"/api/finance/closes/{today}/draft")).json()
            assert deposits(draft) == {"count": 1, "amount": 12_345}

            # malformed and unknown days, missing reasons, unknown fields: 4xx, nothing changes
            for bad in ("2026-02-30", "today", "2026-1-1"):
                refused(await fa.get(f"/api/finance/closes/{bad}/draft"), 400, "invalid_date")
                r = await fa.post(f"/api/finance/closes/{bad}/propose", json={"reason": "r"})
                refused(r, 400, "invalid_date")
            refused(await fa.get("/api/finance/closes/2001-01-01"), 404, "unknown_close")
            r = await fa.post(f"/api/finance/closes/{today}/propose", json={})
            assert r.status_code == 400
            # the actor is the session's user, never the body's
            r = await fa.post(
                f"/api/finance/closes/{today}/propose", json={"reason": "r", "actor": "dc_fb"}
            )
            assert r.status_code == 400
            refused(await fa.get(f"/api/finance/closes/{today}/report"), 404, "unknown_close")

            # propose, withdraw (another finance user may), propose again
            r = await fa.post(f"/api/finance/closes/{today}/propose", json={"reason": "EOD"})
            assert r.status_code == 200, r.text
            assert r.json()["proposed_by"] == "dc_fa"
            refused(await fa.get(f"/api/finance/closes/{today}/report"), 409, "day_not_closed")
            r = await fb.post(
                f"/api/finance/closes/{today}/withdraw", json={"reason": "cash count pending"}
            )
            assert r.status_code == 200 and r.json()["status"] == "withdrawn", r.text
            r = await fa.post(f"/api/finance/closes/{today}/propose", json={"reason": "EOD 2"})
            assert r.status_code == 200, r.text

            # four eyes: the proposer cannot approve
            r = await fa.post(f"/api/finance/closes/{today}/approve", json={"reason": "ok"})
            refused(r, 409, "same_approver")
            r = await fb.post(f"/api/finance/closes/{today}/approve", json={"reason": "counted"})
            assert r.status_code == 200, r.text
            closed = r.json()
            assert (closed["status"], closed["approved_by"]) == ("closed", "dc_fb")

            # nothing may be posted into the closed day
            r = await fa.post(
                "/api/finance/deposits",
                json={"player": "dc_pl", "amount": 1, "reference": "too late"},
            )
            refused(r, 409, "day_closed")

            # the signed JSON verifies with the served key; a one-cent edit does not
            key = (await fa.get("/api/finance/closes/key")).json()
            r = await fa.get(f"/api/finance/closes/{today}/report", params={"format": "json"})
            assert r.status_code == 200 and "attachment" in r.headers["content-disposition"]
            signed = msgspec.json.decode(r.content)
            assert signed["public_key"] == key["public_key"]
            public = bytes.fromhex(key["public_key"])
            assert closing.verify(signed, public)
            report = signed["document"]["report"]
            assert deposits(report) == {"count": 1, "amount": 12_345}
            assert signed["document"]["proposed_by"] == "dc_fa"
            signed["document"]["report"]["activity"][0]["amount"] += 1
            assert not closing.verify(signed, public)

            # CSV: one table with a section column, the same figures
            r = await fa.get(f"/api/finance/closes/{today}/report", params={"format": "csv"})
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
            rows = list(csv.DictReader(io.StringIO(r.text)))
            (dep,) = [x for x in rows if x["section"] == "activity" and x["item"] == "deposits"]
            assert (dep["count"], dep["amount"]) == ("1", "12345")
            (wallets,) = [x for x in rows if x["section"] == "balances" and x["item"] == "wallet"]
            assert (wallets["opening"], wallets["closing"]) == ("0", "12345")

            # XLSX opens with openpyxl and holds the same figures, as numbers
            r = await fa.get(f"/api/finance/closes/{today}/report", params={"format": "xlsx"})
            assert r.status_code == 200
            book = load_workbook(io.BytesIO(r.content), read_only=True)
            sheet_rows = list(book["activity"].iter_rows(values_only=True))
            header = list(sheet_rows[0])
            found = {row[0]: row for row in sheet_rows[1:]}
            assert found["deposits"][header.index("amount")] == 12_345
            assert found["deposits"][header.index("count")] == 1
            balances = {row[0]: row for row in list(book["balances"].iter_rows(values_only=True))}
            assert balances["cashier"][balances["item"].index("closing")] == -12_345

            # the printable page: no script, figures in currency units
            r = await fa.get(f"/api/finance/closes/{today}/report", params={"format": "html"})
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
            assert "<script" not in r.text and "123.45" in r.text
            r = await fa.get(f"/api/finance/closes/{today}/report", params={"format": "pdf"})
            assert r.status_code == 400

            listed = (await fb.get("/api/finance/closes")).json()
            assert [(c["day"], c["status"]) for c in listed["closes"]] == [(today, "closed")]

    conn = await asyncpg.connect(close_db)
    try:
        actions = await conn.fetch(
            "SELECT actor, action, subject, reason FROM gateway.staff_actions "
            "WHERE action LIKE 'finance.close_%' ORDER BY id"
        )
    finally:
        await conn.close()
    assert [tuple(a) for a in actions] == [
        ("dc_fa", "finance.close_propose", f"day:{today}", "EOD"),
        ("dc_fb", "finance.close_withdraw", f"day:{today}", "cash count pending"),
        ("dc_fa", "finance.close_propose", f"day:{today}", "EOD 2"),
        ("dc_fb", "finance.close_approve", f"day:{today}", "counted"),
    ]


def test_the_printable_page_escapes_every_value() -> None:
    evil = "<script>alert(1)</script>"
    report = {
        "balances": [],
        "activity": [{"line": evil, "currency": "USD", "count": 1, "amount": 5}],
        "pots_settled": [],
        "commission": [
            {
                "tier": evil,
                "variant": "v&v",
                "currency": "USD",
                "matches": 1,
                "pot_total": 100,
                "commission": 10,
            }
        ],
        "entries": [],
        "reconciliation": {"ok": True, "checks": []},
        "chain_head": {"entry_id": 1, "chain_hash": evil},
    }
    document = {"day": "2026-12-01", "report": report, "proposed_by": evil, "approved_by": "b"}
    page = render_html({"document": document, "signature": "ab"})
    assert "<script" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "v&amp;v" in page
