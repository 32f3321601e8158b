"""Service credentials for tests that speak to one service app directly.

A test's requests reach routes declared for different callers (the engine's match creation is
matchmaking's, its actions the gateway's). `AS_DECLARED` in a request's Authorization header
stands for "the caller this route is for": `CallerByRoute`, set as the test client's `auth`,
replaces it with a real token naming the caller its `choose(method, path)` gives and the
service as audience. Any other header (none, a forged or foreign token) is sent unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

import httpx

from services.common.auth import AUTH_HEADER, header_value

AS_DECLARED = "MesaService as-declared"


class CallerByRoute(httpx.Auth):
    def __init__(self, secret: bytes, audience: str, choose: Callable[[str, str], str]) -> None:
        self.secret = secret
        self.audience = audience
        self.choose = choose

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if request.headers.get(AUTH_HEADER) == AS_DECLARED:
            caller = self.choose(request.method, request.url.path)
            request.headers[AUTH_HEADER] = header_value(self.secret, caller, self.audience)
        yield request


def engine_caller(method: str, path: str) -> str:
    """Matchmaking creates matches; the gateway plays and reads them."""
    return "matchmaking" if (method, path) == ("POST", "/internal/matches") else "gateway"


def ledger_caller(method: str, path: str) -> str:
    """Matchmaking holds, releases and starts; the engine settles and voids; the gateway
    moves the cashier's money and reads."""
    if path in ("/v1/holds", "/v1/holds/release", "/v1/matches/start"):
        return "matchmaking"
    if path in ("/v1/matches/settle", "/v1/matches/void"):
        return "engine"
    return "gateway"


def caller_for(service: str, method: str, path: str) -> str:
    """The caller a `service`'s route is for (matchmaking's: the gateway)."""
    if service == "engine":
        return engine_caller(method, path)
    if service == "ledger":
        return ledger_caller(method, path)
    return "gateway"
