"""Every internal route declares its callers, and the one check honours the declaration.

Walks the routes of each service's app (every one a Litestar route): each declares at least
one caller. Then, for every route, a token naming a caller
the route does not declare, or minted for another service, is refused with 403 before the
handler runs; an expired or forged one with 401; a token for the declared caller passes.
The apps are called without their lifespan: a refusal needs no database, and a request that
passes the check fails later (no database) with anything but 401/403.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from litestar import Litestar

from services.common.auth import SCHEME, declared_callers, header_value, mint_token
from services.engine.app import create_app as create_engine
from services.ledger.app import create_app as create_ledger
from services.matchmaking.app import create_app as create_matchmaking
from tests.conftest import make_settings

CALLERS = ("gateway", "engine", "matchmaking", "integrity")
UNGUARDED = {"/health", "/metrics"}


def _apps(secret: bytes) -> dict[str, Litestar]:
    settings = make_settings("postgresql+asyncpg://nobody@127.0.0.1:1/none", secret)
    return {
        "ledger": create_ledger(settings, seal_in_background=False),
        "engine": create_engine(settings),
        "matchmaking": create_matchmaking(settings),
    }


def _concrete(template: str) -> str:
    """A request path for a route template: each parameter filled with a plain value."""
    path = re.sub(r"\{[a-z_]+:int\}", "0", template)
    path = re.sub(r"\{[a-z_]+:path\}", "t1/h1", path)
    return re.sub(r"\{[a-z_]+(:str)?\}", "x1", path)


def routes(app: Litestar) -> Iterator[tuple[str, str, frozenset[str] | None]]:
    """(method, route template, declared callers) of every guarded route of `app`."""
    for route in app.routes:
        if route.path in UNGUARDED or route.path.startswith("/schema"):
            continue  # the OpenAPI pages declare nobody: refused to every caller
        for handler in getattr(route, "route_handlers", []):
            # (OPTIONS: Litestar's own answer for every path; it declares nobody, so refused)
            for method in sorted(handler.http_methods - {"OPTIONS"}):
                yield method, route.path, declared_callers(handler.opt)


def test_every_route_of_every_service_declares_its_callers(internal_secret):
    seen = 0
    for service, app in _apps(internal_secret).items():
        for method, path, callers in routes(app):
            assert callers, f"{service}: {method} {path} declares no callers"
            assert callers <= set(CALLERS), f"{service}: {method} {path}: {sorted(callers)}"
            seen += 1
    assert seen >= 40  # the walk found the routes (ledger 17, engine 17, matchmaking 11)


def test_money_routes_accept_only_the_service_that_runs_that_step(internal_secret):
    ledger = {path: callers for _, path, callers in routes(_apps(internal_secret)["ledger"])}
    assert ledger["/v1/holds"] == {"matchmaking"}
    assert ledger["/v1/holds/release"] == {"matchmaking"}
    assert ledger["/v1/matches/start"] == {"matchmaking"}
    assert ledger["/v1/matches/settle"] == {"engine"}
    assert ledger["/v1/matches/void"] == {"engine", "matchmaking"}
    # money in and out only through the gateway's checked, audited cashier (api/cashier.py)
    for cashier in ("/v1/deposits", "/v1/withdrawals", "/v1/accounts", "/v1/wallets/{player:str}"):
        assert ledger[cashier] == {"gateway"}
    # a correction only after a second finance user approved it (api/refunds.py)
    assert ledger["/v1/reversals"] == {"gateway"}


async def test_wrong_caller_or_audience_is_403_expired_or_forged_401(internal_secret):
    checked = 0
    for service, app in _apps(internal_secret).items():
        other = "engine" if service != "engine" else "ledger"
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:
            for method, template, callers in routes(app):
                assert callers
                path = _concrete(template)
                allowed = sorted(callers)[0]
                stranger = next(c for c in CALLERS if c not in callers)

                async def status(auth: str, method: str = method, path: str = path) -> int:
                    response = await client.request(
                        method, path, headers={"Authorization": auth}, content=b"{}"
                    )
                    return response.status_code

                where = f"{service} {method} {path}"
                wrong_caller = header_value(internal_secret, stranger, service)
                assert await status(wrong_caller) == 403, where
                wrong_audience = header_value(internal_secret, allowed, other)
                assert await status(wrong_audience) == 403, where
                expired = mint_token(internal_secret, allowed, service, ttl_s=-1)
                assert await status(f"{SCHEME} {expired}") == 401, where
                forged = mint_token(b"f" * 32, allowed, service)
                assert await status(f"{SCHEME} {forged}") == 401, where
                assert await status("") == 401, where
                right = header_value(internal_secret, allowed, service)
                assert await status(right) not in (401, 403), where
                checked += 1
    assert checked >= 40


@pytest.mark.parametrize("service", ["ledger", "engine", "matchmaking"])
async def test_a_route_that_declares_no_callers_refuses_everyone(internal_secret, service):
    from litestar import get

    from services.common.app import create_service_app

    @get("/v1/undeclared")
    async def undeclared() -> str:
        return "reached"

    settings = make_settings("postgresql+asyncpg://nobody@127.0.0.1:1/none", internal_secret)
    app = create_service_app(service, settings, [undeclared])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:
        for caller in CALLERS:
            auth = header_value(internal_secret, caller, service)
            response = await client.get("/v1/undeclared", headers={"Authorization": auth})
            assert response.status_code == 403
            assert response.json()["error"] == "forbidden"


def test_the_caller_guard_runs_on_the_event_loop(internal_secret):
    """Litestar runs a guard that is not a coroutine in a worker thread, per request."""
    from litestar.utils import is_async_callable

    from services.common.app import ServiceCallerGuard

    settings = make_settings("postgresql+asyncpg://nobody@127.0.0.1:1/none", internal_secret)
    assert is_async_callable(ServiceCallerGuard("ledger", settings))
