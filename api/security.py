"""Who is calling, what they may do, and the headers every response carries.

- The page uses a session cookie (`mesa_session`, HttpOnly, SameSite=Strict, Secure outside
  dev/test) plus a CSRF token: every unsafe cookie-authenticated request must send the token in
  `X-CSRF-Token`, equal to the non-HttpOnly `mesa_csrf` cookie and to the one stored with the
  session (double submit, bound to the session).
- API clients send `Authorization: Bearer <token>` (no cookie, so no CSRF token needed).
- Sign-in attempts are limited per account and per client address, in bounded memory.
- Every request that carries a credential is limited per credential (a token bucket of
  `REQUESTS_PER_SECOND`, burst `REQUEST_BURST`) before the credential is even looked up, so one
  flooding client is answered 429 cheaply and cannot slow the others.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections import OrderedDict
from typing import Any

from litestar.connection import ASGIConnection
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from sqlalchemy.ext.asyncio import AsyncEngine

from api.accounts import Session, resolve_session
from services.common.errors import ServiceError

SESSION_COOKIE = "mesa_session"
CSRF_COOKIE = "mesa_csrf"
CSRF_HEADER = "x-csrf-token"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS: list[tuple[bytes, bytes]] = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"permissions-policy", b"camera=(), microphone=(), geolocation=()"),
]


def security_headers_middleware(app: ASGIApp) -> ASGIApp:
    """Add the security headers to every HTTP response; API answers are never cached."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        path = scope.get("path", "")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (k, v)
                    for k, v in message.get("headers", [])
                    if k.lower() not in {h for h, _ in SECURITY_HEADERS}
                ]
                headers.extend(SECURITY_HEADERS)
                if path.startswith("/api/"):
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}  # type: ignore[assignment]
            await send(message)

        await app(scope, receive, send_with_headers)

    return middleware


class RateLimiter:
    """Sliding-window counter per key, at most `max_keys` keys (least recently used dropped)."""

    def __init__(self, limit: int, window_s: float, max_keys: int = 10_000) -> None:
        self.limit = limit
        self.window_s = window_s
        self.max_keys = max_keys
        self._hits: OrderedDict[str, list[float]] = OrderedDict()

    def _recent(self, key: str, now: float) -> list[float]:
        hits = [t for t in self._hits.get(key, []) if now - t < self.window_s]
        return hits

    def blocked_for(self, key: str, now: float | None = None) -> float:
        """Seconds until the next attempt is allowed (0 when allowed now)."""
        moment = time.monotonic() if now is None else now
        hits = self._recent(key, moment)
        if len(hits) < self.limit:
            return 0.0
        return max(0.0, self.window_s - (moment - hits[0]))

    def hit(self, key: str, now: float | None = None) -> None:
        moment = time.monotonic() if now is None else now
        hits = self._recent(key, moment)
        hits.append(moment)
        self._hits[key] = hits[-self.limit :]
        self._hits.move_to_end(key)
        while len(self._hits) > self.max_keys:
            self._hits.popitem(last=False)

    def reset(self, key: str) -> None:
        self._hits.pop(key, None)

    def __len__(self) -> int:
        return len(self._hits)


REQUESTS_PER_SECOND = 50.0
REQUEST_BURST = 100.0


class RequestLimits:
    """Token buckets per credential (SHA-256 of the bearer token or session cookie), LRU-bound."""

    def __init__(
        self,
        rate: float = REQUESTS_PER_SECOND,
        burst: float = REQUEST_BURST,
        max_keys: int = 50_000,
    ) -> None:
        self.rate = rate
        self.burst = burst
        self.max_keys = max_keys
        self._buckets: OrderedDict[bytes, tuple[float, float]] = OrderedDict()

    def allow(self, key: bytes, now: float | None = None) -> bool:
        moment = time.monotonic() if now is None else now
        tokens, at = self._buckets.get(key, (self.burst, moment))
        tokens = min(self.burst, tokens + (moment - at) * self.rate)
        allowed = tokens >= 1
        self._buckets[key] = (tokens - 1 if allowed else tokens, moment)
        self._buckets.move_to_end(key)
        while len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)
        return allowed


