"""Integrity on the real platform (services in-process): the ledger's and engine's integrity
routes give a played paid match's money and response times, the gateway records where a seat
was taken from (keyed hashes only), the scan stores planted abuse once however often it runs,
and compliance officers act on alerts (hold, freeze, close), each in the staff audit log."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from api.integrity import DEVICE_COOKIE, _observe
from integrity import store
from integrity.config import IntegrityConfig
from integrity.losing import scan_losing
from integrity.models import EvidenceRef, History, NewAlert
from integrity.scan import ContractSources, read_hands, scan
from integrity.schema import SCAN_LOCK_KEY
from services.common.http import RemoteError
from services.common.migrate import upgrade
from services.engine.contract import HandPage, MatchTimings, SeatTiming, TimingPage
from services.ledger.contract import (
    CashierMove,
    CashierMovePage,
    PotSeat,
    SettledPot,
    SettledPotPage,
)
from tests.api.api_helpers import PASSWORD, make_user, sign_in
from tests.api.platform_stack import COMPONENTS, platform, play_turns
from tests.integrity import histories as h


@pytest.fixture(scope="module")
def platform_db(database_url: str) -> str:
    upgrade(database_url, COMPONENTS)
    return database_url


async def _match_of(client: Any) -> str:
    for _ in range(200):
        mine = (await client.get("/api/lobby/mine")).json()
        found = next((t["match_id"] for t in mine if t["match_id"]), None)
        if found:
            return str(found)
        await asyncio.sleep(0.05)
    raise AssertionError("the match did not start")


async def test_a_played_paid_match_reaches_the_scan_through_the_contracts(
    platform_db: str, internal_secret: bytes, tmp_path: Path
) -> None:
    for name in ("ip_ana", "ip_beto"):
        await make_user(platform_db, name)
    await make_user(platform_db, "ip_caja", "finance")
    async with platform(platform_db, internal_secret, tmp_path) as p:
        async with p.client() as fin, p.client() as ana, p.client() as beto:
            await sign_in(fin, "ip_caja")
            for name in ("ip_ana", "ip_beto"):
                r = await fin.post(
                    "/api/finance/deposits",
                    json={"player": name, "amount": 5000, "reference": "test"},
                )
                assert r.status_code == 200, r.text
            # a device cookie at sign-in, HttpOnly, kept on the next sign-in
            login = {"username": "ip_ana", "password": PASSWORD}
            first = await ana.post("/api/auth/login", json=login)
            [set_device] = [
                c for c in first.headers.get_list("set-cookie") if c.startswith(DEVICE_COOKIE)
            ]
            assert "httponly" in set_device.lower()
            device = ana.cookies.get(DEVICE_COOKIE)
            assert device and len(device) >= 32
            again = await ana.post("/api/auth/login", json=login)
            assert DEVICE_COOKIE not in again.cookies
            assert ana.cookies.get(DEVICE_COOKIE) == device
            await sign_in(ana, "ip_ana")
            await sign_in(beto, "ip_beto")
            r = await ana.post("/api/lobby/private", json={"kind": "apuesta-1v1", "tier": "10"})
            assert r.status_code == 200, r.text
            code = r.json()["invite_code"]
            r = await beto.post("/api/lobby/join-code", json={"invite_code": code})
            assert r.status_code == 200, r.text
            match_id = await _match_of(ana)
            backends = p.gateway.state.backends
            key = store.seat_key(internal_secret)
            for name, dev in (("ip_ana", device), ("ip_beto", device)):
                await _observe(
                    p.gateway.state.db, backends, key, match_id, name, "10", "198.51.100.9", dev
                )
            final = await play_turns({"ip_ana": ana, "ip_beto": beto}, match_id)
            assert final["state"]["status"] == "finished"
        sources = ContractSources(backends.ledger, backends.engine)
        since = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)).isoformat()
        for _ in range(100):  # the settlement follows the end of the match
            pots = (await sources.pots(since, 0)).pots
            if any(x.match_id == match_id for x in pots):
                break
            await asyncio.sleep(0.05)
        [pot] = [x for x in pots if x.match_id == match_id]
        assert {s.player for s in pot.seats} == {"ip_ana", "ip_beto"}
        assert sorted(s.payout for s in pot.seats) == [0, 1800]  # $20 pot, 10% commission
        moves = (await sources.cashier(since, 0)).moves
        assert {(m.kind, m.player, m.amount) for m in moves} >= {
            ("deposit", "ip_ana", 5000),
            ("deposit", "ip_beto", 5000),
        }
        timed = [m for m in (await sources.timings(since, None)).matches if m.match_id == match_id]
        assert timed and {t.player for t in timed[0].timings} == {"ip_ana", "ip_beto"}
        assert all(t.delta_ms >= 0 for t in timed[0].timings)

        # the played hands, true deal and moves, with the real player ids: the deliberate-
        # losing detector replays every one of them with the rules
        since_dt = dt.datetime.fromisoformat(since)
        hands = await read_hands(sources, since_dt, [], 1000)
        played = [x for x in hands if x.match_id == match_id]
        assert played
        # read newest first (so a cap keeps the newest), handed over in the order played
        oldest_first = (await sources.hands(since, None)).hands
        newest_first = (await sources.hands(since, None, newest_first=True)).hands
        assert [x.deal_id for x in newest_first] == [x.deal_id for x in oldest_first][::-1]
        assert [x.deal_id for x in hands] == [x.deal_id for x in oldest_first]
        assert all(set(x.players) == {"ip_ana", "ip_beto"} for x in played)
        assert all(x.deal_id.startswith(match_id + "/") and x.moves for x in played)
        replayed = scan_losing(played)
        assert (replayed.hands_scanned, replayed.hands_skipped) == (len(played), 0)
        assert {f.player for f in replayed.findings} <= {"ip_ana", "ip_beto"}
        # bad input is refused with its reason, not answered with a 500
        for client, path in (
            (backends.ledger, "/v1/integrity/pots"),
            (backends.ledger, "/v1/integrity/cashier"),
            (backends.engine, "/internal/integrity/timings"),
            (backends.engine, "/internal/integrity/hands"),
        ):
            with pytest.raises(RemoteError) as refused:
                await client.get(path, dict, {"since": "yesterday"})
            assert (refused.value.status, refused.value.code) == (400, "invalid_time")
        with pytest.raises(RemoteError) as bad_cursor:
            await backends.engine.get(
                "/internal/integrity/timings", dict, {"since": since, "after": "x"}
            )
        assert bad_cursor.value.code == "invalid_cursor"
        with pytest.raises(RemoteError) as bad_hands_cursor:
            await backends.engine.get(
                "/internal/integrity/hands", dict, {"since": since, "after": "x"}
            )
        assert bad_hands_cursor.value.code == "invalid_cursor"
        # the seat observations: one device, one address, at a private table, hashed
        report = await scan(p.gateway.state.db, sources, IntegrityConfig())
        assert report.ran and report.pots >= 1 and report.sightings == 2 and report.hands >= 1
        page = await store.list_alerts(p.gateway.state.db, player="ip_ana")
        kinds = {a.kind for a in page.alerts}
        assert {"shared_device", "shared_address"} <= kinds
        shared = next(a for a in page.alerts if a.kind == "shared_device")
        assert shared.figures["private"] is True
        async with p.gateway.state.db.connect() as conn:
            hashes = (
                await conn.execute(
                    sa.text("SELECT address_hash, device_hash FROM integrity.seat_observations")
                )
            ).all()
        for address_hash, device_hash in hashes:
            assert b"198.51.100.9" not in bytes(address_hash) and len(bytes(address_hash)) == 32
            assert bytes(device_hash) == store.keyed_hash(key, device)
        # nothing new: the next round does nothing
        assert (await scan(p.gateway.state.db, sources, IntegrityConfig())).why == "nothing new"


class FakeSources:
    """The services' integrity pages, served from a planted history."""

    def __init__(self, history: History) -> None:
        self.history = history

    async def pots(self, since: str, after: int) -> SettledPotPage:
        pots = [
            SettledPot(
                match_id=p.match_id,
                tier=p.tier,
                variant=p.variant,
                currency=p.currency,
                closed_at=dt.datetime.fromtimestamp(p.closed_at_ms / 1000, dt.UTC).isoformat(),
                close_entry_id=i + 1,
                seats=[PotSeat(n, s.player, s.stake, s.payout) for n, s in enumerate(p.seats)],
            )
            for i, p in enumerate(self.history.pots)
        ]
        return SettledPotPage(pots=[x for x in pots if x.close_entry_id > after], next=None)

    async def cashier(self, since: str, after: int) -> CashierMovePage:
        moves = [
            CashierMove(
                entry_id=m.entry_id,
                kind=m.kind,
                player=m.player,
                amount=m.amount,
                currency=m.currency,
                created_at=dt.datetime.fromtimestamp(m.at_ms / 1000, dt.UTC).isoformat(),
            )
            for m in self.history.moves
            if m.entry_id > after
        ]
        return CashierMovePage(moves=moves, next=None)

    async def timings(self, since: str, after: str | None) -> TimingPage:
        if after:
            return TimingPage(matches=[], next=None)
        by_match: dict[str, list[SeatTiming]] = {}
        for t in self.history.timings:
            by_match.setdefault(t.match_id, []).append(SeatTiming(t.player, t.delta_ms, t.at_ms))
        matches = [MatchTimings(m, "10", ts[-1].at_ms, ts) for m, ts in by_match.items()]
        return TimingPage(matches=matches, next="done" if matches else None)

    async def hands(
        self, since: str, after: str | None, limit: int = 50, newest_first: bool = False
    ) -> HandPage:
        return HandPage(hands=[])


