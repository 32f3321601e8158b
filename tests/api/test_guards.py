"""Every route of every app is guarded, or declared open on purpose: a route that forgets its
guard fails here, before it can be served to anyone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from litestar import Litestar, get
from litestar.handlers.base import BaseRouteHandler
from litestar.testing import AsyncTestClient

from api import routes_admin
from api.app import create_app as create_gateway
from api.guards import ACCESS_OPT, requires_role
from services.common.auth import declared_callers
from services.common.migrate import upgrade
from services.engine.app import create_app as create_engine
from services.ledger.app import create_app as create_ledger
from services.matchmaking.app import create_app as create_matchmaking
from tests.api.api_helpers import PASSWORD, bearer, make_user
from tests.conftest import make_settings

# Routes every app gets from the shared factory and Litestar: the health probe and metrics
# (services/common/app.py answers them without a credential; the gateway's metrics only to
# private addresses) and the OpenAPI document.
FRAMEWORK_PATHS = ("/health", "/metrics")
SCHEMA_PREFIX = "/schema"


def handlers_of(app: Litestar) -> list[tuple[str, BaseRouteHandler]]:
    found: list[tuple[str, BaseRouteHandler]] = []
    for route in app.routes:
        many = getattr(route, "route_handlers", None)
        for handler in many if many is not None else [route.route_handler]:  # type: ignore[attr-defined]
            found.append((route.path, handler))
    return found


def open_routes(app: Litestar) -> list[str]:
    """Routes with no guard and no declaration of who may call them without one."""
    bad = []
    for path, handler in handlers_of(app):
        if path in FRAMEWORK_PATHS or path == SCHEMA_PREFIX or path.startswith(SCHEMA_PREFIX + "/"):
            continue
        if handler.resolve_guards():
            continue
        if getattr(handler.fn, "__name__", "") == "options_handler":
            continue  # Litestar's own OPTIONS answer: the route's allowed methods, nothing else
        if handler.opt.get(ACCESS_OPT) in ("public", "checked_at_connect"):
            continue
        # Internal services: the route's declared callers are checked by the service
        # middleware on the raw credential (services/common/app.py).
        if declared_callers(handler.opt) is not None:
            continue
        bad.append(f"{path} {sorted(getattr(handler, 'http_methods', ['WS']))}")
    return bad


@pytest.fixture(scope="module")
def settings(database_url: str, internal_secret: bytes) -> Any:
    upgrade(database_url, ["gateway"])
    return make_settings(database_url, internal_secret)


def test_every_gateway_route_is_guarded_or_public_on_purpose(settings):
    app = create_gateway(settings)
    assert open_routes(app) == []
    paths = {path for path, _ in handlers_of(app)}
    # the walk sees the whole API, not an empty list
    assert {"/api/me/wallet", "/api/admin/users", "/api/matches/{match_id:str}/ws"} <= paths


@pytest.mark.parametrize("create", [create_ledger, create_engine, create_matchmaking])
def test_every_service_route_is_guarded_or_declares_its_callers(settings, create):
    app = create(settings)
    assert open_routes(app) == []
    assert len(handlers_of(app)) > 3


def test_a_controller_without_its_guard_is_caught():
    class Unguarded(routes_admin.AdminController):
        guards = []

    @get("/api/open")
    async def forgotten() -> None:
        return None

    assert open_routes(Litestar(route_handlers=[routes_admin.AdminController])) == []
    found = open_routes(Litestar(route_handlers=[Unguarded, forgotten]))
    assert sorted(found) == [
        "/api/admin/users ['GET']",
        "/api/admin/users ['POST']",
        "/api/admin/users/{user_id:str} ['PATCH']",
        "/api/open ['GET']",
    ]


def test_a_role_guard_names_known_roles():
    with pytest.raises(ValueError):
        requires_role()
    with pytest.raises(ValueError):
        requires_role("root")


def test_openapi_declares_the_security_schemes(settings):
    doc = create_gateway(settings).openapi_schema.to_schema()
    schemes = doc["components"]["securitySchemes"]
    assert schemes["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": schemes["bearer"]["description"],
    }
    assert schemes["session_cookie"]["in"] == "cookie"
    assert schemes["session_cookie"]["name"] == "mesa_session"
    assert schemes["csrf_header"]["in"] == "header"
    paths = doc["paths"]
    assert {"bearer": []} in paths["/api/me/wallet"]["get"]["security"]
    assert {"bearer": []} in paths["/api/finance/deposits"]["post"]["security"]
    assert "security" not in paths["/api/auth/login"]["post"]
    assert "security" not in paths["/api/chat/phrases"]["get"]


async def test_role_guard_answers_as_before(settings):
    await make_user(settings.database_url, "gina", role="auditor")
    await make_user(settings.database_url, "hugo")
    app = create_gateway(settings)
    async with AsyncTestClient(app) as client:
        signed_out = await client.get("/api/audit/orphans")
        assert signed_out.status_code == 401 and signed_out.json()["error"] == "unauthorized"
        player = await bearer(client, "hugo")
        wrong_role = await client.get("/api/audit/orphans", headers=player)
        assert wrong_role.status_code == 403 and wrong_role.json()["error"] == "forbidden"
        me = await client.get("/api/me", headers=await bearer(client, "gina"))
        assert me.status_code == 200 and me.json()["id"] == "gina"


def test_table_socket_checks_the_role_at_connect(settings):
    """The socket's own check is the guards' `authorize`: staff are refused like strangers."""
    from litestar.exceptions import WebSocketDisconnect
    from litestar.testing import TestClient

    asyncio.run(make_user(settings.database_url, "ines", role="finance"))
    with TestClient(create_gateway(settings)) as client:
        r = client.post(
            "/api/auth/tokens", json={"username": "ines", "password": PASSWORD, "label": "t"}
        )
        assert r.status_code == 201, r.text
        headers = {"Authorization": f"Bearer {r.json()['token']}"}
        with client.websocket_connect("/api/matches/m-1/ws", headers=headers) as ws:
            with pytest.raises(WebSocketDisconnect) as closed:
                ws.receive_text()
            assert closed.value.code == 1008
            assert closed.value.detail == "sign in as a player"
