"""Invitations to sit as someone's partner (schema `gateway`, table `invitations`).

Naming a partner only stores an invitation; nothing is seated for or held from the partner
until he accepts it in his own session. Status moves once, out of `pending`:
`accepted` (by the invitee; then seated, or `failed` when matchmaking refuses the join),
`declined` (by the invitee), `cancelled` (by the inviter) or `expired` (its time passed; the
database clock decides). Every transition is one conditional UPDATE, so two racing requests
(an accept and a cancel) cannot both win.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import msgspec
from sqlalchemy import text
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncEngine

from services.common.errors import ServiceError

Op = Literal["quick", "private", "code"]
InvitationStatus = Literal["pending", "accepted", "declined", "cancelled", "expired", "failed"]

# A player may have this many pending invitations out, and this many waiting for his answer.
MAX_PENDING_OUT = 5
MAX_PENDING_IN = 20
# And send at most this many an hour, decided ones included (no flooding by invite-and-cancel).
MAX_PER_HOUR = 60
# Listings stop here (pending ones fit: see the limits above).
MAX_LISTED = 50
MAX_ID = 2**62
MAX_TTL_S = 86_400


class Invitation(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    inviter: str
    invitee: str
    op: str
    kind: str | None
    tier: str | None
    invite_code: str | None
    status: str
    failure: str | None
    table_id: str | None
    created_at: datetime
    expires_at: datetime
    decided_at: datetime | None
    expired: bool  # pending, but its time has passed (the database's clock)


class NewInvitation(msgspec.Struct, frozen=True, kw_only=True):
    inviter: str
    invitee: str
    op: Op
    kind: str | None = None
    tier: str | None = None
    invite_code: str | None = None
    idempotency_key: str


_COLUMNS = (
    "id, inviter, invitee, op, kind, tier, invite_code, status, failure, table_id, created_at, "
    "expires_at, decided_at, (status = 'pending' AND expires_at <= now()) AS expired"
)


def _invitation(row: Row[object]) -> Invitation:
    m = row._mapping
    return Invitation(
        id=m["id"],
        inviter=m["inviter"],
        invitee=m["invitee"],
        op=m["op"],
        kind=m["kind"],
        tier=m["tier"],
        invite_code=m["invite_code"],
        status=m["status"],
        failure=m["failure"],
        table_id=m["table_id"],
        created_at=m["created_at"],
        expires_at=m["expires_at"],
        decided_at=m["decided_at"],
        expired=bool(m["expired"]),
    )


async def create(db: AsyncEngine, new: NewInvitation, ttl_s: int) -> tuple[Invitation, bool]:
    """Store a pending invitation; (invitation, replayed). Limits and key reuse are 409s."""
    if not 0 < ttl_s <= MAX_TTL_S:
        raise ValueError(f"invitation lifetime must be 1 to {MAX_TTL_S} s, not {ttl_s}")
    async with db.begin() as conn:
        # One creator at a time per inviter, so the pending limit cannot be overrun by a burst.
        await conn.execute(
            text("SELECT pg_advisory_xact_lock(hashtext('gateway.invitations:' || :u))"),
            {"u": new.inviter},
        )
        found = (
            await conn.execute(
                text(
                    f"SELECT {_COLUMNS} FROM gateway.invitations "  # noqa: S608 (a fixed column list; values are bound)
                    "WHERE inviter = :u AND idempotency_key = :k"
                ),
                {"u": new.inviter, "k": new.idempotency_key},
            )
        ).first()
        if found is not None:
            old = _invitation(found)
            same = (old.invitee, old.op, old.kind, old.tier, old.invite_code) == (
                new.invitee,
                new.op,
                new.kind,
                new.tier,
                new.invite_code,
            )
            if not same:
                raise ServiceError(
                    409, "idempotency_key_reused", "that key was used for another invitation"
                )
            return old, True
        counts = (
            await conn.execute(
                text(
                    "SELECT count(*) FILTER (WHERE inviter = :u AND status = 'pending' "
                    "AND expires_at > now()) AS out, "
                    "count(*) FILTER (WHERE invitee = :p AND status = 'pending' "
                    "AND expires_at > now()) AS in_, "
                    "count(*) FILTER (WHERE inviter = :u "
                    "AND created_at > now() - interval '1 hour') AS last_hour "
                    "FROM gateway.invitations WHERE inviter = :u OR invitee = :p"
                ),
                {"u": new.inviter, "p": new.invitee},
            )
        ).one()
        if counts.last_hour >= MAX_PER_HOUR:
            raise ServiceError(429, "rate_limited", f"at most {MAX_PER_HOUR} invitations an hour")
        if counts.out >= MAX_PENDING_OUT:
            raise ServiceError(
                409,
                "too_many_invitations",
                f"at most {MAX_PENDING_OUT} pending invitations; cancel one or wait",
            )
        if counts.in_ >= MAX_PENDING_IN:
            raise ServiceError(409, "partner_busy", "your partner has too many invitations")
        row = (
            await conn.execute(
                text(
                    "INSERT INTO gateway.invitations (inviter, invitee, op, kind, tier, "  # noqa: S608 (a fixed column list; values are bound)
                    "invite_code, idempotency_key, expires_at) VALUES (:u, :p, :op, :kind, "
                    ":tier, :code, :k, now() + make_interval(secs => :ttl)) "
                    f"RETURNING {_COLUMNS}"
                ),
                {
                    "u": new.inviter,
                    "p": new.invitee,
                    "op": new.op,
                    "kind": new.kind,
                    "tier": new.tier,
                    "code": new.invite_code,
                    "k": new.idempotency_key,
                    "ttl": float(ttl_s),
                },
            )
        ).one()
    return _invitation(row), False


async def get(db: AsyncEngine, invitation_id: int) -> Invitation | None:
    if not 1 <= invitation_id <= MAX_ID:
        return None
    async with db.connect() as conn:
        row = (
            await conn.execute(
                text(f"SELECT {_COLUMNS} FROM gateway.invitations WHERE id = :id"),  # noqa: S608 (a fixed column list; values are bound)
                {"id": invitation_id},
            )
        ).first()
    return None if row is None else _invitation(row)


async def get_for(db: AsyncEngine, invitation_id: int, user_id: str) -> Invitation:
    """The invitation if `user_id` is its inviter or invitee; 404 otherwise (others see none)."""
    found = await get(db, invitation_id)
    if found is None or user_id not in (found.inviter, found.invitee):
        raise ServiceError(404, "invitation_not_found", "no such invitation")
    return found


async def expire_due(db: AsyncEngine, user_id: str) -> None:
    """Mark this user's pending invitations whose time has passed as expired."""
    async with db.begin() as conn:
        await conn.execute(
            text(
                "UPDATE gateway.invitations SET status = 'expired', decided_at = expires_at "
                "WHERE status = 'pending' AND expires_at <= now() "
                "AND (inviter = :u OR invitee = :u)"
            ),
            {"u": user_id},
        )