async def test_a_scan_stores_planted_abuse_once_and_one_scan_runs_at_a_time(
    platform_db: str,
) -> None:
    from services.common.db import create_engine

    db = create_engine(platform_db, application_name="integrity-scan-test", pool_size=3)
    try:
        planted = h.merged(
            h.dumping_ring("sr"),
            h.laundering_chain("sm"),
            h.structured_deposits("ss"),
            h.bot_player("sb"),
        )
        sources = FakeSources(planted)
        # the gateway saw the planted matches' seats: private tables, each from his own place
        for pot in planted.pots:
            for seat in pot.seats:
                await store.record_seat(
                    db,
                    match_id=pot.match_id,
                    player=seat.player,
                    tier=pot.tier,
                    private=pot.private,
                    address_hash=store.keyed_hash(b"k", seat.player),
                    device_hash=None,
                )
        since = dt.datetime.fromtimestamp(h.START_MS / 1000 - 86400, dt.UTC)
        first = await scan(db, sources, IntegrityConfig(), since=since)
        assert first.ran and first.new_alerts >= 10
        again = await scan(db, sources, IntegrityConfig(), since=since)
        assert again.alerts == first.alerts and again.new_alerts == 0
        found = {(a.kind, a.player) for a in (await store.list_alerts(db, limit=200)).alerts}
        assert {
            ("pair_flow", "sr_b"),
            ("pair_flow", "sr_c"),
            ("repeated_losing", "sr_a"),
            ("chain", "sm_y"),
            ("structuring", "ss"),
            ("little_play", "ss"),
            ("steady_timing", "sb"),
        } <= found
        async with db.connect() as holder:
            await holder.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": SCAN_LOCK_KEY})
            busy = await scan(db, sources, IntegrityConfig(), since=since)
            assert (busy.ran, busy.why) == (False, "another scan is running")
            await holder.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": SCAN_LOCK_KEY})
    finally:
        await db.dispose()


