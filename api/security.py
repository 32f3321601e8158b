"""Who is calling, what they may do, and the headers every response carries.

- The page uses a session cookie (`mesa_session`, HttpOnly, SameSite=Strict, Secure outside
  dev/test) plus a CSRF token: every unsafe cookie-authenticated request must send the token in
  `X-CSRF-Token`, equal to the non-HttpOnly `mesa_csrf` cookie and to the one stored with the
  session (double submit, bound to the session).
- API clients send `Authorization: Bearer <token>` (no cookie, so no CSRF token needed).
- Sign-in attempts are throttled per (account, address) pair with growing waits, per address
  and per account, in bounded memory (SignInLimits), and take only same-origin JSON
  (`sign_in_request_guard`). The client address is the peer's, or X-Forwarded-For's when the
  peer is a configured proxy (`client_address`).
- Every request that carries a credential is limited per credential (a token bucket of
  `REQUESTS_PER_SECOND`, burst `REQUEST_BURST`) before the credential is even looked up, so one
  flooding client is answered 429 cheaply and cannot slow the others.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import time
from collections import OrderedDict
from collections.abc import Callable
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


# Sign-in throttling (SignInLimits). Numbers are per gateway process.
PAIR_FREE_FAILURES = 3  # failures of one (account, address) pair before any wait
PAIR_FIRST_DELAY_S = 1.0  # then 1 s, 2 s, 4 s ... before that pair's next attempt
PAIR_MAX_DELAY_S = 15 * 60.0
PAIR_FORGET_S = 24 * 3600.0  # a pair's count starts over a day after its last failure
ADDRESS_ATTEMPTS = 30  # every attempt (sign-in, token, register) per address, per minute
ADDRESS_ATTEMPTS_WINDOW_S = 60.0
ADDRESS_FAILURES = 100  # failed sign-ins per address, over any accounts, per hour
ADDRESS_FAILURES_WINDOW_S = 3600.0
ACCOUNT_FAILURES = 100  # failed sign-ins per account, from all addresses, per hour
ACCOUNT_FAILURES_WINDOW_S = 3600.0
KNOWN_PAIR_TTL_S = 30 * 86400.0  # an address that signed in to an account is known this long
SIGN_IN_MAX_KEYS = 100_000  # per table below; least recently used dropped beyond it


class LeakyCounter:
    """At most `limit` events per `window_s` per key, as a leaky bucket (it drains at
    limit/window_s a second): two floats a key, at most `max_keys` keys (LRU dropped)."""

    def __init__(self, limit: int, window_s: float, max_keys: int = SIGN_IN_MAX_KEYS) -> None:
        if limit <= 0 or window_s <= 0 or max_keys <= 0:
            raise ValueError("limit, window_s and max_keys must be positive")
        self.limit = limit
        self.rate = limit / window_s
        self.max_keys = max_keys
        self._levels: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def _level(self, key: str, now: float) -> float:
        level, at = self._levels.get(key, (0.0, now))
        return max(0.0, level - max(0.0, now - at) * self.rate)

    def blocked_for(self, key: str, now: float) -> float:
        """Seconds until one more event fits (0 when it fits now)."""
        excess = self._level(key, now) + 1 - self.limit
        return 0.0 if excess <= 0 else excess / self.rate

    def add(self, key: str, now: float) -> None:
        self._levels[key] = (self._level(key, now) + 1, now)
        self._levels.move_to_end(key)
        while len(self._levels) > self.max_keys:
            self._levels.popitem(last=False)

    def __len__(self) -> int:
        return len(self._levels)


def address_key(address: str) -> str:
    """The unit an address is limited by: an IPv4 address, or an IPv6 /64 (one subscriber
    usually holds a whole /64, so single IPv6 addresses would cost an attacker nothing)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address[:64]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((int(ip) >> 64 << 64, 64)))
    return str(ip)


