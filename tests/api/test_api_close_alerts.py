"""The day's integrity alerts in the signed daily report: the gateway reads them from the
integrity store at the proposal and again at the approval, the ledger signs them as the
report's `integrity_alerts` section and refuses an approval when they changed.

As in test_api_daily_close.py, the ledger is given a clock one day ahead so that today is over
and can be closed; the alerts are raised through the integrity store, really dated today.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import msgspec
import pytest
from openpyxl import load_workbook
from sqlalchemy.ext.asyncio import AsyncEngine

from integrity import store
from integrity.models import NewAlert
from ledger import closing
from services.common.db import create_engine
from services.common.migrate import upgrade
from tests.api.api_helpers import make_user, sign_in
from tests.api.platform_stack import COMPONENTS, platform


@pytest.fixture(scope="module")
def alerts_db(database_url: str) -> str:
    upgrade(database_url, COMPONENTS)
    return database_url


@pytest.fixture
async def db(alerts_db: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(alerts_db)
    try:
        yield engine
    finally:
        await engine.dispose()


def tomorrow() -> dt.datetime:
    return dt.datetime.now(dt.UTC) + dt.timedelta(days=1)


def alert(key: str, kind: str, player: str, score: float, counterpart: str | None = None) -> Any:
    return NewAlert(
        kind=kind,
        player=player,
        dedup_key=key,
        score=score,
        figures={"threshold": 1},
        counterpart=counterpart,
    )


def refused(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"] == code, response.text


async def test_the_signed_report_lists_the_days_alerts(
    alerts_db: str, db: AsyncEngine, internal_secret: bytes, tmp_path: Any
) -> None:
    for name, role in {"ia_fa": "finance", "ia_fb": "finance", "ia_pl": "player"}.items():
        await make_user(alerts_db, name, role)
    today = dt.datetime.now(dt.UTC).date()
    planted = await store.raise_alerts(
        db,
        [
            alert("t:flow:1", "pair_flow", "ia_pl", 2.345678, counterpart="ia_x"),
            alert("t:struct:1", "structuring", "ia_pl", 0.5),
            alert("t:flow:2", "pair_flow", "ia_y", 1.0, counterpart="ia_pl"),
        ],
    )
    # an alert of another day is not the day's
    [other_day] = await store.raise_alerts(db, [alert("t:old", "pair_flow", "ia_z", 9.0)])
    superuser = await asyncpg.connect(alerts_db)
    try:
        await superuser.execute(
            "UPDATE integrity.alerts SET created_at = now() - interval '2 days' WHERE id = $1",
            other_day.id,
        )
    finally:
        await superuser.close()
    ids = [r.id for r in planted]

    async with platform(
        alerts_db, internal_secret, tmp_path, ledger_clock=tomorrow, integrity_scan_interval_s=0
    ) as p:
        async with p.client() as fa, p.client() as fb:
            await sign_in(fa, "ia_fa")
            await sign_in(fb, "ia_fb")
            r = await fa.post(
                "/api/finance/deposits",
                json={"player": "ia_pl", "amount": 5_000, "reference": "cash desk"},
            )
            assert r.status_code == 200, r.text

            draft = (await fa.get(f"/api/finance/closes/{today}/draft")).json()
            assert [a["id"] for a in draft["integrity_alerts"]["alerts"]] == ids
            assert draft["integrity_alerts"]["total"] == 3

            r = await fa.post(f"/api/finance/closes/{today}/propose", json={"reason": "EOD"})
            assert r.status_code == 200, r.text
            section = r.json()["report"]["integrity_alerts"]
            assert [a["id"] for a in section["alerts"]] == ids
            # the draft of a proposed day is the proposal's report
            draft = (await fa.get(f"/api/finance/closes/{today}/draft")).json()
            assert draft["integrity_alerts"] == section

            # an alert raised for the day after the proposal: the approver would not sign
            # what the proposer saw
            [late] = await store.raise_alerts(db, [alert("t:late", "structuring", "ia_q", 3.0)])
            r = await fb.post(f"/api/finance/closes/{today}/approve", json={"reason": "ok"})
            refused(r, 409, "report_changed")
            r = await fb.post(f"/api/finance/closes/{today}/withdraw", json={"reason": "late"})
            assert r.status_code == 200, r.text
            r = await fa.post(f"/api/finance/closes/{today}/propose", json={"reason": "EOD 2"})
            assert r.status_code == 200, r.text

            # closing an alert between the proposal and the approval does not block the close
            await store.close_alert(
                db, ids[1], actor="ia_co", resolution="dismissed", reason="known cashier"
            )
            r = await fb.post(f"/api/finance/closes/{today}/approve", json={"reason": "counted"})
            assert r.status_code == 200, r.text

            key = (await fa.get("/api/finance/closes/key")).json()
            r = await fa.get(f"/api/finance/closes/{today}/report", params={"format": "json"})
            signed = msgspec.json.decode(r.content)
            assert closing.verify(signed, bytes.fromhex(key["public_key"]))
            listed = signed["document"]["report"]["integrity_alerts"]
            assert [a["id"] for a in listed["alerts"]] == [*ids, late.id]
            assert listed["total"] == 4 and listed["truncated"] == 0
            assert listed["by_kind"] == [
                {"kind": "pair_flow", "count": 2},
                {"kind": "structuring", "count": 2},
            ]
            first = listed["alerts"][0]
            assert first == {
                "id": ids[0],
                "kind": "pair_flow",
                "player": "ia_pl",
                "counterpart": "ia_x",
                "score": "2.3457",
                "raised_at": first["raised_at"],
            }
            assert first["raised_at"].startswith(today.isoformat())
            assert first["raised_at"].endswith("Z")
            assert "status" not in first
            tampered = msgspec.json.decode(r.content)
            tampered["document"]["report"]["integrity_alerts"]["alerts"].pop()
            assert not closing.verify(tampered, bytes.fromhex(key["public_key"]))

            # CSV: a row per alert and per kind
            r = await fa.get(f"/api/finance/closes/{today}/report", params={"format": "csv"})
            rows = list(csv.DictReader(io.StringIO(r.text)))
            alert_rows = [x for x in rows if x["section"] == "integrity_alerts"]
            assert [int(x["item"]) for x in alert_rows] == [*ids, late.id]
            assert (alert_rows[0]["player"], alert_rows[0]["score"]) == ("ia_pl", "2.3457")
            kinds = {x["item"]: x["count"] for x in rows if x["section"] == "integrity_by_kind"}
            assert kinds == {"pair_flow": "2", "structuring": "2"}
            assert rows[-1]["section"] == "signature"

            # XLSX: a sheet of the alerts
            r = await fa.get(f"/api/finance/closes/{today}/report", params={"format": "xlsx"})
            book = load_workbook(io.BytesIO(r.content), read_only=True)
            sheet = list(book["integrity_alerts"].iter_rows(values_only=True))
            assert sheet[0] == ("item", "kind", "player", "counterpart", "score", "raised_at")
            assert [row[0] for row in sheet[1:]] == [*ids, late.id]

            # the printable page
            r = await fa.get(f"/api/finance/closes/{today}/report", params={"format": "html"})
            assert "Integrity alerts raised this day" in r.text and "2.3457" in r.text
            assert "<script" not in r.text
