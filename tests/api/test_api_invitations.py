"""Partners by invitation, and the one eligibility check every seat passes.

Money moves only by its owner's hand: naming a partner seats nobody and holds nothing until the
partner accepts in his own session; locked and self-excluded players are refused by every path
that seats or holds. The real ledger, engine and matchmaking run in-process (platform_stack).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

import httpx
import pytest
from sqlalchemy import text

from api import accounts
from api.backends import get_backends
from services.common.db import create_engine
from services.common.errors import ServiceError
from services.common.http import ServiceUnavailable
from services.common.migrate import upgrade
from tests.api.api_helpers import make_user, sign_in
from tests.api.platform_stack import COMPONENTS, Platform, platform

DEPOSIT = 2000
STAKE = 1000  # tier "10"


@pytest.fixture(scope="module")
def platform_db(database_url: str) -> str:
    upgrade(database_url, COMPONENTS)
    return database_url


class Players:
    """Signed-in clients by name, on one platform."""

    def __init__(self, p: Platform, stack: AsyncExitStack) -> None:
        self.p = p
        self.stack = stack
        self.clients: dict[str, httpx.AsyncClient] = {}

    async def add(self, name: str, deposit: int = DEPOSIT) -> httpx.AsyncClient:
        await make_user(self.p.settings.database_url, name)
        if deposit:
            async with self.p.client() as fin:
                await sign_in(fin, "caja")
                r = await fin.post(
                    "/api/finance/deposits",
                    json={"player": name, "amount": deposit, "reference": "test deposit"},
                )
                assert r.status_code == 200, r.text
        client = await self.stack.enter_async_context(self.p.client())
        await sign_in(client, name)
        self.clients[name] = client
        return client

    def __getitem__(self, name: str) -> httpx.AsyncClient:
        return self.clients[name]

    async def balance(self, name: str) -> int:
        r = await self.clients[name].get("/api/me/wallet")
        assert r.status_code == 200, r.text
        return int(r.json()["balance"])

    async def seats(self, name: str) -> list[dict[str, Any]]:
        r = await self.clients[name].get("/api/lobby/mine")
        assert r.status_code == 200, r.text
        return list(r.json())


@asynccontextmanager
async def players(
    platform_db: str, secret: bytes, tmp_path: Path, **overrides: object
) -> AsyncIterator[Players]:
    async with platform(platform_db, secret, tmp_path, **overrides) as p, AsyncExitStack() as st:
        yield Players(p, st)


_made_finance: set[str] = set()


async def _finance(platform_db: str) -> None:
    if platform_db not in _made_finance:
        await make_user(platform_db, "caja", "finance")
        _made_finance.add(platform_db)


async def _sql(platform_db: str, statement: str, **params: object) -> None:
    engine = create_engine(platform_db, as_app_role=False)  # tests move time, lock accounts
    try:
        async with engine.begin() as conn:
            await conn.execute(text(statement), params)
    finally:
        await engine.dispose()


def _across(table: dict[str, Any], a: str, b: str) -> bool:
    seat = {s["player"]: s["seat"] for s in table["seats"] if s["player"]}
    return a in seat and b in seat and abs(seat[a] - seat[b]) == 2


async def _private_code(ps: Players, host: str, kind: str) -> str:
    r = await ps[host].post("/api/lobby/private", json={"kind": kind, "tier": "10"})
    assert r.status_code == 200, r.text
    return str(r.json()["invite_code"])


# ------------------------------------------------------------------ naming a partner


@pytest.mark.parametrize("op", ["quick", "private", "code"])
async def test_partner_is_seated_and_held_only_after_accepting(
    platform_db: str, internal_secret: bytes, tmp_path: Path, op: str
) -> None:
    await _finance(platform_db)
    ana, cris, host = f"{op}_ana", f"{op}_cris", f"{op}_host"
    kind = {"quick": "casa-parejas", "private": "dominicana-2v2-100", "code": "dominicana-2v2-200"}
    async with players(platform_db, internal_secret, tmp_path) as ps:
        for name in (ana, cris):
            await ps.add(name)
        if op == "code":
            await ps.add(host)
            code = await _private_code(ps, host, kind[op])
            path, body = "/api/lobby/join-code", {"invite_code": code, "partner": cris}
        else:
            path = "/api/lobby/quick-join" if op == "quick" else "/api/lobby/private"
            body = {"kind": kind[op], "tier": "10", "partner": cris}
        r = await ps[ana].post(path, json=body)
        assert r.status_code == 202, r.text
        inv = r.json()
        assert inv["status"] == "pending" and inv["invitees"] == [cris] and inv["op"] == op
        # Nothing held from, or seated for, either of them yet.
        assert await ps.balance(cris) == DEPOSIT and await ps.seats(cris) == []
        assert await ps.balance(ana) == DEPOSIT and await ps.seats(ana) == []
        listed = (await ps[cris].get("/api/invitations")).json()
        assert [i["invitation_id"] for i in listed["incoming"]] == [inv["invitation_id"]]
        assert listed["outgoing"] == []
        mine = (await ps[ana].get("/api/invitations")).json()
        assert [i["invitation_id"] for i in mine["outgoing"]] == [inv["invitation_id"]]

        ok = await ps[cris].post(f"/api/invitations/{inv['invitation_id']}/accept")
        assert ok.status_code == 200, ok.text
        table = ok.json()["table"]
        assert ok.json()["status"] == "accepted"
        assert ok.json()["table_id"] == table["table_id"]
        assert _across(table, ana, cris), table
        assert await ps.balance(cris) == DEPOSIT - STAKE
        assert await ps.balance(ana) == DEPOSIT - STAKE
        assert [t["table_id"] for t in await ps.seats(cris)] == [table["table_id"]]
        assert [t["table_id"] for t in await ps.seats(ana)] == [table["table_id"]]
        # Accepting again replays the join: one seat and one hold each.
        again = await ps[cris].post(f"/api/invitations/{inv['invitation_id']}/accept")
        assert again.status_code == 200, again.text
        assert again.json()["table"]["table_id"] == table["table_id"]
        assert await ps.balance(cris) == DEPOSIT - STAKE
        assert (await ps[cris].get("/api/invitations")).json()["incoming"] == []


async def test_a_seating_cut_short_stays_listed_until_an_acceptance_replays_it(
    platform_db: str, internal_secret: bytes, tmp_path: Path
) -> None:
    """Matchmaking fails while the last acceptance seats everyone: the invitation is decided
    (accepted) but has no table. It stays in both players' lists (the lobby's only way back
    to it), and accepting it again, by either of them, seats both once."""
    await _finance(platform_db)
    ana, cris = "cut_ana", "cut_cris"
    async with players(platform_db, internal_secret, tmp_path) as ps:
        for name in (ana, cris):
            await ps.add(name)
        r = await ps[ana].post(
            "/api/lobby/quick-join", json={"kind": "casa-parejas", "tier": "10", "partner": cris}
        )
        assert r.status_code == 202, r.text
        number = r.json()["invitation_id"]
        mm = get_backends(ps.p.gateway.state).matchmaking
        down = ServiceUnavailable("matchmaking is down for this test")

        async def refuse(*_args: object, **_kwargs: object) -> NoReturn:
            raise down

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(mm, "post", refuse)
            r = await ps[cris].post(f"/api/invitations/{number}/accept")
        assert r.status_code == 503 and r.json()["error"] == "service_unavailable", r.text
        assert await ps.balance(cris) == DEPOSIT and await ps.seats(cris) == []

        incoming = (await ps[cris].get("/api/invitations")).json()["incoming"]
        outgoing = (await ps[ana].get("/api/invitations")).json()["outgoing"]
        for listed in (incoming, outgoing):
            assert [(i["invitation_id"], i["status"], i["table_id"]) for i in listed] == [
                (number, "accepted", None)
            ], listed
        # The inviter may replay it too: both seated, each held his stake once.
        r = await ps[ana].post(f"/api/invitations/{number}/accept")
        assert r.status_code == 200, r.text
        table = r.json()["table"]
        assert _across(table, ana, cris), table
        for name in (ana, cris):
            assert await ps.balance(name) == DEPOSIT - STAKE
            assert [t["table_id"] for t in await ps.seats(name)] == [table["table_id"]]
            listed = (await ps[name].get("/api/invitations")).json()
            assert listed == {"incoming": [], "outgoing": []}, listed


async def test_decline_cancel_expiry_and_misuse(
    platform_db: str, internal_secret: bytes, tmp_path: Path
) -> None:
    await _finance(platform_db)
    kind = {"kind": "casa-parejas", "tier": "20"}
    async with players(platform_db, internal_secret, tmp_path, invitation_ttl_s=7) as ps:
        for name in ("m_ana", "m_cris", "m_dani"):
            await ps.add(name, deposit=4000)

        async def invite(key: str) -> int:
            r = await ps["m_ana"].post(
                "/api/lobby/quick-join", json={**kind, "partner": "m_cris", "idempotency_key": key}
            )
            assert r.status_code == 202, r.text
            return int(r.json()["invitation_id"])

        first = await invite("key-decline-1")
        # Strangers see nothing; each side may only do his own part.
        for verb in ("accept", "decline", "cancel"):
            r = await ps["m_dani"].post(f"/api/invitations/{first}/{verb}")
            assert r.status_code == 404 and r.json()["error"] == "invitation_not_found", r.text
        assert (await ps["m_dani"].get(f"/api/invitations/{first}")).status_code == 404
        r = await ps["m_cris"].post(f"/api/invitations/{first}/cancel")
        assert r.status_code == 403 and r.json()["error"] == "not_inviter"
        r = await ps["m_ana"].post(f"/api/invitations/{first}/accept")
        assert r.status_code == 403 and r.json()["error"] == "not_invitee"
        r = await ps["m_ana"].post(f"/api/invitations/{first}/decline")
        assert r.status_code == 403 and r.json()["error"] == "not_invitee"
        # The same key again is the same invitation, not a second one.
        assert await invite("key-decline-1") == first

        r = await ps["m_cris"].post(f"/api/invitations/{first}/decline")
        assert r.status_code == 200 and r.json()["status"] == "declined", r.text
        r = await ps["m_cris"].post(f"/api/invitations/{first}/accept")
        assert r.status_code == 409 and r.json()["error"] == "invitation_closed"
        seen = (await ps["m_ana"].get(f"/api/invitations/{first}")).json()
        assert seen["status"] == "declined"

        second = await invite("key-cancel-2")
        r = await ps["m_ana"].post(f"/api/invitations/{second}/cancel")
        assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text
        r = await ps["m_cris"].post(f"/api/invitations/{second}/accept")
        assert r.status_code == 409 and r.json()["error"] == "invitation_closed"

        third = await invite("key-expire-3")
        got = (await ps["m_cris"].get(f"/api/invitations/{third}")).json()
        # The lifetime is the setting's (7 s here), counted by the database's clock.
        made = datetime.fromisoformat(got["created_at"])
        due = datetime.fromisoformat(got["expires_at"])
        assert (due - made).total_seconds() == pytest.approx(7, abs=0.01)
        # Its time passes (moved back in the database rather than waited for).
        await _sql(
            platform_db,
            "UPDATE gateway.invitations SET created_at = now() - interval '1 hour', "
            "expires_at = now() - interval '1 second' WHERE id = :id",
            id=third,
        )
        r = await ps["m_cris"].post(f"/api/invitations/{third}/accept")
        assert r.status_code == 409 and r.json()["error"] == "invitation_expired", r.text
        r = await ps["m_ana"].post(f"/api/invitations/{third}/cancel")
        assert r.status_code == 409 and r.json()["error"] == "invitation_expired", r.text
        assert (await ps["m_cris"].get("/api/invitations")).json()["incoming"] == []
        assert (await ps["m_cris"].get(f"/api/invitations/{third}")).json()["status"] == "expired"

        # At most five pending invitations out.
        for n in range(5):
            await invite(f"key-limit-{n}")
        r = await ps["m_ana"].post(
            "/api/lobby/quick-join",
            json={**kind, "partner": "m_cris", "idempotency_key": "key-limit-5"},
        )
        assert r.status_code == 409 and r.json()["error"] == "too_many_invitations"

        # And at most sixty an hour, however many were cancelled (sent earlier, here by SQL).
        await _sql(
            platform_db,
            "INSERT INTO gateway.invitations (inviter, op, kind, tier, status, "
            "idempotency_key, created_at, expires_at) SELECT 'm_dani', 'quick', "
            "'casa-parejas', '20', 'cancelled', 'old-' || n, now() - interval '30 minutes', "
            "now() - interval '29 minutes' FROM generate_series(1, 60) AS n",
        )
        r = await ps["m_dani"].post("/api/lobby/quick-join", json={**kind, "partner": "m_cris"})
        assert r.status_code == 429 and r.json()["error"] == "rate_limited", r.text

        for name in ("m_ana", "m_cris", "m_dani"):
            assert await ps.balance(name) == 4000, name
            assert await ps.seats(name) == [], name


async def test_both_balances_are_checked_when_the_invitation_is_accepted(
    platform_db: str, internal_secret: bytes, tmp_path: Path
) -> None:
    await _finance(platform_db)
    paid = {"kind": "cubana-habana", "tier": "10"}
    async with players(platform_db, internal_secret, tmp_path) as ps:
        await ps.add("b_rico")
        await ps.add("b_pobre", deposit=STAKE - 1)
        await ps.add("b_otro")
        # Too poor to sit himself: refused before any hold is asked for.
        r = await ps["b_pobre"].post("/api/lobby/quick-join", json=paid)
        assert r.status_code == 403 and r.json()["error"] == "insufficient_funds", r.text
        r = await ps["b_pobre"].post("/api/lobby/quick-join", json={**paid, "partner": "b_rico"})
        assert r.status_code == 403 and r.json()["error"] == "insufficient_funds", r.text
        # Named by someone else, he learns it on accepting; the inviter is not held either.
        r = await ps["b_rico"].post("/api/lobby/quick-join", json={**paid, "partner": "b_pobre"})
        assert r.status_code == 202, r.text
        r = await ps["b_pobre"].post(f"/api/invitations/{r.json()['invitation_id']}/accept")
        assert r.status_code == 403 and r.json()["error"] == "insufficient_funds", r.text
        # The inviter's money is gone by the time his partner accepts: refused, reason unsaid.
        r = await ps["b_rico"].post("/api/lobby/quick-join", json={**paid, "partner": "b_otro"})
        assert r.status_code == 202, r.text
        invitation = r.json()["invitation_id"]
        async with ps.p.client() as fin:
            await sign_in(fin, "caja")
            r = await fin.post(
                "/api/finance/withdrawals",
                json={"player": "b_rico", "amount": DEPOSIT - 1, "reference": "test"},
            )
            assert r.status_code == 200, r.text
        r = await ps["b_otro"].post(f"/api/invitations/{invitation}/accept")
        assert r.status_code == 403 and r.json()["error"] == "partner_unavailable", r.text
        assert await ps.balance("b_otro") == DEPOSIT and await ps.seats("b_otro") == []
        assert await ps.balance("b_pobre") == STAKE - 1 and await ps.seats("b_pobre") == []
        assert await ps.balance("b_rico") == 1 and await ps.seats("b_rico") == []


# ------------------------------------------------------------------ every seating route

# Every route under /api/lobby and /api/invitations, by what it does. A route that seats or
# holds must be listed in SEATING (and covered below); a new one fails this test until it is.
READS = {
    ("GET", "/api/lobby/kinds"),
    ("GET", "/api/lobby/tables"),
    ("GET", "/api/lobby/mine"),
    ("GET", "/api/lobby/tables/{table_id:str}"),
    ("GET", "/api/invitations"),
    ("GET", "/api/invitations/{invitation_id:int}"),
    ("GET", "/api/invitations/by-match/{match_id:str}"),
    # These unseat or close; they never seat anyone or hold money (checked below all the same).
    ("POST", "/api/lobby/leave"),
    ("POST", "/api/invitations/{invitation_id:int}/decline"),
    ("POST", "/api/invitations/{invitation_id:int}/cancel"),
}
SEATING = {
    ("POST", "/api/lobby/quick-join"),
    ("POST", "/api/lobby/private"),
    ("POST", "/api/lobby/join-code"),
    ("POST", "/api/lobby/cpu"),
    ("POST", "/api/invitations/{invitation_id:int}/accept"),
    ("POST", "/api/invitations/rematch"),
}


def _lobby_routes(p: Platform) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for route in p.gateway.routes:
        if not route.path.startswith(("/api/lobby", "/api/invitations")):
            continue
        for method in getattr(route, "methods", {"WEBSOCKET"}):
            if method not in ("HEAD", "OPTIONS"):
                found.add((method, route.path))
    return found


async def test_no_route_seats_or_holds_a_third_party_or_an_excluded_player(
    platform_db: str, internal_secret: bytes, tmp_path: Path
) -> None:
    await _finance(platform_db)
    async with players(platform_db, internal_secret, tmp_path) as ps:
        routes = _lobby_routes(ps.p)
        assert routes == READS | SEATING, (
            f"new: {sorted(routes - READS - SEATING)}, gone: {sorted((READS | SEATING) - routes)}"
        )
        for name in ("e_ana", "e_cris", "e_dani", "e_host", "e_sam", "e_lou"):
            await ps.add(name)
        victim = "e_cris"
        kind = "dominicana-2v2-100"
        code = await _private_code(ps, "e_host", kind)
        # The victim sits at a table of his own, so a route that unseats could be seen to.
        own = await ps[victim].post("/api/lobby/private", json={"kind": kind, "tier": "10"})
        assert own.status_code == 200, own.text
        own_table = own.json()["table_id"]
        held = DEPOSIT - STAKE

        async def untouched() -> None:
            assert await ps.balance(victim) == held
            assert [t["table_id"] for t in await ps.seats(victim)] == [own_table]

        # 1. Every seating route, as e_ana, aimed at the victim every way its body allows.
        attempts: dict[tuple[str, str], Callable[[], Awaitable[None]]] = {}

        async def named(path: str, body: dict[str, Any]) -> None:
            r = await ps["e_ana"].post(path, json={**body, "partner": victim})
            assert r.status_code == 202 and r.json()["status"] == "pending", r.text
            await untouched()
            for field in ("player_id", "player", "partner_id", "user"):
                r = await ps["e_ana"].post(path, json={**body, field: victim})
                assert r.status_code == 400, (path, field, r.text)
                await untouched()

        paid = {"kind": kind, "tier": "10"}
        attempts[("POST", "/api/lobby/quick-join")] = lambda: named("/api/lobby/quick-join", paid)
        attempts[("POST", "/api/lobby/private")] = lambda: named("/api/lobby/private", paid)
        attempts[("POST", "/api/lobby/join-code")] = lambda: named(
            "/api/lobby/join-code", {"invite_code": code}
        )

        async def cpu() -> None:
            for field in ("player_id", "player", "partner", "partner_id"):
                r = await ps["e_ana"].post("/api/lobby/cpu", json={"kind": kind, field: victim})
                assert r.status_code == 400, (field, r.text)
                await untouched()

        attempts[("POST", "/api/lobby/cpu")] = cpu

        async def accept() -> None:
            # Only the invitee accepts: not a stranger, not the inviter on his behalf.
            r = await ps["e_ana"].post(
                "/api/lobby/quick-join",
                json={**paid, "partner": victim, "idempotency_key": "key-e-accept"},
            )
            assert r.status_code == 202, r.text
            inv = r.json()["invitation_id"]
            for who in ("e_dani", "e_ana"):
                r = await ps[who].post(f"/api/invitations/{inv}/accept")
                assert r.status_code in (403, 404), r.text
                await untouched()

        attempts[("POST", "/api/invitations/{invitation_id:int}/accept")] = accept

        async def rematch() -> None:
            # "Play again" names a match, never a player, and only one the caller played.
            for field in ("player_id", "player", "partner", "invitees"):
                r = await ps["e_ana"].post(
                    "/api/invitations/rematch", json={"match_id": "m-none", field: victim}
                )
                assert r.status_code == 400, (field, r.text)
                await untouched()
            r = await ps["e_ana"].post("/api/invitations/rematch", json={"match_id": "m-none"})
            assert r.status_code == 404, r.text
            await untouched()

        attempts[("POST", "/api/invitations/rematch")] = rematch
        assert set(attempts) == SEATING
        for route in sorted(SEATING):
            await attempts[route]()
        # Leaving names a table, never a player: e_ana cannot unseat the victim.
        r = await ps["e_ana"].post("/api/lobby/leave", json={"table_id": own_table})
        assert r.status_code == 404, r.text
        await untouched()

        # 2. Self-excluded: refused every paid seat, by each route; free tables stay open.
        sam = ps["e_sam"]
        r = await sam.post("/api/me/self-exclusion", json={"days": 30})
        assert r.status_code == 200, r.text
        refusals = {
            "/api/lobby/quick-join": paid,
            "/api/lobby/private": paid,
            "/api/lobby/join-code": {"invite_code": code},
        }
        for path, body in refusals.items():
            r = await sam.post(path, json=body)
            assert r.status_code == 403 and r.json()["error"] == "self_excluded", (path, r.text)
            # Nor may he name a partner at a paid table (the invitation would hold money).
            r = await sam.post(path, json={**body, "partner": "e_dani"})
            assert r.status_code == 403 and r.json()["error"] == "self_excluded", (path, r.text)
            # Nor be named as one.
            r = await ps["e_dani"].post(path, json={**body, "partner": "e_sam"})
            assert r.status_code == 403 and r.json()["error"] == "partner_unavailable", r.text
        r = await sam.post("/api/lobby/cpu", json={"kind": "apuesta-1v1"})
        assert r.status_code == 200, r.text
        assert await ps.balance("e_sam") == DEPOSIT
        # Excluded after being invited: his accept is refused, and so is his inviter's.
        r = await ps["e_dani"].post(
            "/api/lobby/quick-join",
            json={**paid, "partner": "e_lou", "idempotency_key": "key-e-lou-1"},
        )
        inv_lou = r.json()["invitation_id"]
        r = await ps["e_lou"].post(
            "/api/lobby/quick-join",
            json={**paid, "partner": "e_dani", "idempotency_key": "key-e-dani-1"},
        )
        assert r.status_code == 202, r.text
        inv_dani = r.json()["invitation_id"]
        r = await ps["e_lou"].post("/api/me/self-exclusion", json={"days": 30})
        assert r.status_code == 200, r.text
        r = await ps["e_lou"].post(f"/api/invitations/{inv_lou}/accept")
        assert r.status_code == 403 and r.json()["error"] == "self_excluded", r.text
        r = await ps["e_dani"].post(f"/api/invitations/{inv_dani}/accept")
        assert r.status_code == 403 and r.json()["error"] == "partner_unavailable", r.text
        assert await ps.balance("e_lou") == DEPOSIT and await ps.seats("e_lou") == []
        assert await ps.balance("e_dani") == DEPOSIT and await ps.seats("e_dani") == []

        # 3. Locked: sits nowhere, free tables included. His inviter's invitation dies with it.
        r = await ps["e_ana"].post(
            "/api/lobby/quick-join",
            json={**paid, "partner": "e_dani", "idempotency_key": "key-e-locked"},
        )
        assert r.status_code == 202, r.text
        inv_locked = r.json()["invitation_id"]
        await _sql(platform_db, "UPDATE gateway.users SET status = 'locked' WHERE id = 'e_ana'")
        r = await ps["e_dani"].post(f"/api/invitations/{inv_locked}/accept")
        assert r.status_code == 403 and r.json()["error"] == "partner_unavailable", r.text
        assert await ps.balance("e_dani") == DEPOSIT and await ps.seats("e_dani") == []
        bodies: dict[str, dict[str, Any] | None] = {
            "/api/lobby/quick-join": {"kind": kind, "tier": "free"},
            "/api/lobby/private": {"kind": kind, "tier": "free"},
            "/api/lobby/join-code": {"invite_code": code},
            "/api/lobby/cpu": {"kind": "apuesta-1v1"},
            "/api/invitations/{invitation_id:int}/accept": None,
            "/api/invitations/rematch": {"match_id": "m-none"},
        }
        assert {("POST", path) for path in bodies} == SEATING
        for path, body in bodies.items():
            path = path.replace("{invitation_id:int}", str(inv_locked))
            r = await ps["e_ana"].post(path, json=body)
            assert r.status_code in (401, 403), (path, r.text)
        # The check itself, for a session that still reached it: locked sits nowhere.
        from api.backends import get_backends
        from api.eligibility import check_may_sit

        state = ps.p.gateway.state
        locked = await accounts.get_user(state.db, "e_ana")
        assert locked is not None and locked.status == "locked"
        for kind_, tier in ((kind, "10"), ("apuesta-1v1", "free"), (None, None)):
            with pytest.raises(ServiceError) as refused:
                await check_may_sit(state.db, get_backends(state), "e_ana", locked, kind_, tier)
            assert refused.value.status == 403 and refused.value.code == "account_locked"
        await untouched()
