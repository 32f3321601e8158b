"""The public gateway's ASGI app: the only public surface of Mesa.

- `/api/...`: JSON routes for players, auditors, finance and admins (OpenAPI at
  `/schema/openapi.json`), the table WebSocket at `/api/matches/{id}/ws`.
- `/`: the web page (static ES modules and CSS from `api/static/`, no build step).

Internal services are reached only through their contract Structs over `InternalClient`; no
route forwards a path, header or body to them, so `/internal/...` and `/v1/...` do not exist
here.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import httpx
from litestar import Litestar
from litestar.datastructures import MutableScopeHeaders
from litestar.openapi import OpenAPIConfig
from litestar.static_files import create_static_files_router
from litestar.types import Message, Scope

from api import (
    identity,
    player_prefs,
    refunds,
    routes_admin,
    routes_audit,
    routes_auth,
    routes_closing,
    routes_identity,
    routes_integrity,
    routes_invitations,
    routes_limits,
    routes_lobby,
    routes_log,
    routes_money,
    routes_recon,
    routes_reports,
    routes_support,
    routes_table,
    staff_audit,
)
from api.backends import Backends
from api.feed import MatchFeed
from api.guards import COMPONENTS, PUBLIC
from api.integrity import start_scanner, stop_scanner
from api.security import (
    SECURITY_HEADERS,
    RateLimiter,
    RequestLimits,
    SignInLimits,
    parse_networks,
)
from services.common.app import create_service_app
from services.common.config import VERSION, Settings

STATIC_DIR = Path(__file__).resolve().parent / "static"


async def _security_headers(message: Message, scope: Scope) -> None:
    if message["type"] != "http.response.start":
        return
    headers = MutableScopeHeaders.from_message(message)
    for key, value in SECURITY_HEADERS:
        headers[key.decode()] = value.decode()
    path = scope.get("path", "")
    if path.startswith("/api/"):
        headers["cache-control"] = "no-store"
    elif path.endswith((".js", ".css", ".html")) or path == "/":
        headers["cache-control"] = "no-cache"


def create_app(
    settings: Settings, transports: dict[str, httpx.AsyncBaseTransport] | None = None
) -> Litestar:
    """`transports` lets tests run the real services in-process (httpx.ASGITransport)."""
    identity.check_settings(settings)  # e.g. the demo identity provider in production

    async def open_backends(app: Litestar) -> None:
        app.state.backends = Backends(settings, transports)
        app.state.feed_batcher = routes_table.FeedBatcher(
            app.state.backends, f"gw-{secrets.token_hex(8)}"
        )
        feed = MatchFeed(settings.database_url, redis_url=settings.redis_url)
        app.state.feed = feed
        await feed.start()

    async def close_backends(app: Litestar) -> None:
        feed: MatchFeed | None = app.state.get("feed")
        if feed is not None:
            await feed.stop()
        backends: Backends | None = app.state.get("backends")
        if backends is not None:
            await backends.aclose()

    static = create_static_files_router(
        path="/",
        directories=[STATIC_DIR],
        html_mode=True,
        name="page",
        include_in_schema=False,
        opt=PUBLIC,
    )
    app = create_service_app(
        "gateway",
        settings,
        route_handlers=[
            *routes_auth.ROUTES,
            *routes_money.ROUTES,
            *routes_closing.ROUTES,
            *routes_recon.ROUTES,
            *routes_lobby.ROUTES,
            *routes_invitations.ROUTES,
            *routes_limits.ROUTES,
            *routes_identity.ROUTES,
            *routes_table.ROUTES,
            *routes_audit.ROUTES,
            *routes_log.ROUTES,
            *routes_admin.ROUTES,
            *staff_audit.ROUTES,
            *routes_support.ROUTES,
            *refunds.ROUTES,
            *routes_integrity.ROUTES,
            *routes_reports.ROUTES,
            *player_prefs.ROUTES,
            static,
        ],
        public=True,
        on_startup=[open_backends, start_scanner],
        on_shutdown=[stop_scanner, close_backends],
        before_send=[_security_headers],
        openapi_config=OpenAPIConfig(
            title="Mesa public API",
            version=VERSION,
            description=(
                "Players, auditors, finance and admins. The page signs in with a session cookie "
                "and sends X-CSRF-Token on every change; API clients use bearer tokens from "
                "POST /api/auth/tokens. Errors are {error, detail} with a 4xx status."
            ),
            path="/schema",
            components=COMPONENTS,
        ),
    )
    state: Any = app.state
    state.sign_in_limits = SignInLimits()
    state.trusted_proxies = parse_networks(settings.trusted_proxies)
    state.chat_limits = RateLimiter(limit=1, window_s=1.5, max_keys=10_000)
    state.socket_counts = {}
    state.request_limits = RequestLimits()
    return app
