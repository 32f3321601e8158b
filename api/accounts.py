"""Accounts, passwords and sessions of the public gateway (schema `gateway`).

Passwords: Argon2id, policy and hashing in `api.passwords` (older scrypt hashes still verify
and are replaced by Argon2id at the next successful sign-in). Sessions and bearer tokens are
random 32-byte values; only their SHA-256 is stored, so a database dump opens no session.
A player's id is their user name (lowercase), which is also their id in the ledger.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import secrets
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Literal

import msgspec
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from api import passwords
from api.schema import ROLES

Status = Literal["active", "locked", "self_excluded"]

USER_ID_RE = re.compile(r"^[a-z0-9_.-]{3,32}$")
MIN_PASSWORD = passwords.MIN_PASSWORD
MAX_PASSWORD = passwords.MAX_PASSWORD

COOKIE_SESSION_TTL = timedelta(hours=12)
BEARER_TOKEN_TTL = timedelta(days=30)
# A user may hold at most this many live sessions and tokens; the oldest are revoked beyond it.
MAX_SESSIONS_PER_USER = 20


class AccountError(Exception):
    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


class User(msgspec.Struct, frozen=True):
    id: str
    display_name: str
    role: str
    status: str
    excluded_until: datetime | None = None

    def may_play_paid(self, now: datetime | None = None) -> bool:
        if self.status == "locked":
            return False
        if self.status == "self_excluded":
            moment = now or datetime.now(UTC)
            return self.excluded_until is not None and self.excluded_until <= moment
        return True


class Session(msgspec.Struct, frozen=True):
    user: User
    kind: str
    csrf_token: str
    token_hash: bytes


async def check_password_async(password: str, stored: str) -> bool:
    # Argon2id and scrypt cost tens of ms of CPU: keep them off the event loop.
    return await asyncio.to_thread(passwords.check_password, password, stored)


def validate_new_password(password: str, user_id: str) -> None:
    try:
        passwords.check_new_password(password, user_id)
    except passwords.PasswordRefused as exc:
        raise AccountError("weak_password", exc.detail) from None


def token_hash(token: str) -> bytes:
    return hashlib.sha256(token.encode("ascii", errors="replace")).digest()


def _user(row: object) -> User:
    return User(
        id=row.id,  # type: ignore[attr-defined]
        display_name=row.display_name,  # type: ignore[attr-defined]
        role=row.role,  # type: ignore[attr-defined]
        status=row.status,  # type: ignore[attr-defined]
        excluded_until=row.excluded_until,  # type: ignore[attr-defined]
    )


async def create_user(
    db: AsyncEngine, user_id: str, password: str, role: str = "player", display_name: str = ""
) -> User:
    user_id = user_id.lower()
    if not USER_ID_RE.match(user_id):
        raise AccountError("invalid_username", "user name: 3 to 32 of a-z 0-9 _ . -")
    if role not in ROLES:
        raise AccountError("invalid_role", f"role must be one of {', '.join(ROLES)}")
    validate_new_password(password, user_id)
    hashed = await asyncio.to_thread(passwords.hash_password, password)
    async with db.begin() as conn:
        row = (
            await conn.execute(
                text(
                    "INSERT INTO gateway.users (id, display_name, password_hash, role) "
                    "VALUES (:id, :name, :hash, :role) ON CONFLICT (id) DO NOTHING "
                    "RETURNING id, display_name, role, status, excluded_until"
                ),
                {"id": user_id, "name": display_name or user_id, "hash": hashed, "role": role},
            )
        ).first()
    if row is None:
        raise AccountError("username_taken", "that user name is taken")
    return _user(row)


async def get_user(db: AsyncEngine, user_id: str) -> User | None:
    async with db.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT id, display_name, role, status, excluded_until "
                    "FROM gateway.users WHERE id = :id"
                ),
                {"id": user_id.lower()},
            )
        ).first()
    return None if row is None else _user(row)


async def list_users(db: AsyncEngine, limit: int = 200, after: str = "") -> list[User]:
    async with db.connect() as conn:
        rows = (
            await conn.execute(
                text(
                    "SELECT id, display_name, role, status, excluded_until FROM gateway.users "
                    "WHERE id > :after ORDER BY id LIMIT :limit"
                ),
                {"after": after, "limit": limit},
            )
        ).all()
    return [_user(r) for r in rows]


async def authenticate(db: AsyncEngine, user_id: str, password: str) -> User | None:
    """The user when the password matches, else None (same work either way)."""
    async with db.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT id, display_name, role, status, excluded_until, password_hash "
                    "FROM gateway.users WHERE id = :id"
                ),
                {"id": user_id.lower()},
            )
        ).first()
    stored = row.password_hash if row is not None else passwords.DUMMY_HASH
    ok = await check_password_async(password, stored)
    if row is None or not ok:
        return None
    if passwords.needs_rehash(stored):
        await _upgrade_hash(db, row.id, stored, password)
    return _user(row)


async def _upgrade_hash(db: AsyncEngine, user_id: str, stored: str, password: str) -> None:
    """Store an Argon2id hash for a password just verified against an older hash; only if the
    stored hash is still that one (a password change meanwhile wins)."""
    hashed = await asyncio.to_thread(passwords.hash_password, password)
    async with db.begin() as conn:
        await conn.execute(
            text(
                "UPDATE gateway.users SET password_hash = :new "
                "WHERE id = :id AND password_hash = :old"
            ),
            {"id": user_id, "new": hashed, "old": stored},
        )


async def update_user(
    db: AsyncEngine,
    user_id: str,
    *,
    role: str | None = None,
    status: str | None = None,
    excluded_until: datetime | None = None,
    password: str | None = None,
    then: Callable[[AsyncConnection, User], Awaitable[object]] | None = None,
) -> User:
    """Change a user; `then` runs in the same transaction with the changed user (the staff
    audit record of an admin's change commits with it, or neither does)."""
    sets = ["updated_at = now()"]
    params: dict[str, object] = {"id": user_id}
    if role is not None:
        sets.append("role = :role")
        params["role"] = role
    if status is not None:
        sets.append("status = :status")
        sets.append("excluded_until = :until")
        params["status"] = status
        params["until"] = excluded_until
    if password is not None:
        validate_new_password(password, user_id)
        sets.append("password_hash = :hash")
        params["hash"] = await asyncio.to_thread(passwords.hash_password, password)
    async with db.begin() as conn:
        row = (
            await conn.execute(
                text(
                    f"UPDATE gateway.users SET {', '.join(sets)} WHERE id = :id "  # noqa: S608 (SET clauses from fixed column names; values are bound)
                    "RETURNING id, display_name, role, status, excluded_until"
                ),
                params,
            )
        ).first()
        if row is not None and (status == "locked" or password is not None):
            await conn.execute(
                text(
                    "UPDATE gateway.sessions SET revoked_at = now() "
                    "WHERE user_id = :id AND revoked_at IS NULL"
                ),
                {"id": user_id},
            )
        if row is not None and then is not None:
            await then(conn, _user(row))
    if row is None:
        raise AccountError("no_such_user", "no such user")
    return _user(row)


async def open_session(
    db: AsyncEngine, user: User, kind: str, label: str = ""
) -> tuple[str, str, datetime]:
    """Create a cookie session or bearer token; returns (token, csrf token, expiry)."""
    token = secrets.token_urlsafe(32)
    csrf = secrets.token_urlsafe(24)
    ttl = COOKIE_SESSION_TTL if kind == "cookie" else BEARER_TOKEN_TTL
    expires = datetime.now(UTC) + ttl
    async with db.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO gateway.sessions (token_hash, user_id, kind, csrf_token, label, "
                "expires_at) VALUES (:h, :u, :k, :c, :l, :e)"
            ),
            {"h": token_hash(token), "u": user.id, "k": kind, "c": csrf, "l": label, "e": expires},
        )
        # Bound live sessions per user: revoke all but the newest MAX_SESSIONS_PER_USER.
        await conn.execute(
            text(
                "UPDATE gateway.sessions SET revoked_at = now() WHERE token_hash IN ("
                " SELECT token_hash FROM gateway.sessions WHERE user_id = :u "
                " AND revoked_at IS NULL ORDER BY created_at DESC OFFSET :keep)"
            ),
            {"u": user.id, "keep": MAX_SESSIONS_PER_USER},
        )
    return token, csrf, expires


