"""Service credentials for the internal API: short-lived HMAC-SHA256 tokens.

A token is `v1.<caller>.<expires_unix_ms>.<hex hmac>` over `v1|<caller>|<expires>` with the
shared secret `MESA_INTERNAL_SECRET` (created under var/ by `mesa up`). Tokens live
`MESA_INTERNAL_TOKEN_TTL_S` seconds, so a leaked one is useless soon after; the public
gateway never forwards a client's Authorization header to a service.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time

AUTH_HEADER = "Authorization"
SCHEME = "MesaService"
_CALLER_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
# Clock skew tolerated between services on one machine or one cluster.
_MAX_LIFETIME_MS = 10 * 60 * 1000


class AuthError(Exception):
    pass


def _mac(secret: bytes, caller: str, expires_ms: int) -> str:
    return hmac.new(secret, f"v1|{caller}|{expires_ms}".encode(), hashlib.sha256).hexdigest()


def mint_token(secret: bytes, caller: str, ttl_s: int = 60, now_ms: int | None = None) -> str:
    if not _CALLER_RE.match(caller):
        raise AuthError(f"invalid caller name {caller!r}")
    if len(secret) < 32:
        raise AuthError("internal secret is missing or shorter than 32 bytes")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    expires = now + ttl_s * 1000
    return f"v1.{caller}.{expires}.{_mac(secret, caller, expires)}"


def verify_token(secret: bytes, token: str, now_ms: int | None = None) -> str:
    """Return the caller's name, or raise AuthError."""
    if len(secret) < 32:
        raise AuthError("internal secret not configured")
    parts = token.split(".")
    if len(parts) != 4 or parts[0] != "v1":
        raise AuthError("malformed service token")
    _, caller, expires_raw, mac = parts
    if not _CALLER_RE.match(caller) or not expires_raw.isdigit():
        raise AuthError("malformed service token")
    expires = int(expires_raw)
    if not hmac.compare_digest(mac, _mac(secret, caller, expires)):
        raise AuthError("bad service token signature")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if expires < now:
        raise AuthError("service token expired")
    if expires - now > _MAX_LIFETIME_MS:
        raise AuthError("service token lifetime too long")
    return caller


def header_value(secret: bytes, caller: str, ttl_s: int = 60) -> str:
    return f"{SCHEME} {mint_token(secret, caller, ttl_s)}"


def caller_from_header(secret: bytes, value: str | None) -> str:
    if not value or not value.startswith(SCHEME + " "):
        raise AuthError("missing service credential")
    return verify_token(secret, value[len(SCHEME) + 1 :].strip())


class TokenCache:
    """Re-mints a caller's token shortly before it expires instead of on every request."""

    def __init__(self, secret: bytes, caller: str, ttl_s: int = 60) -> None:
        self._secret = secret
        self._caller = caller
        self._ttl_s = ttl_s
        self._value = ""
        self._refresh_at_ms = 0

    def header(self) -> str:
        now = int(time.time() * 1000)
        if now >= self._refresh_at_ms:
            self._value = header_value(self._secret, self._caller, self._ttl_s)
            self._refresh_at_ms = now + (self._ttl_s * 1000) // 2
        return self._value


class VerifiedTokens:
    """Headers already verified, with their expiry: callers reuse one token for half its
    life (TokenCache), so a repeat costs a dict lookup and the expiry check, not an HMAC.
    Anything not remembered, or expired, goes through `caller_from_header` (same errors)."""

    def __init__(self, max_size: int = 256) -> None:
        self._max_size = max_size
        self._seen: dict[tuple[bytes, str], tuple[str, int]] = {}

    def caller(self, secret: bytes, value: str | None) -> str:
        if value is not None:
            hit = self._seen.get((secret, value))
            if hit is not None and hit[1] >= int(time.time() * 1000):
                return hit[0]
        caller = caller_from_header(secret, value)
        if value is not None:
            if len(self._seen) >= self._max_size:
                self._seen.clear()
            expires = int(value[len(SCHEME) + 1 :].strip().split(".")[2])
            self._seen[(secret, value)] = (caller, expires)
        return caller