def _check_request_rate(connection: ASGIConnection[Any, Any, Any, Any], credential: str) -> None:
    limits: RequestLimits | None = connection.app.state.get("request_limits")
    if limits is None:
        return
    if not limits.allow(hashlib.sha256(credential.encode("utf-8", "replace")).digest()):
        raise ServiceError(429, "rate_limited", "too many requests; slow down")


class SignInLimits:
    """Failed sign-ins per account (10 per 15 min) and all attempts per address (30 per min)."""

    def __init__(self) -> None:
        self.per_account = RateLimiter(limit=10, window_s=15 * 60)
        self.per_address = RateLimiter(limit=30, window_s=60)

    def check(self, account: str, address: str) -> None:
        wait = max(
            self.per_account.blocked_for(f"a:{account}"),
            self.per_address.blocked_for(f"i:{address}"),
        )
        if wait > 0:
            raise ServiceError(
                429, "rate_limited", f"too many sign-in attempts; retry in {int(wait) + 1} s"
            )
        self.per_address.hit(f"i:{address}")

    def failed(self, account: str) -> None:
        self.per_account.hit(f"a:{account}")

    def succeeded(self, account: str) -> None:
        self.per_account.reset(f"a:{account}")


def client_address(connection: ASGIConnection[Any, Any, Any, Any]) -> str:
    client = connection.scope.get("client")
    return str(client[0]) if client else "unknown"


def _bearer(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    value = connection.headers.get("authorization")
    if value is None:
        return None
    if not value.startswith("Bearer "):
        raise ServiceError(401, "unauthorized", "use 'Authorization: Bearer <token>'")
    return value[7:].strip()


def _same_origin(connection: ASGIConnection[Any, Any, Any, Any]) -> bool:
    origin = connection.headers.get("origin")
    if origin is None:
        return True
    host = connection.headers.get("host", "")
    return origin.split("://", 1)[-1] == host


# The scope key under which a request keeps its resolved session: a handler may ask for it more
# than once (a role check, then a paid-table check), and each would otherwise be a database
# round trip and a count against the caller's request rate.
_SESSION_KEY = "mesa.session"


async def session_of(connection: ASGIConnection[Any, Any, Any, Any]) -> Session | None:
    """The caller's session (None when signed out), looked up once per request."""
    scope: Any = connection.scope
    if _SESSION_KEY in scope:
        cached: Session | None = scope[_SESSION_KEY]
        return cached
    session = await _lookup_session(connection)
    scope[_SESSION_KEY] = session
    return session


async def _lookup_session(connection: ASGIConnection[Any, Any, Any, Any]) -> Session | None:
    db: AsyncEngine = connection.app.state.db
    bearer = _bearer(connection)
    if bearer is not None:
        _check_request_rate(connection, bearer)
        session = await resolve_session(db, bearer, "bearer")
        if session is None:
            raise ServiceError(401, "unauthorized", "invalid or expired token")
        return session
    cookie = connection.cookies.get(SESSION_COOKIE)
    if not cookie:
        return None
    _check_request_rate(connection, cookie)
    return await resolve_session(db, cookie, "cookie")


def check_csrf(connection: ASGIConnection[Any, Any, Any, Any], session: Session) -> None:
    if session.kind != "cookie":
        return
    method = connection.scope.get("method", "GET")
    if method not in UNSAFE_METHODS:
        return
    if not _same_origin(connection):
        raise ServiceError(403, "forbidden", "cross-origin request refused")
    header = connection.headers.get(CSRF_HEADER, "")
    cookie = connection.cookies.get(CSRF_COOKIE, "")
    if not header or not hmac.compare_digest(header.encode(), cookie.encode()):
        raise ServiceError(403, "csrf_failed", "missing or wrong X-CSRF-Token")
    if not hmac.compare_digest(header.encode(), session.csrf_token.encode()):
        raise ServiceError(403, "csrf_failed", "CSRF token does not belong to this session")


async def require(connection: ASGIConnection[Any, Any, Any, Any], *roles: str) -> Session:
    """The caller's session if it has one of `roles`; 401 when signed out, 403 otherwise."""
    session = await session_of(connection)
    if session is None:
        raise ServiceError(401, "unauthorized", "sign in first")
    check_csrf(connection, session)
    if roles and session.user.role not in roles:
        raise ServiceError(403, "forbidden", "your role may not do this")
    return session