async def pending_of(db: AsyncEngine, user_id: str) -> tuple[list[Invitation], list[Invitation]]:
    """(incoming, outgoing) pending invitations of a user, oldest first."""
    await expire_due(db, user_id)
    async with db.connect() as conn:
        rows = (
            await conn.execute(
                text(
                    f"SELECT {_COLUMNS} FROM gateway.invitations WHERE status = 'pending' "  # noqa: S608 (a fixed column list; values are bound)
                    "AND (inviter = :u OR invitee = :u) ORDER BY id LIMIT :n"
                ),
                {"u": user_id, "n": MAX_LISTED},
            )
        ).all()
    found = [_invitation(r) for r in rows]
    return [i for i in found if i.invitee == user_id], [i for i in found if i.inviter == user_id]


async def transition(
    db: AsyncEngine,
    invitation_id: int,
    *,
    to: InvitationStatus,
    by_inviter: str | None = None,
    by_invitee: str | None = None,
) -> Invitation | None:
    """Move a pending, unexpired invitation to `to`; None when it was not (any more)."""
    if not 1 <= invitation_id <= MAX_ID:
        return None
    async with db.begin() as conn:
        row = (
            await conn.execute(
                text(
                    "UPDATE gateway.invitations SET status = :to, decided_at = now() "  # noqa: S608 (a fixed column list; values are bound)
                    "WHERE id = :id AND status = 'pending' AND expires_at > now() "
                    "AND (CAST(:inviter AS TEXT) IS NULL OR inviter = :inviter) "
                    "AND (CAST(:invitee AS TEXT) IS NULL OR invitee = :invitee) "
                    f"RETURNING {_COLUMNS}"
                ),
                {"id": invitation_id, "to": to, "inviter": by_inviter, "invitee": by_invitee},
            )
        ).first()
    return None if row is None else _invitation(row)


async def record_outcome(
    db: AsyncEngine, invitation_id: int, *, table_id: str | None, failure: str | None
) -> Invitation:
    """After an accepted invitation's join: the table it seated, or why it failed."""
    async with db.begin() as conn:
        row = (
            await conn.execute(
                text(
                    "UPDATE gateway.invitations SET table_id = :table, failure = :failure, "  # noqa: S608 (a fixed column list; values are bound)
                    "status = CASE WHEN CAST(:failure AS TEXT) IS NULL "
                    "THEN status ELSE 'failed' END "
                    f"WHERE id = :id AND status = 'accepted' RETURNING {_COLUMNS}"
                ),
                {"id": invitation_id, "table": table_id, "failure": failure},
            )
        ).first()
    if row is None:
        raise ServiceError(409, "invitation_closed", "that invitation is no longer open")
    return _invitation(row)
