"""Accounts, sessions, CSRF, bearer tokens, rate limits, roles and security headers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from litestar.testing import AsyncTestClient

from api.app import create_app
from api.security import RateLimiter
from services.common.migrate import upgrade
from tests.api.api_helpers import PASSWORD, bearer, make_user, sign_in
from tests.conftest import make_settings


@pytest.fixture(scope="module")
def gateway_db(database_url: str) -> Iterator[str]:
    upgrade(database_url, ["gateway"])
    yield database_url


@pytest.fixture
def app(gateway_db, internal_secret):
    return create_app(make_settings(gateway_db, internal_secret))


async def test_api_register_sign_in_and_whoami(app):
    async with AsyncTestClient(app) as client:
        r = await client.post(
            "/api/auth/register", json={"username": "Ana_1", "password": PASSWORD}
        )
        assert r.status_code == 201, r.text
        body = r.json()
        assert body["user"]["id"] == "ana_1" and body["user"]["role"] == "player"
        cookie = r.headers.get_list("set-cookie")
        session_cookie = next(c for c in cookie if c.startswith("mesa_session="))
        assert "HttpOnly" in session_cookie and "samesite=strict" in session_cookie.lower()
        csrf_cookie = next(c for c in cookie if c.startswith("mesa_csrf="))
        assert "HttpOnly" not in csrf_cookie
        me = await client.get("/api/me")
        assert me.status_code == 200 and me.json()["id"] == "ana_1"
        again = await client.post(
            "/api/auth/register", json={"username": "ana_1", "password": PASSWORD}
        )
        assert again.status_code == 409 and again.json()["error"] == "username_taken"


async def test_api_password_rules_and_unknown_fields(app):
    async with AsyncTestClient(app) as client:
        short = await client.post("/api/auth/register", json={"username": "bea", "password": "x"})
        assert short.status_code == 400 and short.json()["error"] == "weak_password"
        extra = await client.post(
            "/api/auth/register",
            json={"username": "bea", "password": PASSWORD, "role": "admin"},
        )
        assert extra.status_code == 400 and extra.json()["error"] == "invalid_request"
        bad_name = await client.post(
            "/api/auth/register", json={"username": "<script>", "password": PASSWORD}
        )
        assert bad_name.status_code == 400


async def test_api_csrf_required_for_cookie_writes(app, gateway_db):
    await make_user(gateway_db, "carla")
    async with AsyncTestClient(app) as client:
        token = await sign_in(client, "carla")
        del client.headers["X-CSRF-Token"]
        r = await client.post("/api/me/self-exclusion", json={"days": 1})
        assert r.status_code == 403 and r.json()["error"] == "csrf_failed"
        r = await client.post(
            "/api/me/self-exclusion", json={"days": 1}, headers={"X-CSRF-Token": "nope"}
        )
        assert r.status_code == 403
        r = await client.post(
            "/api/me/self-exclusion",
            json={"days": 1},
            headers={"X-CSRF-Token": token, "Origin": "https://evil.example"},
        )
        assert r.status_code == 403 and r.json()["error"] == "forbidden"
        r = await client.post(
            "/api/me/self-exclusion", json={"days": 1}, headers={"X-CSRF-Token": token}
        )
        assert r.status_code == 200
        assert r.json()["status"] == "self_excluded" and r.json()["may_play_paid"] is False
        # Self-excluded players cannot sit at paid tables (refused before matchmaking).
        r = await client.post(
            "/api/lobby/quick-join",
            json={"kind": "apuesta-parejas", "tier": "10"},
            headers={"X-CSRF-Token": token},
        )
        assert r.status_code == 403 and r.json()["error"] == "self_excluded"
        # So are private tables, opened or joined by code (the account as this request read it).
        r = await client.post(
            "/api/lobby/private",
            json={"kind": "apuesta-1v1", "tier": "10"},
            headers={"X-CSRF-Token": token},
        )
        assert r.status_code == 403 and r.json()["error"] == "self_excluded"
        r = await client.post(
            "/api/lobby/join-code",
            json={"invite_code": "ABCDEF"},
            headers={"X-CSRF-Token": token},
        )
        assert r.status_code == 403 and r.json()["error"] == "self_excluded"


async def test_api_bearer_tokens_need_no_csrf(app, gateway_db):
    await make_user(gateway_db, "dora")
    async with AsyncTestClient(app) as client:
        headers = await bearer(client, "dora")
    async with AsyncTestClient(app) as fresh:
        me = await fresh.get("/api/me", headers=headers)
        assert me.status_code == 200 and me.json()["id"] == "dora"
        r = await fresh.post("/api/me/self-exclusion", json={"days": 2}, headers=headers)
        assert r.status_code == 200
        bad = await fresh.get("/api/me", headers={"Authorization": "Bearer nope"})
        assert bad.status_code == 401
        out = await fresh.post("/api/auth/logout", headers=headers)
        assert out.status_code == 200
        assert (await fresh.get("/api/me", headers=headers)).status_code == 401


async def test_api_sign_in_is_rate_limited_per_account_and_address(app, gateway_db):
    await make_user(gateway_db, "eva")
    async with AsyncTestClient(app) as client:
        codes = []
        for _ in range(4):
            r = await client.post(
                "/api/auth/login", json={"username": "eva", "password": "wrong!!!"}
            )
            codes.append(r.status_code)
        assert codes == [401, 401, 401, 429]
        # Even the right password waits now.
        r = await client.post("/api/auth/login", json={"username": "eva", "password": PASSWORD})
        assert r.status_code == 429 and r.json()["error"] == "rate_limited"


def test_api_rate_limiter_memory_is_bounded():
    limiter = RateLimiter(limit=2, window_s=60, max_keys=100)
    for i in range(1000):
        limiter.hit(f"k{i}", now=1.0)
    assert len(limiter) == 100
    limiter.hit("x", now=1.0)
    limiter.hit("x", now=2.0)
    assert limiter.blocked_for("x", now=3.0) > 0
    assert limiter.blocked_for("x", now=62.0) == 0


async def test_api_roles_see_only_their_routes(app, gateway_db):
    for name, role in (("fin", "finance"), ("aud", "auditor"), ("adm", "admin"), ("pla", "player")):
        await make_user(gateway_db, name, role)
    forbidden = {
        "player": ["/api/finance/trial-balance", "/api/audit/orphans", "/api/admin/users"],
        "finance": [
            "/api/me/wallet",
            "/api/audit/checkpoint",
            "/api/admin/users",
            "/api/lobby/tables",
        ],
        "auditor": ["/api/finance/pots", "/api/me/wallet", "/api/admin/users", "/api/history"],
        "admin": ["/api/finance/pots", "/api/me/wallet", "/api/audit/keys", "/api/transcripts/x"],
    }
    names = {"player": "pla", "finance": "fin", "auditor": "aud", "admin": "adm"}
    for role, paths in forbidden.items():
        async with AsyncTestClient(app) as client:
            await sign_in(client, names[role])
            for path in paths:
                r = await client.get(path)
                assert r.status_code == 403, (role, path, r.status_code, r.text)
                assert r.json()["error"] == "forbidden"
    async with AsyncTestClient(app) as anonymous:
        for paths in forbidden.values():
            for path in paths:
                assert (await anonymous.get(path)).status_code == 401


async def test_api_admin_manages_accounts_and_lock_signs_out(app, gateway_db):
    await make_user(gateway_db, "boss", "admin")
    await make_user(gateway_db, "fede")
    async with AsyncTestClient(app) as fede:
        await sign_in(fede, "fede")
        async with AsyncTestClient(app) as admin:
            await sign_in(admin, "boss")
            r = await admin.post(
                "/api/admin/users",
                json={"username": "gil", "password": PASSWORD, "role": "auditor"},
            )
            assert r.status_code == 201 and r.json()["role"] == "auditor"
            users = await admin.get("/api/admin/users")
            assert {"boss", "fede", "gil"} <= {u["id"] for u in users.json()}
            assert all("password" not in str(u) for u in users.json())
            r = await admin.patch(
                "/api/admin/users/fede", json={"status": "locked", "reason": "test"}
            )
            assert r.status_code == 200 and r.json()["status"] == "locked"
            assert (
                await admin.patch(
                    "/api/admin/users/boss", json={"role": "player", "reason": "test"}
                )
            ).status_code == 409
        assert (await fede.get("/api/me")).status_code == 401
        r = await fede.post("/api/auth/login", json={"username": "fede", "password": PASSWORD})
        assert r.status_code == 403 and r.json()["error"] == "account_locked"


async def test_api_security_headers_page_and_no_internal_routes(app):
    async with AsyncTestClient(app) as client:
        page = await client.get("/")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        csp = page.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert page.headers["x-content-type-options"] == "nosniff"
        assert page.headers["referrer-policy"] == "no-referrer"
        api = await client.get("/api/me")
        assert api.status_code == 401 and api.headers["cache-control"] == "no-store"
        assert "content-security-policy" in api.headers
        for path in ("/internal/matches/x", "/v1/wallets/ana", "/v1/kinds", "/internal/audit/keys"):
            r = await client.get(path)
            assert r.status_code == 404, path
        pre = await client.options(
            "/api/me",
            headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"},
        )
        assert "access-control-allow-origin" not in pre.headers
        schema = await client.get("/schema/openapi.json")
        assert schema.status_code == 200 and "/api/auth/login" in schema.json()["paths"]


def test_api_table_socket_refuses_strangers_and_other_origins(app):
    from litestar.exceptions import WebSocketDisconnect
    from litestar.testing import TestClient

    with TestClient(app) as client:
        for headers in ({}, {"Origin": "https://evil.example"}):
            with client.websocket_connect("/api/matches/m-1/ws", headers=headers) as ws:
                try:
                    ws.receive_text()
                except WebSocketDisconnect as exc:
                    assert exc.code == 1008
                else:
                    raise AssertionError("the socket should have been closed")
