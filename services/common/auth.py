"""Service credentials for the internal API: short-lived HMAC-SHA256 tokens bound to the caller
and the callee.

A token is `v2.<caller>.<audience>.<expires_unix_ms>.<hex hmac>`, the HMAC over
`v2|<caller>|<audience>|<expires>` with the shared secret `MESA_INTERNAL_SECRET` (created under
var/ by `mesa up`). The audience is the service the token is for (`ledger`, `engine`,
`matchmaking`): a service refuses a token minted for another one (403), so a token that leaks
from one callee cannot be replayed against a second. Tokens live `MESA_INTERNAL_TOKEN_TTL_S`
seconds, so a leaked one is useless soon after; the public gateway never forwards a client's
Authorization header to a service.

Each internal route declares the callers it accepts (`callers_opt` in its `opt`);
`services.common.app.ServiceCallerGuard`, a Litestar guard on every internal route, checks the
token and then the declaration, and refuses a route that declares none (default deny).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Iterable
from typing import Any

AUTH_HEADER = "Authorization"
SCHEME = "MesaService"
VERSION = "v2"
_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
# Clock skew tolerated between services on one machine or one cluster.
_MAX_LIFETIME_MS = 10 * 60 * 1000

# The key of a route's `opt` that names the callers it accepts.
CALLERS_OPT = "callers"

# The calling identities (`caller` of a token): the services, and the operators' tools.
GATEWAY = "gateway"
ENGINE = "engine"
MATCHMAKING = "matchmaking"
# `mesa integrity scan`: reads the histories the integrity detectors need.
INTEGRITY = "integrity"


class AuthError(Exception):
    """The credential is missing, malformed, forged or expired (401)."""


class Forbidden(Exception):
    """A valid credential that may not be used here: minted for another service, or naming a
    caller the route does not accept (403)."""


def _mac(secret: bytes, caller: str, audience: str, expires_ms: int) -> str:
    message = f"{VERSION}|{caller}|{audience}|{expires_ms}".encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def mint_token(
    secret: bytes, caller: str, audience: str, ttl_s: int = 60, now_ms: int | None = None
) -> str:
    if not _NAME_RE.match(caller):
        raise AuthError(f"invalid caller name {caller!r}")
    if not _NAME_RE.match(audience):
        raise AuthError(f"invalid audience name {audience!r}")
    if len(secret) < 32:
        raise AuthError("internal secret is missing or shorter than 32 bytes")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    expires = now + ttl_s * 1000
    return f"{VERSION}.{caller}.{audience}.{expires}.{_mac(secret, caller, audience, expires)}"


class Token:
    """A verified token: who called, for which service, until when (unix ms)."""

    __slots__ = ("audience", "caller", "expires_ms")

    def __init__(self, caller: str, audience: str, expires_ms: int) -> None:
        self.caller = caller
        self.audience = audience
        self.expires_ms = expires_ms


def verify_token(secret: bytes, token: str, now_ms: int | None = None) -> Token:
    """The verified token, or AuthError (malformed, forged, expired). The audience is checked
    by the callee (`check_audience`): a well-signed token for another service is a 403."""
    if len(secret) < 32:
        raise AuthError("internal secret not configured")
    parts = token.split(".")
    if len(parts) != 5 or parts[0] != VERSION:
        raise AuthError("malformed service token")
    _, caller, audience, expires_raw, mac = parts
    if (
        not _NAME_RE.match(caller)
        or not _NAME_RE.match(audience)
        or not expires_raw.isdigit()
        or len(expires_raw) > 15
    ):
        raise AuthError("malformed service token")
    expires = int(expires_raw)
    if not hmac.compare_digest(mac, _mac(secret, caller, audience, expires)):
        raise AuthError("bad service token signature")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if expires < now:
        raise AuthError("service token expired")
    if expires - now > _MAX_LIFETIME_MS:
        raise AuthError("service token lifetime too long")
    return Token(caller, audience, expires)


def check_audience(token: Token, audience: str) -> None:
    if token.audience != audience:
        raise Forbidden(f"service token is for {token.audience}, not {audience}")


def check_caller(caller: str, allowed: frozenset[str] | None, route: str) -> None:
    """`allowed` None: the route declares no callers, and nobody may call it."""
    if allowed is None:
        raise Forbidden(f"{route} declares no callers")
    if caller not in allowed:
        raise Forbidden(f"{caller} may not call {route}")


def callers_opt(*callers: str) -> dict[str, Any]:
    """A route's `opt` declaring the callers it accepts: `@get(..., opt=callers_opt(GATEWAY))`."""
    return {CALLERS_OPT: frozen_callers(callers)}


def frozen_callers(callers: Iterable[str]) -> frozenset[str]:
    names = frozenset(callers)
    if not names or any(not _NAME_RE.match(n) for n in names):
        raise ValueError(f"a route declares one or more valid caller names, not {sorted(names)}")
    return names


def declared_callers(opt: dict[str, Any] | None) -> frozenset[str] | None:
    found = (opt or {}).get(CALLERS_OPT)
    return found if isinstance(found, frozenset) else None


def header_value(secret: bytes, caller: str, audience: str, ttl_s: int = 60) -> str:
    return f"{SCHEME} {mint_token(secret, caller, audience, ttl_s)}"


def token_from_header(secret: bytes, value: str | None) -> Token:
    if not value or not value.startswith(SCHEME + " "):
        raise AuthError("missing service credential")
    return verify_token(secret, value[len(SCHEME) + 1 :].strip())


class TokenCache:
    """Re-mints a caller's token for one callee shortly before it expires instead of on every
    request."""

    def __init__(self, secret: bytes, caller: str, audience: str, ttl_s: int = 60) -> None:
        self._secret = secret
        self._caller = caller
        self._audience = audience
        self._ttl_s = ttl_s
        self._value = ""
        self._refresh_at_ms = 0

    def header(self) -> str:
        now = int(time.time() * 1000)
        if now >= self._refresh_at_ms:
            self._value = header_value(self._secret, self._caller, self._audience, self._ttl_s)
            self._refresh_at_ms = now + (self._ttl_s * 1000) // 2
        return self._value


class VerifiedTokens:
    """Headers already verified: callers reuse one token for half its life (TokenCache), so a
    repeat costs a dict lookup and the expiry check, not an HMAC. Anything not remembered, or
    expired, goes through `token_from_header` (same errors)."""

    def __init__(self, max_size: int = 256) -> None:
        self._max_size = max_size
        self._seen: dict[tuple[bytes, str], Token] = {}

    def token(self, secret: bytes, value: str | None) -> Token:
        if value is not None:
            hit = self._seen.get((secret, value))
            if hit is not None and hit.expires_ms >= int(time.time() * 1000):
                return hit
        token = token_from_header(secret, value)
        if value is not None:
            if len(self._seen) >= self._max_size:
                self._seen.clear()
            self._seen[(secret, value)] = token
        return token
