"""Issue 29, the players' side: reports of other players (to compliance) and "seat me only with
random opponents", on the whole platform in-process (platform_stack), real PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from services.common.db import create_engine
from services.common.migrate import upgrade
from tests.api.api_helpers import make_user, sign_in
from tests.api.platform_stack import COMPONENTS
from tests.api.test_api_invitations import DEPOSIT, Players, _finance, _private_code, players


@pytest.fixture(scope="module")
def platform_db(database_url: str) -> str:
    upgrade(database_url, COMPONENTS)
    return database_url


async def _rows(platform_db: str, statement: str, **params: object) -> list[Any]:
    engine = create_engine(platform_db, as_app_role=False)
    try:
        async with engine.begin() as conn:
            result = await conn.execute(text(statement), params)
            return list(result.all()) if result.returns_rows else []
    finally:
        await engine.dispose()


async def _free_match(ps: Players, a: str, b: str) -> str:
    """a and b quick-join an empty free 1v1 table: the second seat starts the match."""
    first = await ps[a].post("/api/lobby/quick-join", json={"kind": "casa-duelo", "tier": "free"})
    assert first.status_code == 200, first.text
    second = await ps[b].post("/api/lobby/quick-join", json={"kind": "casa-duelo", "tier": "free"})
    assert second.status_code == 200, second.text
    assert second.json()["table_id"] == first.json()["table_id"]
    match_id = second.json()["match_id"]
    assert match_id
    return str(match_id)


async def test_reports_reach_compliance_and_reveal_nothing(
    platform_db: str, internal_secret: bytes, tmp_path: Path
) -> None:
    await make_user(platform_db, "rp_comp", "compliance")
    async with players(platform_db, internal_secret, tmp_path) as ps:
        for name in ("rp_ana", "rp_bob", "rp_eve"):
            await ps.add(name, deposit=0)
        match_id = await _free_match(ps, "rp_ana", "rp_bob")
        cpu = await ps["rp_eve"].post("/api/lobby/cpu", json={"kind": "casa-duelo"})
        cpu_match = cpu.json()["match_id"]

        body = {"match_id": match_id, "player": "rp_bob", "category": "collusion"}
        r = await ps["rp_ana"].post("/api/reports", json={**body, "text": "  dumps\ttiles \n"})
        assert r.status_code == 200, r.text
        assert set(r.json()) == {"report_id", "received_at"}
        first = r.json()["report_id"]
        # The same player and match again: the first report, not a second one.
        again = await ps["rp_ana"].post("/api/reports", json={**body, "category": "other"})
        assert again.status_code == 200 and again.json()["report_id"] == first

        # Refusals: yourself; and one answer for a stranger, a nobody, a match you did not
        # play, an unknown match and a CPU seat, so nothing is learnt about the player.
        me = await ps["rp_ana"].post("/api/reports", json={**body, "player": "rp_ana"})
        assert me.status_code == 400 and me.json()["error"] == "report_self"
        unknown = [
            ("rp_ana", {**body, "player": "rp_eve"}),
            ("rp_ana", {**body, "player": "no_such_player"}),
            ("rp_eve", body),
            ("rp_ana", {**body, "match_id": "m-nope"}),
            ("rp_eve", {**body, "match_id": cpu_match, "player": "cpu"}),
        ]
        for who, b in unknown:
            r = await ps[who].post("/api/reports", json=b)
            assert r.status_code == 404 and r.json()["error"] == "unknown_match", (who, b, r.text)
        bad = [
            {**body, "category": "spam"},
            {**body, "text": "x" * 501},
            {**body, "text": "null\x00byte"},
            {**body, "extra": 1},
            {"match_id": match_id, "category": "abuse"},
            {**body, "player": "bob with spaces"},
        ]
        for b in bad:
            r = await ps["rp_bob"].post("/api/reports", json=b)
            assert r.status_code == 400, (b, r.text)
        stored = await _rows(
            platform_db,
            "SELECT reporter, reported, category, text "
            "FROM gateway.player_reports WHERE match_id = :m",
            m=match_id,
        )
        assert stored == [("rp_ana", "rp_bob", "collusion", "dumps tiles")]

        # Compliance reads them, paged; players may not.
        async with ps.p.client() as comp:
            await sign_in(comp, "rp_comp")
            await ps.add("rp_dan", deposit=0)
            m2 = await _free_match(ps, "rp_dan", "rp_bob")
            r = await ps["rp_bob"].post(
                "/api/reports", json={"match_id": m2, "player": "rp_dan", "category": "abuse"}
            )
            assert r.status_code == 200, r.text
            page = (await comp.get("/api/compliance/reports", params={"limit": 1})).json()
            assert [x["reporter"] for x in page["reports"]] == ["rp_bob"]
            rest = await comp.get(
                "/api/compliance/reports", params={"limit": 1, "before": page["next"]}
            )
            assert rest.json()["reports"][0]["id"] == first
            only = await comp.get("/api/compliance/reports", params={"reported": "rp_dan"})
            assert [x["reported"] for x in only.json()["reports"]] == ["rp_dan"]

            # Each report is also in the reported player's player_report alert of the month:
            # a second reporter adds to the same alert, a replay adds nothing.
            r = await ps["rp_dan"].post(
                "/api/reports", json={"match_id": m2, "player": "rp_bob", "category": "bot"}
            )
            assert r.status_code == 200, r.text
            second = r.json()["report_id"]
            alerts = await comp.get(
                "/api/compliance/alerts", params={"kind": "player_report", "player": "rp_bob"}
            )
            [alert] = [a for a in alerts.json()["alerts"] if a["player"] == "rp_bob"]
            assert alert["figures"] == {"reports": 2, "reporters": 2}
            assert alert["dedup_key"].startswith("player_report:rp_bob:20")
            assert 0 < alert["score"] < 1
            detail = (await comp.get(f"/api/compliance/alerts/{alert['id']}")).json()
            refs = sorted((o["kind"], o["ref"]) for o in detail["other"])
            assert refs == sorted([("report", str(first)), ("report", str(second))])
            assert {o["detail"]["category"] for o in detail["other"]} == {"collusion", "bot"}
            dan = await comp.get(
                "/api/compliance/alerts", params={"kind": "player_report", "player": "rp_dan"}
            )
            assert [a["figures"]["reports"] for a in dan.json()["alerts"]] == [1]
        assert (await ps["rp_ana"].get("/api/compliance/reports")).status_code == 403

        # Ten a day: rp_bob has made one; nine more made earlier today (here by SQL).
        await _rows(
            platform_db,
            "INSERT INTO gateway.player_reports (reporter, reported, match_id, category) "
            "SELECT 'rp_bob', 'rp_x', 'm-old-' || n, 'other' FROM generate_series(1, 9) AS n",
        )
        r = await ps["rp_bob"].post(
            "/api/reports", json={"match_id": m2, "player": "rp_dan", "category": "other"}
        )
        assert r.status_code == 200  # his earlier report again: a replay does not count
        r = await ps["rp_bob"].post(
            "/api/reports", json={"match_id": match_id, "player": "rp_ana", "category": "bot"}
        )
        assert r.status_code == 429 and r.json()["error"] == "rate_limited", r.text
        # Yesterday's do not count.
        await _rows(
            platform_db,
            "UPDATE gateway.player_reports SET created_at = now() - interval '25 hours' "
            "WHERE reporter = 'rp_bob' AND match_id LIKE 'm-old-%'",
        )
        r = await ps["rp_bob"].post(
            "/api/reports", json={"match_id": match_id, "player": "rp_ana", "category": "bot"}
        )
        assert r.status_code == 200, r.text


async def test_reports_are_append_only_for_the_app_role(platform_db: str) -> None:
    engine = create_engine(platform_db)  # as mesa_app
    try:
        for statement in (
            "UPDATE gateway.player_reports SET text = 'changed'",
            "DELETE FROM gateway.player_reports",
        ):
            with pytest.raises(DBAPIError, match="permission denied"):
                async with engine.begin() as conn:
                    await conn.execute(sa.text(statement))
    finally:
        await engine.dispose()


async def _pref(ps: Players, name: str, on: bool) -> None:
    r = await ps[name].put("/api/preferences", json={"random_opponents_only": on})
    assert r.status_code == 200 and r.json() == {"random_opponents_only": on}, r.text


async def test_random_opponents_only_closes_every_chosen_seat(
    platform_db: str, internal_secret: bytes, tmp_path: Path
) -> None:
    await _finance(platform_db)
    paid = {"kind": "dominicana-2v2-100", "tier": "10"}
    async with players(platform_db, internal_secret, tmp_path) as ps:
        for name in ("ro_solo", "ro_host", "ro_pal", "ro_late"):
            await ps.add(name)
        assert (await ps["ro_solo"].get("/api/preferences")).json() == {
            "random_opponents_only": False
        }
        bad = await ps["ro_solo"].put("/api/preferences", json={"random_opponents_only": "yes"})
        assert bad.status_code == 400
        # ro_pal invites ro_late before ro_late turns the setting on; accepted afterwards,
        # the inviter is told only that his partner is unavailable.
        early = await ps["ro_pal"].post(
            "/api/lobby/quick-join", json={**paid, "partner": "ro_late"}
        )
        assert early.status_code == 202, early.text
        await _pref(ps, "ro_solo", True)
        await _pref(ps, "ro_late", True)
        # Every path where he or someone else chooses the table: refused, nothing held.
        code = await _private_code(ps, "ro_host", "dominicana-2v2-200")
        refusals = [
            ("/api/lobby/private", paid),
            ("/api/lobby/join-code", {"invite_code": code}),
            ("/api/lobby/quick-join", {**paid, "partner": "ro_pal"}),
            ("/api/lobby/private", {**paid, "partner": "ro_pal"}),
            ("/api/lobby/join-code", {"invite_code": code, "partner": "ro_pal"}),
        ]
        for path, body in refusals:
            r = await ps["ro_solo"].post(path, json=body)
            assert r.status_code == 403 and r.json()["error"] == "random_only", (path, r.text)
        invite = await ps["ro_pal"].post(
            "/api/lobby/quick-join", json={**paid, "partner": "ro_solo"}
        )
        assert invite.status_code == 202, invite.text
        r = await ps["ro_solo"].post(f"/api/invitations/{invite.json()['invitation_id']}/accept")
        assert r.status_code == 403 and r.json()["error"] == "random_only", r.text
        r = await ps["ro_late"].post(f"/api/invitations/{early.json()['invitation_id']}/accept")
        assert r.status_code == 403 and r.json()["error"] == "random_only", r.text
        assert await ps.balance("ro_solo") == DEPOSIT and await ps.seats("ro_solo") == []

        # The quick-join queue seats him, and his table is not listed for anyone to pick.
        r = await ps["ro_solo"].post("/api/lobby/quick-join", json=paid)
        assert r.status_code == 200, r.text
        table_id = r.json()["table_id"]
        lobby = await ps["ro_host"].get("/api/lobby/tables", params={"kind": paid["kind"]})
        assert table_id not in {t["table_id"] for t in lobby.json()["tables"]}
        # Another player's quick join still finds that table.
        r = await ps["ro_host"].post("/api/lobby/quick-join", json=paid)
        assert r.status_code == 200 and r.json()["table_id"] == table_id, r.text
        cpu = await ps["ro_solo"].post("/api/lobby/cpu", json={"kind": "casa-duelo"})
        assert cpu.status_code == 200, cpu.text

        # Off again: a private table is his to open.
        await _pref(ps, "ro_solo", False)
        r = await ps["ro_solo"].post("/api/lobby/private", json={**paid, "kind": "casa-parejas"})
        assert r.status_code == 200, r.text


async def test_partner_refusal_stays_partner_unavailable(
    platform_db: str, internal_secret: bytes, tmp_path: Path
) -> None:
    """The invitee accepts; the inviter has since chosen random opponents only: the invitee
    learns only that his partner is unavailable, not why."""
    await _finance(platform_db)
    paid = {"kind": "casa-parejas", "tier": "10"}
    async with players(platform_db, internal_secret, tmp_path) as ps:
        for name in ("pu_inv", "pu_acc"):
            await ps.add(name)
        r = await ps["pu_inv"].post("/api/lobby/quick-join", json={**paid, "partner": "pu_acc"})
        assert r.status_code == 202, r.text
        await _pref(ps, "pu_inv", True)
        ok = await ps["pu_acc"].post(f"/api/invitations/{r.json()['invitation_id']}/accept")
        assert ok.status_code == 403 and ok.json()["error"] == "partner_unavailable", ok.text
        assert await ps.balance("pu_acc") == DEPOSIT and await ps.seats("pu_acc") == []
