"""The gateway's only way to reach the internal services: their contracts over InternalClient.

A refusal from a service (4xx) is passed on to the client with its code; an unreachable or
failing service becomes 503 `service_unavailable`, never a 500 and never the internal detail.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import Any, TypeVar

import httpx

from api.identity import PlaceGate, gate_for
from services.common.config import Settings
from services.common.errors import ServiceError
from services.common.http import (
    MAX_CONNECTIONS,
    InternalClient,
    RemoteError,
    ServiceUnavailable,
)
from services.common.logging import get_logger
from services.matchmaking.contract import KindList

T = TypeVar("T")
log = get_logger()

SERVICES = ("ledger", "engine", "matchmaking")
# Table sockets hold no long-polls (they are woken by NOTIFY, api/feed.py), so engine calls are
# short; the pool leaves room for HTTP clients long-polling `/api/matches/{id}/events`.
ENGINE_CONNECTIONS = 1024
# Client-safe codes passed through as they are; any other 4xx becomes a generic refusal.
_PASS_STATUSES = {400, 403, 404, 409, 422, 429}
# Matchmaking's catalogue is its configuration, fixed while it runs: every join asks what a
# kind and tier stake, so the gateway keeps the answer this long instead of asking each time.
KINDS_TTL_S = 60.0


class Backends:
    def __init__(
        self,
        settings: Settings,
        transports: dict[str, httpx.AsyncBaseTransport] | None = None,
    ) -> None:
        transports = transports or {}
        self._kinds: KindList | None = None
        self._kinds_at = 0.0
        # Identity and location providers (external, not Mesa services): paid play's gate.
        self.place: PlaceGate = gate_for(settings)
        self.clients: dict[str, InternalClient] = {}
        for name in SERVICES:
            # Long-polls on the engine's event feed need more than the default timeout.
            timeout = 35.0 if name == "engine" else 10.0
            self.clients[name] = InternalClient.of(
                name,
                settings,
                "gateway",
                timeout_s=timeout,
                transport=transports.get(name),
                max_connections=ENGINE_CONNECTIONS if name == "engine" else MAX_CONNECTIONS,
            )

    async def kinds(self) -> KindList:
        """Matchmaking's table kinds and tiers, read again at most every `KINDS_TTL_S`."""
        now = time.monotonic()
        if self._kinds is None or now - self._kinds_at >= KINDS_TTL_S:
            self._kinds = await call("matchmaking", self.matchmaking.get("/v1/kinds", KindList))
            self._kinds_at = now
        return self._kinds

    @property
    def ledger(self) -> InternalClient:
        return self.clients["ledger"]

    @property
    def engine(self) -> InternalClient:
        return self.clients["engine"]

    @property
    def matchmaking(self) -> InternalClient:
        return self.clients["matchmaking"]

    async def aclose(self) -> None:
        for client in self.clients.values():
            await client.aclose()
        await self.place.aclose()


async def call(service: str, awaitable: Awaitable[T]) -> T:
    """Await an internal call, translating its failures into client-facing errors."""
    try:
        return await awaitable
    except RemoteError as exc:
        if exc.status in _PASS_STATUSES:
            raise ServiceError(exc.status, exc.code, exc.detail[:300]) from None
        if exc.status == 401:
            log.error("internal_auth_refused", service=service)
        else:
            log.warning("internal_error", service=service, status=exc.status, code=exc.code)
        raise ServiceError(503, "service_unavailable", f"{service} is not available") from None
    except ServiceUnavailable as exc:
        log.warning("service_unavailable", service=service, error=str(exc)[:200])
        raise ServiceError(503, "service_unavailable", f"{service} is not available") from None


def get_backends(state: Any) -> Backends:
    backends: Backends | None = state.get("backends")
    if backends is None:
        raise ServiceError(503, "service_unavailable", "gateway is starting")
    return backends