class SignInLimits:
    """Throttles password guessing without giving anyone a way to lock a player out.

    A failure counts against three things, each bounded in memory (LRU, `max_keys` each):

    1. The (account, address) pair. After `PAIR_FREE_FAILURES` failures, each further one
       doubles the wait before that pair may try again (1 s, 2 s, 4 s ... up to 15 min); a
       success resets it, and a day without failures forgets it. This is the main brake, and
       it only brakes the guesser: the owner signing in from another address has a pair of
       their own with no failures.
    2. The address: at most `ADDRESS_ATTEMPTS` attempts a minute (any account, successes
       too, registrations too) and `ADDRESS_FAILURES` failures an hour over all accounts, so
       one address can neither guess across many accounts nor make new pairs to dodge rule 1.
    3. The account: at most `ACCOUNT_FAILURES` failures an hour from all addresses together,
       which stops guessing from many addresses (each pair is slowed by rule 1 and each
       address by rule 2, so reaching it takes many addresses). It is high, and it does not
       apply to an address that signed in to the account successfully in the last 30 days,
       so even an attacker who holds an account at the ceiling does not lock its owner out of
       their usual address; an owner on a new address waits for the hour's window at most.

    `now` (seconds, monotonic) is taken from `clock` unless given: tests pass their own.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = SIGN_IN_MAX_KEYS,
    ) -> None:
        self.clock = clock
        self.max_keys = max_keys
        self.per_address = LeakyCounter(ADDRESS_ATTEMPTS, ADDRESS_ATTEMPTS_WINDOW_S, max_keys)
        self.address_failures = LeakyCounter(ADDRESS_FAILURES, ADDRESS_FAILURES_WINDOW_S, max_keys)
        self.account_failures = LeakyCounter(ACCOUNT_FAILURES, ACCOUNT_FAILURES_WINDOW_S, max_keys)
        # pair -> (failures, time of the last one)
        self._pairs: OrderedDict[tuple[str, str], tuple[int, float]] = OrderedDict()
        # pair -> time of its last successful sign-in
        self._known: OrderedDict[tuple[str, str], float] = OrderedDict()

    def _now(self, now: float | None) -> float:
        return self.clock() if now is None else now

    def _bounded(self, table: OrderedDict[Any, Any], key: Any) -> None:
        table.move_to_end(key)
        while len(table) > self.max_keys:
            table.popitem(last=False)

    def pair_blocked_for(self, account: str, address: str, now: float) -> float:
        failures, last = self._pairs.get((account, address_key(address)), (0, now))
        if failures < PAIR_FREE_FAILURES or now - last >= PAIR_FORGET_S:
            return 0.0
        exponent = min(failures - PAIR_FREE_FAILURES, 30)
        delay = min(PAIR_MAX_DELAY_S, PAIR_FIRST_DELAY_S * 2**exponent)
        return max(0.0, last + delay - now)

    def _known_pair(self, account: str, address: str, now: float) -> bool:
        at = self._known.get((account, address_key(address)))
        return at is not None and now - at < KNOWN_PAIR_TTL_S

    def check(self, account: str, address: str, now: float | None = None) -> None:
        """Count an attempt; 429 when any limit says wait."""
        moment = self._now(now)
        where = address_key(address)
        waits = [
            self.pair_blocked_for(account, address, moment),
            self.per_address.blocked_for(where, moment),
            self.address_failures.blocked_for(where, moment),
        ]
        if not self._known_pair(account, address, moment):
            waits.append(self.account_failures.blocked_for(account, moment))
        wait = max(waits)
        if wait > 0:
            raise ServiceError(
                429, "rate_limited", f"too many sign-in attempts; retry in {int(wait) + 1} s"
            )
        self.per_address.add(where, moment)

    def failed(self, account: str, address: str, now: float | None = None) -> None:
        moment = self._now(now)
        where = address_key(address)
        pair = (account, where)
        failures, last = self._pairs.get(pair, (0, moment))
        if moment - last >= PAIR_FORGET_S:
            failures = 0
        self._pairs[pair] = (failures + 1, moment)
        self._bounded(self._pairs, pair)
        self.address_failures.add(where, moment)
        self.account_failures.add(account, moment)

    def succeeded(self, account: str, address: str, now: float | None = None) -> None:
        pair = (account, address_key(address))
        self._pairs.pop(pair, None)
        self._known[pair] = self._now(now)
        self._bounded(self._known, pair)

    def sizes(self) -> tuple[int, ...]:
        """Keys held by each table (for tests of the memory bound)."""
        return (
            len(self._pairs),
            len(self._known),
            len(self.per_address),
            len(self.address_failures),
            len(self.account_failures),
        )


# X-Forwarded-For hops looked at, from the right: a longer chain is no real proxy path.
MAX_FORWARDED_HOPS = 16
Networks = tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]


def parse_networks(values: tuple[str, ...]) -> Networks:
    return tuple(ipaddress.ip_network(v, strict=False) for v in values)


def _trusted(address: str, proxies: Networks) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in net for net in proxies)


def _hop(raw: str) -> str | None:
    """The address of one X-Forwarded-For entry (an IPv6 may come in brackets), else None."""
    value = raw.strip()
    if value.startswith("[") and "]" in value:
        value = value[1 : value.index("]")]
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return None


def client_address(connection: ASGIConnection[Any, Any, Any, Any]) -> str:
    """The caller's address. X-Forwarded-For counts only when the peer is one of the
    configured proxies (`MESA_TRUSTED_PROXIES`): then the client is the rightmost address
    that is not a trusted proxy (entries left of it were written by the client and prove
    nothing). Otherwise the header is ignored, so a client cannot pick its own address.
    (uvicorn's own proxy-header handling is off in `mesa serve`: this is the one place.)"""
    client = connection.scope.get("client")
    peer = str(client[0]) if client else "unknown"
    proxies: Networks = connection.app.state.get("trusted_proxies", ())
    if not proxies or not _trusted(peer, proxies):
        return peer
    hops = [
        part
        for value in connection.headers.getall("x-forwarded-for", [])
        for part in value.split(",")
    ]
    address = peer
    for raw in reversed(hops[-MAX_FORWARDED_HOPS:]):
        hop = _hop(raw)
        if hop is None:
            return address  # garbage from beyond the last trusted proxy
        address = hop
        if not _trusted(hop, proxies):
            return hop
    return address


def sign_in_request_guard(connection: ASGIConnection[Any, Any, Any, Any], _: Any) -> None:
    """Sign-in routes take only a JSON body from this origin. A cross-site form post (the
    way to sign a victim in as the attacker: login CSRF) can send neither that content type
    without a CORS preflight, which this gateway never grants, nor a same-origin Origin."""
    media = connection.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        raise ServiceError(
            403, "json_required", "send a JSON body (Content-Type: application/json)"
        )
    site = connection.headers.get("sec-fetch-site")
    if not _same_origin(connection) or (site is not None and site not in ("same-origin", "none")):
        raise ServiceError(403, "cross_origin", "cross-origin sign-in refused")


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


# What `accounts.open_session` hands out (`secrets.token_urlsafe(32)`): anything else is
# refused before the rate limiter's table or the database sees it.
_TOKEN_SHAPE = re.compile(r"[A-Za-z0-9_-]{43}")


def well_formed_token(value: str) -> bool:
    return _TOKEN_SHAPE.fullmatch(value) is not None


async def _lookup_session(connection: ASGIConnection[Any, Any, Any, Any]) -> Session | None:
    db: AsyncEngine = connection.app.state.db
    bearer = _bearer(connection)
    if bearer is not None:
        if not well_formed_token(bearer):
            raise ServiceError(401, "unauthorized", "invalid or expired token")
        _check_request_rate(connection, bearer)
        session = await resolve_session(db, bearer, "bearer")
        if session is None:
            raise ServiceError(401, "unauthorized", "invalid or expired token")
        return session
    cookie = connection.cookies.get(SESSION_COOKIE)
    if not cookie or not well_formed_token(cookie):
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