async def test_compliance_holds_freezes_and_closes_with_reasons_in_the_audit_log(
    platform_db: str, internal_secret: bytes, tmp_path: Path
) -> None:
    await make_user(platform_db, "ic_mule")
    await make_user(platform_db, "ic_friend")
    for name, role in (
        ("ic_officer", "compliance"),
        ("ic_caja", "finance"),
        ("ic_boss", "admin"),
        ("ic_aud", "auditor"),
        ("ic_sup", "support"),
    ):
        await make_user(platform_db, name, role)
    async with platform(platform_db, internal_secret, tmp_path) as p:
        [raised] = await store.raise_alerts(
            p.gateway.state.db,
            [
                NewAlert(
                    kind="chain",
                    player="ic_mule",
                    counterpart="ic_friend",
                    dedup_key="chain:ic_friend:ic_mule:1",
                    score=7.7,
                    figures={"passed_cents": 38_400},
                    evidence=[
                        EvidenceRef(
                            kind="match", ref="ic-m1", detail={"tier": "80", "private": True}
                        ),
                        EvidenceRef(
                            kind="entry",
                            ref="12",
                            detail={"kind": "deposit", "player": "ic_friend", "amount": 50_000},
                        ),
                        EvidenceRef(
                            kind="flow", ref="ic_friend>ic_mule:USD", detail={"net_cents": 38_400}
                        ),
                    ],
                )
            ],
        )
        alert_id = raised.id
        signed_in = p.signed_in("ic_officer", "ic_caja", "ic_mule", "ic_sup", "ic_aud")
        async with signed_in as (officer, caja, mule, sup, aud):
            r = await caja.post(
                "/api/finance/deposits",
                json={"player": "ic_mule", "amount": 5000, "reference": "in"},
            )
            assert r.status_code == 200, r.text
            # other roles may not read or act on alerts
            for client in (caja, mule, sup, aud):
                assert (await client.get("/api/compliance/alerts")).status_code == 403
                assert (
                    await client.post("/api/compliance/players/ic_mule/hold", json={"reason": "x"})
                ).status_code == 403
            listed = (await officer.get("/api/compliance/alerts", params={"status": "open"})).json()
            assert alert_id in [a["id"] for a in listed["alerts"]]
            detail = (await officer.get(f"/api/compliance/alerts/{alert_id}")).json()
            assert detail["matches"][0]["match_id"] == "ic-m1" and detail["matches"][0]["private"]
            assert detail["matches"][0]["transcripts"] == "/api/audit/transcripts?match_id=ic-m1"
            assert detail["entries"][0]["amount"] == 50_000
            assert detail["flows"][0]["from_player"] == "ic_friend"
            assert [s["player"] for s in detail["players"]] == ["ic_mule", "ic_friend"]
            # compliance may list an alert's hands
            assert (
                await officer.get("/api/audit/transcripts", params={"match_id": "ic-m1"})
            ).status_code == 200

            # hold: a reason is required; then the cashier's withdrawal is refused
            assert (
                await officer.post("/api/compliance/players/ic_mule/hold", json={})
            ).status_code == 400
            r = await officer.post(
                "/api/compliance/players/ic_mule/hold",
                json={"reason": "chain alert under review", "alert_id": alert_id},
            )
            assert r.status_code == 200, r.text
            out = await caja.post(
                "/api/finance/withdrawals",
                json={"player": "ic_mule", "amount": 1000, "reference": "cash out"},
            )
            assert out.status_code == 403 and out.json()["error"] == "withdrawals_held"
            assert (await mule.get("/api/me/wallet")).json()["balance"] == 5000
            r = await officer.post(
                "/api/compliance/players/ic_mule/release", json={"reason": "source of funds shown"}
            )
            assert r.status_code == 200, r.text
            out = await caja.post(
                "/api/finance/withdrawals",
                json={"player": "ic_mule", "amount": 1000, "reference": "cash out"},
            )
            assert out.status_code == 200, out.text

            # freeze signs the player out; unfreeze lets him sign in again
            assert (await mule.get("/api/me/wallet")).status_code == 200
            r = await officer.post(
                "/api/compliance/players/ic_mule/freeze", json={"reason": "ring confirmed"}
            )
            assert r.status_code == 200 and r.json()["status"] == "locked"
            assert (await mule.get("/api/me/wallet")).status_code == 401
            staff = await officer.post(
                "/api/compliance/players/ic_officer/freeze", json={"reason": "x"}
            )
            assert staff.status_code in (404, 422)
            r = await officer.post(
                "/api/compliance/players/ic_mule/unfreeze", json={"reason": "appeal upheld"}
            )
            assert r.status_code == 200 and r.json()["status"] == "active"
            await sign_in(mule, "ic_mule")

            # closing needs a resolution and a reason, and happens once
            assert (
                await officer.post(
                    f"/api/compliance/alerts/{alert_id}/close", json={"resolution": "actioned"}
                )
            ).status_code == 400
            r = await officer.post(
                f"/api/compliance/alerts/{alert_id}/close",
                json={"resolution": "actioned", "reason": "account frozen, reported"},
            )
            assert r.status_code == 200 and r.json()["status"] == "closed"
            twice = await officer.post(
                f"/api/compliance/alerts/{alert_id}/close",
                json={"resolution": "dismissed", "reason": "again"},
            )
            assert twice.status_code == 409

            # the daily report's view of the day
            today = dt.datetime.now(dt.UTC).date().isoformat()
            day = (await aud.get(f"/api/integrity/days/{today}")).json()
            assert alert_id in [a["id"] for a in day["alerts"]] and day["by_kind"]["chain"] >= 1
            assert (await mule.get(f"/api/integrity/days/{today}")).status_code == 403

        async with p.client() as boss:
            await sign_in(boss, "ic_boss")
            log = (await boss.get("/api/staff/audit", params={"actor": "ic_officer"})).json()
        actions = [(a["action"], a["subject"], a["reason"]) for a in log["actions"]]
        assert actions == [
            ("compliance.close_alert", f"alert:{alert_id}", "account frozen, reported"),
            ("compliance.unfreeze", "user:ic_mule", "appeal upheld"),
            ("compliance.freeze", "user:ic_mule", "ring confirmed"),
            ("compliance.release_withdrawals", "user:ic_mule", "source of funds shown"),
            ("compliance.hold_withdrawals", "user:ic_mule", "chain alert under review"),
        ]