async def resolve_session(db: AsyncEngine, token: str, kind: str) -> Session | None:
    if not token or len(token) > 100:
        return None
    h = token_hash(token)
    async with db.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT u.id, u.display_name, u.role, u.status, u.excluded_until, "
                    "s.csrf_token FROM gateway.sessions s JOIN gateway.users u ON u.id = s.user_id "
                    "WHERE s.token_hash = :h AND s.kind = :k AND s.revoked_at IS NULL "
                    "AND s.expires_at > now()"
                ),
                {"h": h, "k": kind},
            )
        ).first()
    if row is None:
        return None
    user = _user(row)
    if user.status == "locked":
        return None
    return Session(user=user, kind=kind, csrf_token=row.csrf_token, token_hash=h)


async def session_alive(db: AsyncEngine, h: bytes) -> bool:
    """Whether the session with token hash `h` may still be used (not revoked, not expired,
    its user not locked)."""
    async with db.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT 1 FROM gateway.sessions s JOIN gateway.users u ON u.id = s.user_id "
                    "WHERE s.token_hash = :h AND s.revoked_at IS NULL AND s.expires_at > now() "
                    "AND u.status <> 'locked'"
                ),
                {"h": h},
            )
        ).first()
    return row is not None


async def revoke_session(db: AsyncEngine, h: bytes) -> None:
    async with db.begin() as conn:
        await conn.execute(
            text("UPDATE gateway.sessions SET revoked_at = now() WHERE token_hash = :h"), {"h": h}
        )
