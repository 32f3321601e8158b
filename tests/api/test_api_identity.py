"""Identity and place: paid seats and the cashier need a verified adult (one account per person)
in an allowed region without VPN or remote desktop; free tables do not. Every refusal has its
own code, and a provider that fails, hangs or answers garbage refuses: nothing is seated, held
or paid on a doubtful answer. The real services run in-process (platform_stack); the providers
are the scriptable in-memory doubles, or a local aiohttp server for the HTTP adapters.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from api import identity
from api.app import create_app
from api.backends import get_backends
from api.identity import (
    HttpIdentity,
    HttpLocation,
    IdentityStatus,
    InMemoryIdentity,
    InMemoryLocation,
    Location,
    PlaceGate,
    ProviderUnavailable,
)
from services.common.config import ConfigError, load_settings
from services.common.migrate import upgrade
from tests.api.platform_stack import COMPONENTS
from tests.api.test_api_invitations import DEPOSIT, STAKE, Players, _finance, players
from tests.conftest import make_settings

KIND = {"kind": "dominicana-2v2-100", "tier": "10"}
FREE = {"kind": "casa-parejas", "tier": "free"}
# Every reason a player may not play for money, and how the doubles are told to give it.
CODES = (
    "identity_unverified",
    "underage",
    "duplicate_person",
    "region_not_allowed",
    "vpn_detected",
    "remote_desktop_detected",
    "identity_unavailable",
)


@pytest.fixture(scope="module")
def platform_db(database_url: str) -> str:
    upgrade(database_url, COMPONENTS)
    return database_url


def _status(*, verified: bool, adult: bool, person: str | None) -> IdentityStatus:
    return IdentityStatus(
        verified=verified,
        adult=adult,
        person_id=person,
        checked_at=datetime.now(UTC),
        provider_ref="test",
    )


def gate_of(ps: Players) -> PlaceGate:
    gate = get_backends(ps.p.gateway.state).place
    if not isinstance(gate.identity, InMemoryIdentity):
        raise TypeError("the test platform runs the in-memory identity double")
    return gate


async def script(ps: Players, player: str, code: str) -> None:
    """Make the doubles answer so that `player` is refused with `code`."""
    gate = gate_of(ps)
    ident = gate.identity
    where = gate.location
    assert isinstance(ident, InMemoryIdentity) and isinstance(where, InMemoryLocation)
    if code == "identity_unverified":
        ident.script[player] = _status(verified=False, adult=False, person=None)
    elif code == "underage":
        ident.script[player] = _status(verified=True, adult=False, person=f"kid-{player}")
    elif code == "duplicate_person":
        # Another account of the same person was verified first.
        first = f"{player[:20]}_first"
        await ps.add(first, deposit=0)
        person = f"person-{player}"
        ident.script[first] = _status(verified=True, adult=True, person=person)
        r = await ps[first].get("/api/me/verification")
        assert r.json() == {"may_play_paid": True, "reason": None, "detail": None}, r.text
        ident.script[player] = _status(verified=True, adult=True, person=person)
    elif code == "region_not_allowed":
        where.script[player] = InMemoryLocation.at("US-NY", allowed=False)
    elif code == "vpn_detected":
        where.script[player] = InMemoryLocation.at("DO-01", allowed=True, vpn=True)
    elif code == "remote_desktop_detected":
        where.script[player] = InMemoryLocation.at("DO-01", allowed=True, remote_desktop=True)
    elif code == "identity_unavailable":
        ident.script[player] = ProviderUnavailable("identity: no answer in time")
    else:
        raise ValueError(code)


def _refused(r: Any, code: str) -> None:
    status = 503 if code == "identity_unavailable" else 403
    assert r.status_code == status, r.text
    assert r.json()["error"] == code, r.text


@asynccontextmanager
async def paid_players(platform_db: str, secret: bytes, tmp_path: Path) -> AsyncIterator[Players]:
    # No caching, so a script written after an earlier check still counts.
    async with players(
        platform_db, secret, tmp_path, identity_cache_ttl_s=0, location_cache_ttl_s=0
    ) as ps:
        yield ps


# ------------------------------------------------------------------ seats


@pytest.mark.parametrize("path", ["quick", "private", "code"])
async def test_each_refusal_at_a_paid_seat_seats_and_holds_nothing(
    platform_db: str, internal_secret: bytes, tmp_path: Path, path: str
) -> None:
    await _finance(platform_db)
    async with paid_players(platform_db, internal_secret, tmp_path) as ps:
        host = f"h_{path}"
        await ps.add(host)
        r = await ps[host].post("/api/lobby/private", json=KIND)
        assert r.status_code == 200, r.text
        invite_code = r.json()["invite_code"]
        for n, code in enumerate(CODES):
            name = f"s_{path}_{n}"
            await ps.add(name)
            await script(ps, name, code)
            if path == "code":
                r = await ps[name].post("/api/lobby/join-code", json={"invite_code": invite_code})
            else:
                url = "/api/lobby/quick-join" if path == "quick" else "/api/lobby/private"
                r = await ps[name].post(url, json=KIND)
            _refused(r, code)
            assert await ps.balance(name) == DEPOSIT and await ps.seats(name) == []
            # The same player at a free table: no identity or place needed.
            r = await ps[name].post("/api/lobby/quick-join", json=FREE)
            assert r.status_code == 200, r.text
            # And his wallet screen says why, in his own words.
            v = (await ps[name].get("/api/me/verification")).json()
            assert v["may_play_paid"] is False and v["reason"] == code, v


async def test_refusal_at_invitation_accept_own_code_and_partner_unavailable(
    platform_db: str, internal_secret: bytes, tmp_path: Path
) -> None:
    await _finance(platform_db)
    async with paid_players(platform_db, internal_secret, tmp_path) as ps:
        gate = gate_of(ps)
        for n, code in enumerate(CODES):
            ana, cris = f"i_ana_{n}", f"i_cris_{n}"
            await ps.add(ana)
            await ps.add(cris)
            r = await ps[ana].post("/api/lobby/quick-join", json={**KIND, "partner": cris})
            assert r.status_code == 202, r.text
            inv = r.json()["invitation_id"]
            # The invitee is refused with his own reason when he accepts...
            await script(ps, cris, code)
            r = await ps[cris].post(f"/api/invitations/{inv}/accept")
            _refused(r, code)
            # ...and when the inviter is the one refused, he learns only that his partner
            # cannot sit (the invitation stays open: nothing was decided).
            gate.identity.script.pop(cris, None)  # type: ignore[attr-defined]
            gate.location.script.pop(cris, None)  # type: ignore[attr-defined]
            await script(ps, ana, code)
            r = await ps[cris].post(f"/api/invitations/{inv}/accept")
            assert r.status_code == 403 and r.json()["error"] == "partner_unavailable", r.text
            for name in (ana, cris):
                assert await ps.balance(name) == DEPOSIT and await ps.seats(name) == []
            assert (await ps[cris].get(f"/api/invitations/{inv}")).json()["status"] == "pending"


# ------------------------------------------------------------------ cashier


@pytest.mark.parametrize("kind", ["deposits", "withdrawals"])
async def test_each_refusal_at_the_cashier_moves_no_money(
    platform_db: str, internal_secret: bytes, tmp_path: Path, kind: str
) -> None:
    await _finance(platform_db)
    async with paid_players(platform_db, internal_secret, tmp_path) as ps:
        async with ps.p.client() as cashier:
            from tests.api.api_helpers import sign_in

            await sign_in(cashier, "caja")
            for n, code in enumerate(CODES):
                name = f"c_{kind[:3]}_{n}"
                await ps.add(name)  # deposited before the refusal is scripted
                await script(ps, name, code)
                r = await cashier.post(
                    f"/api/finance/{kind}",
                    json={"player": name, "amount": 500, "reference": "at the desk"},
                )
                _refused(r, code)
                assert await ps.balance(name) == DEPOSIT


# ------------------------------------------------------------------ the HTTP adapters


class Provider:
    """A local identity and location provider whose answers each test picks."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.entered = asyncio.Event()
        self.release = asyncio.Event()  # set at teardown: a hanging answer never comes
        self.seen: list[Any] = []

    async def identity(self, request: web.Request) -> web.StreamResponse:
        player = request.match_info["player"]
        self.seen.append(dict(request.headers))
        return await self._answer(
            {
                "player": player,
                "verified": True,
                "person_id": f"p-{player}",
                "date_of_birth": "1990-05-01" if player != "young" else date.today().isoformat(),
                "reference": "chk-1",
                "provider_extra": {"added": "later"},
            },
            request,
        )

    async def locate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.seen.append(body)
        region = {"ny": "US-NY", "nj": "US-NJ"}.get(body["player"], "DO-01")
        return await self._answer(
            {
                "player": body["player"],
                "region": region,
                "vpn": False,
                "remote_desktop": False,
                "reference": "loc-1",
            },
            request,
        )

    async def _answer(self, good: dict[str, Any], request: web.Request) -> web.StreamResponse:
        self.entered.set()
        if self.mode == "hang":
            await self.release.wait()
        if self.mode == "500":
            return web.json_response({"error": "boom"}, status=500)
        if self.mode == "404":
            return web.json_response({"error": "unknown"}, status=404)
        if self.mode == "garbage":
            return web.Response(body=b"{not json", content_type="application/json")
        if self.mode == "mistyped":
            return web.json_response({**good, "verified": "yes", "vpn": "no"})
        if self.mode == "missing":
            return web.json_response({"player": good["player"]})
        if self.mode == "other_player":
            return web.json_response({**good, "player": "someone_else"})
        if self.mode == "huge":
            return web.json_response({**good, "pad": "x" * (identity.MAX_ANSWER_BYTES + 10)})
        if self.mode == "huge_chunked":
            # No Content-Length: the bound is met while reading, and the rest is not read.
            response = web.StreamResponse()
            response.content_type = "application/json"
            response.enable_chunked_encoding()
            await response.prepare(request)
            await response.write(b'{"player": "ana", "pad": "')
            for _ in range(identity.MAX_ANSWER_BYTES // 1024 + 2):
                await response.write(b"x" * 1024)
            await response.write(b'"}')
            await response.write_eof()
            return response
        return web.json_response(good)


@pytest.fixture
async def provider() -> AsyncIterator[tuple[Provider, str]]:
    fake = Provider()
    app = web.Application()
    app.router.add_get("/v1/identity/{player}", fake.identity)
    app.router.add_post("/v1/locate", fake.locate)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield fake, str(server.make_url("")).rstrip("/")
    finally:
        fake.release.set()
        await server.close()


def _http_settings(url: str, **extra: Any) -> Any:
    return make_settings(
        "postgresql://unused/db",
        b"k" * 32,
        identity_provider="http",
        identity_url=url,
        location_url=url,
        identity_timeout_ms=300,
        allowed_regions=("DO", "US-NJ"),
        **extra,
    )


async def test_http_adapters_read_the_documented_contract(
    provider: tuple[Provider, str], tmp_path: Path
) -> None:
    fake, url = provider
    key_file = tmp_path / "key"
    key_file.write_text("s3cret-provider-key\n")
    settings = _http_settings(url, identity_key_file=key_file)
    gate = identity.gate_for(settings)
    ident, where = gate.identity, gate.location
    assert isinstance(ident, HttpIdentity) and isinstance(where, HttpLocation)
    try:
        ok = await ident.verify_status("ana")
        # A field the provider added later is ignored; the ones Mesa reads are all there.
        assert (ok.verified, ok.adult, ok.person_id, ok.provider_ref) == (
            True,
            True,
            "p-ana",
            "chk-1",
        )
        assert fake.seen[-1]["Authorization"] == "Bearer s3cret-provider-key"
        young = await ident.verify_status("young")
        assert young.verified and not young.adult
        fake.mode = "404"
        never = await ident.verify_status("ana")
        assert not never.verified and never.person_id is None
        fake.mode = "ok"
        here = await where.locate("ana", "203.0.113.9")
        assert fake.seen[-1] == {"player": "ana", "address": "203.0.113.9"}
        assert (here.region, here.allowed, here.vpn) == ("DO-01", True, False)
        assert (await where.locate("nj", None)).allowed  # a listed subdivision
        assert fake.seen[-1] == {"player": "nj", "address": None}
        ny = await where.locate("ny", None)
        assert (ny.region, ny.allowed) == ("US-NY", False)
        assert identity.location_refusal(ny) == "region_not_allowed"
    finally:
        await gate.aclose()


@pytest.mark.parametrize(
    "mode",
    ["hang", "500", "garbage", "mistyped", "missing", "other_player", "huge", "huge_chunked"],
)
async def test_a_doubtful_provider_answer_is_unavailable(
    provider: tuple[Provider, str], mode: str
) -> None:
    fake, url = provider
    fake.mode = mode
    gate = identity.gate_for(_http_settings(url))
    try:
        with pytest.raises(ProviderUnavailable):
            await gate.identity.verify_status("ana")
        assert fake.entered.is_set()  # it was asked, and its (non-)answer refused
        if mode != "404":
            with pytest.raises(ProviderUnavailable):
                await gate.location.locate("ana", "203.0.113.9")
    finally:
        await gate.aclose()


@pytest.mark.parametrize("mode", ["hang", "500", "garbage"])
async def test_a_failing_provider_seats_holds_and_pays_nothing(
    platform_db: str,
    internal_secret: bytes,
    tmp_path: Path,
    provider: tuple[Provider, str],
    mode: str,
) -> None:
    fake, url = provider
    await _finance(platform_db)
    async with paid_players(platform_db, internal_secret, tmp_path) as ps:
        name = f"f_{mode}"
        await ps.add(name)  # deposited while the demo double answered
        gate = gate_of(ps)
        real = identity.gate_for(_http_settings(url))
        gate.identity, gate.location = real.identity, real.location
        fake.mode = mode
        try:
            r = await ps[name].post("/api/lobby/quick-join", json=KIND)
            _refused(r, "identity_unavailable")
            assert await ps.balance(name) == DEPOSIT and await ps.seats(name) == []
            async with ps.p.client() as cashier:
                from tests.api.api_helpers import sign_in

                await sign_in(cashier, "caja")
                r = await cashier.post(
                    "/api/finance/withdrawals",
                    json={"player": name, "amount": STAKE, "reference": "at the desk"},
                )
                _refused(r, "identity_unavailable")
            assert await ps.balance(name) == DEPOSIT
            # Free tables ask no provider.
            r = await ps[name].post("/api/lobby/quick-join", json=FREE)
            assert r.status_code == 200, r.text
        finally:
            await real.aclose()


# ------------------------------------------------------------------ configuration


def test_the_demo_provider_is_refused_in_production(platform_db: str) -> None:
    with pytest.raises(ConfigError, match="MESA_IDENTITY_PROVIDER=demo"):
        create_app(make_settings(platform_db, b"k" * 32, env="production"))
    create_app(make_settings(platform_db, b"k" * 32, env="production", identity_demo_allowed=True))
    with pytest.raises(ConfigError, match="MESA_IDENTITY_URL"):
        create_app(make_settings(platform_db, b"k" * 32, identity_provider="http"))


def test_identity_settings_are_checked() -> None:
    env = {
        "MESA_ALLOWED_REGIONS": "DO, US-NJ",
        "MESA_MIN_AGE_YEARS": "21",
        "MESA_IDENTITY_TIMEOUT_MS": "2500",
    }
    settings = load_settings(env)
    assert settings.allowed_regions == ("DO", "US-NJ")
    assert (settings.min_age_years, settings.identity_timeout_ms) == (21, 2500)
    for name, bad in (
        ("MESA_ALLOWED_REGIONS", "Dominican Republic"),
        ("MESA_MIN_AGE_YEARS", "12"),
        ("MESA_IDENTITY_TIMEOUT_MS", "0"),
        ("MESA_IDENTITY_PROVIDER", "trust-me"),
    ):
        with pytest.raises(ConfigError, match=name):
            load_settings({name: bad})


def test_adulthood_counts_birthdays() -> None:
    assert identity.is_adult(date(2008, 12, 2), date(2026, 12, 2), 18)
    assert not identity.is_adult(date(2008, 12, 3), date(2026, 12, 2), 18)
    assert identity.region_allowed("DO-25", ("DO",))
    assert not identity.region_allowed("US-NY", ("US-NJ",))
    assert not identity.region_allowed(None, ("DO",))
    where = Location(
        region="DO-01", allowed=True, vpn=False, remote_desktop=False, checked_at=datetime.now(UTC)
    )
    assert identity.location_refusal(where) is None
    assert msgspec.json.decode(msgspec.json.encode(where), type=Location) == where
