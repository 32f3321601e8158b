"""Invitations: one player offers named others to sit together (schema `gateway`, tables
`invitations` and `invitation_players`).

Two offers are invitations: naming a partner at a join (one invitee; the join it stands for is
`op`), and "play again" with everyone of a finished match (`match_id`, one per match; a new
private table of the same kind and tier, partners together again). The inviter's answer is
`accepted` from the start; each invitee answers in his own session, and may still decline after
accepting while others have not answered. Nothing is seated for or held from anyone until every
player has accepted: then the invitation moves once, out of `pending`, to `accepted` (seated,
with `table_id`; or `failed` when a seat was refused). `declined` (by an invitee), `cancelled`
(by the inviter) and `expired` (its time passed; the database clock decides) end it for
everyone. Every transition is one conditional UPDATE under the invitation's row lock, so two
racing answers cannot both decide it.
"""

from __future__ import annotations

from datetime import datetime
from itertools import groupby
from typing import Literal

import msgspec
from sqlalchemy import text
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.common.errors import ServiceError

Op = Literal["quick", "private", "code"]
InvitationStatus = Literal["pending", "accepted", "declined", "cancelled", "expired", "failed"]
Answer = Literal["pending", "accepted", "declined"]

# A player may have this many pending invitations out, and this many waiting for his answer.
MAX_PENDING_OUT = 5
MAX_PENDING_IN = 20
# And send at most this many an hour, decided ones included (no flooding by invite-and-cancel).
MAX_PER_HOUR = 60
# Listings stop here (pending ones fit: see the limits above).
MAX_LISTED = 50
MAX_ID = 2**62
MAX_TTL_S = 86_400
MAX_PLAYERS = 16  # the inviter included


class Seat(msgspec.Struct, frozen=True):
    """One player of an invitation: his seat at the finished match (or the order he was
    named in), and his team (players of one team join together, as partners)."""

    player: str
    seat: int
    team: int


class Member(msgspec.Struct, frozen=True):
    player: str
    seat: int
    team: int
    answer: str  # pending, accepted or declined


class Invitation(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    inviter: str
    op: str
    kind: str | None
    tier: str | None
    invite_code: str | None
    match_id: str | None
    status: str
    failure: str | None
    table_id: str | None
    created_at: datetime
    expires_at: datetime
    decided_at: datetime | None
    expired: bool  # pending, but its time has passed (the database's clock)
    players: list[Member]

    def player_ids(self) -> list[str]:
        return [p.player for p in self.players]

    def invitees(self) -> list[str]:
        return [p.player for p in self.players if p.player != self.inviter]

    def waiting_for(self) -> list[str]:
        return [p.player for p in self.players if p.answer == "pending"]

    def answer_of(self, player: str) -> str | None:
        return next((p.answer for p in self.players if p.player == player), None)

    def accepted_by(self, player: str) -> bool:
        return self.answer_of(player) == "accepted"

    def teams(self) -> list[list[str]]:
        """Who joins together, team 0 (the inviter's) first, each team in seat order."""
        ordered = sorted(self.players, key=lambda p: (p.team, p.seat))
        return [[p.player for p in team] for _n, team in groupby(ordered, key=lambda p: p.team)]


class NewInvitation(msgspec.Struct, frozen=True, kw_only=True):
    inviter: str
    players: list[Seat]  # the inviter's own seat included, in team 0
    op: Op
    kind: str | None = None
    tier: str | None = None
    invite_code: str | None = None
    match_id: str | None = None  # "play again": one invitation per match, no key
    idempotency_key: str | None = None


def partner_seats(inviter: str, invitee: str) -> list[Seat]:
    """A partner invitation: the two join as one team, the inviter first."""
    return [Seat(inviter, 0, 0), Seat(invitee, 1, 0)]


_COLUMNS = (
    "id, inviter, op, kind, tier, invite_code, match_id, status, failure, table_id, "
    "created_at, expires_at, decided_at, (status = 'pending' AND expires_at <= now()) AS expired"
)


async def _load(conn: AsyncConnection, rows: list[Row[object]]) -> list[Invitation]:
    """The invitations of `rows` with their players (one query for all of them)."""
    if not rows:
        return []
    ids = [r._mapping["id"] for r in rows]
    members = (
        await conn.execute(
            text(
                "SELECT invitation_id, player, seat, team, answer FROM gateway.invitation_players "
                "WHERE invitation_id = ANY(:ids) ORDER BY invitation_id, seat LIMIT :n"
            ),
            {"ids": ids, "n": len(ids) * MAX_PLAYERS},
        )
    ).all()
    by_id: dict[int, list[Member]] = {}
    for p in members:
        by_id.setdefault(p.invitation_id, []).append(Member(p.player, p.seat, p.team, p.answer))
    found = []
    for row in rows:
        m = row._mapping
        found.append(
            Invitation(
                id=m["id"],
                inviter=m["inviter"],
                op=m["op"],
                kind=m["kind"],
                tier=m["tier"],
                invite_code=m["invite_code"],
                match_id=m["match_id"],
                status=m["status"],
                failure=m["failure"],
                table_id=m["table_id"],
                created_at=m["created_at"],
                expires_at=m["expires_at"],
                decided_at=m["decided_at"],
                expired=bool(m["expired"]),
                players=by_id.get(m["id"], []),
            )
        )
    return found


async def _one(conn: AsyncConnection, where: str, params: dict[str, object]) -> Invitation | None:
    row = (
        await conn.execute(
            text(f"SELECT {_COLUMNS} FROM gateway.invitations WHERE {where}"),  # noqa: S608 (fixed columns and conditions; values are bound)
            params,
        )
    ).first()
    return None if row is None else (await _load(conn, [row]))[0]


def _check_new(new: NewInvitation) -> None:
    players = [s.player for s in new.players]
    if not 2 <= len(players) <= MAX_PLAYERS or len(set(players)) != len(players):
        raise ValueError(f"an invitation seats 2 to {MAX_PLAYERS} different players")
    if not any(s.player == new.inviter and s.team == 0 for s in new.players):
        raise ValueError("the inviter sits in the first team of his invitation")
    if len({s.team for s in new.players}) > 1 and new.op != "private":
        raise ValueError("only a new private table seats several teams (by its code)")
    if (new.match_id is None) == (new.idempotency_key is None):
        raise ValueError("an invitation is keyed by its match or by the inviter's key")


async def create(db: AsyncEngine, new: NewInvitation, ttl_s: int) -> tuple[Invitation, bool]:
    """Store a pending invitation; (invitation, replayed). A key or match seen before answers
    the invitation it made (key reuse for another one is a 409); limits are 409s and a 429."""
    if not 0 < ttl_s <= MAX_TTL_S:
        raise ValueError(f"invitation lifetime must be 1 to {MAX_TTL_S} s, not {ttl_s}")
    _check_new(new)
    invitees = [s.player for s in new.players if s.player != new.inviter]
    async with db.begin() as conn:
        # One creator at a time per inviter, so the pending limit cannot be overrun by a burst.
        await conn.execute(
            text("SELECT pg_advisory_xact_lock(hashtext('gateway.invitations:' || :u))"),
            {"u": new.inviter},
        )
        if new.match_id is not None:
            found = await _one(conn, "match_id = :m", {"m": new.match_id})
            if found is not None:
                return found, True
        else:
            found = await _one(
                conn,
                "inviter = :u AND idempotency_key = :k",
                {"u": new.inviter, "k": new.idempotency_key},
            )
            if found is not None:
                same = (found.op, found.kind, found.tier, found.invite_code) == (
                    new.op,
                    new.kind,
                    new.tier,
                    new.invite_code,
                ) and sorted(found.player_ids()) == sorted(s.player for s in new.players)
                if not same:
                    raise ServiceError(
                        409, "idempotency_key_reused", "that key was used for another invitation"
                    )
                return found, True
        counts = (
            await conn.execute(
                text(
                    "SELECT "
                    "(SELECT count(*) FROM gateway.invitations WHERE inviter = :u "
                    "AND status = 'pending' AND expires_at > now()) AS out, "
                    "(SELECT count(*) FROM gateway.invitations "
                    "WHERE inviter = :u AND created_at > now() - interval '1 hour') AS last_hour, "
                    "(SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n "
                    "FROM gateway.invitation_players p JOIN gateway.invitations i "
                    "ON i.id = p.invitation_id WHERE p.player = ANY(:others) "
                    "AND p.answer = 'pending' AND i.status = 'pending' AND i.expires_at > now() "
                    "GROUP BY p.player) AS each_) AS in_"
                ),
                {"u": new.inviter, "others": invitees},
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
                    "INSERT INTO gateway.invitations (inviter, op, kind, tier, invite_code, "
                    "match_id, idempotency_key, expires_at) VALUES (:u, :op, :kind, :tier, "
                    ":code, :m, :k, now() + make_interval(secs => :ttl)) "
                    "ON CONFLICT (match_id) DO NOTHING RETURNING id"
                ),
                {
                    "u": new.inviter,
                    "op": new.op,
                    "kind": new.kind,
                    "tier": new.tier,
                    "code": new.invite_code,
                    "m": new.match_id,
                    "k": new.idempotency_key,
                    "ttl": float(ttl_s),
                },
            )
        ).first()
        if row is None:  # another player of the match proposed it a moment before
            raced = await _one(conn, "match_id = :m", {"m": new.match_id})
            if raced is None:
                raise RuntimeError(f"the invitation of match {new.match_id} vanished")
            return raced, True
        await conn.execute(
            text(
                "INSERT INTO gateway.invitation_players (invitation_id, player, seat, team, "
                "answer, answered_at) VALUES (:id, :player, :seat, :team, :answer, "
                "CASE WHEN :answer = 'accepted' THEN now() END)"
            ),
            [
                {
                    "id": row.id,
                    "player": s.player,
                    "seat": s.seat,
                    "team": s.team,
                    "answer": "accepted" if s.player == new.inviter else "pending",
                }
                for s in new.players
            ],
        )
        made = await _one(conn, "id = :id", {"id": row.id})
    if made is None:
        raise RuntimeError(f"invitation {row.id} vanished")
    return made, False


async def get(db: AsyncEngine, invitation_id: int) -> Invitation | None:
    if not 1 <= invitation_id <= MAX_ID:
        return None
    async with db.connect() as conn:
        return await _one(conn, "id = :id", {"id": invitation_id})


async def get_by_match(db: AsyncEngine, match_id: str) -> Invitation | None:
    async with db.connect() as conn:
        return await _one(conn, "match_id = :m", {"m": match_id})


async def expire_due(db: AsyncEngine, user_id: str) -> None:
    """Mark this user's pending invitations whose time has passed as expired."""
    async with db.begin() as conn:
        await conn.execute(
            text(
                "UPDATE gateway.invitations SET status = 'expired', decided_at = expires_at "
                "WHERE status = 'pending' AND expires_at <= now() AND id IN (SELECT "
                "invitation_id FROM gateway.invitation_players WHERE player = :u)"
            ),
            {"u": user_id},
        )


async def pending_of(db: AsyncEngine, user_id: str) -> tuple[list[Invitation], list[Invitation]]:
    """(incoming, outgoing) open invitations of a user, oldest first: the pending ones, and
    those everyone accepted whose seating was cut short (no table, no failure: a service
    failed midway), for one more lifetime after the last acceptance, so that any of their
    players sees them and may accept again, which replays the seating."""
    await expire_due(db, user_id)
    async with db.connect() as conn:
        rows = (
            await conn.execute(
                text(
                    f"SELECT {_COLUMNS} FROM gateway.invitations WHERE (status = 'pending' "  # noqa: S608 (a fixed column list; values are bound)
                    "OR (status = 'accepted' AND table_id IS NULL AND failure IS NULL "
                    "AND decided_at + (expires_at - created_at) > now())) "
                    "AND id IN (SELECT invitation_id FROM gateway.invitation_players "
                    "WHERE player = :u) ORDER BY id LIMIT :n"
                ),
                {"u": user_id, "n": MAX_LISTED},
            )
        ).all()
        found = await _load(conn, list(rows))
    return [i for i in found if i.inviter != user_id], [i for i in found if i.inviter == user_id]


async def answer(
    db: AsyncEngine, invitation_id: int, player: str, *, accept: bool
) -> tuple[Invitation | None, bool]:
    """Record an invitee's answer on a pending, unexpired invitation: (invitation, claimed),
    claimed when this was the last acceptance and moved it to `accepted` (the caller seats
    everyone). A decline ends it. (None, False) when it was not pending any more, or `player`
    is not one of its invitees."""
    if not 1 <= invitation_id <= MAX_ID:
        return None, False
    async with db.begin() as conn:
        locked = (
            await conn.execute(
                text(
                    "SELECT inviter FROM gateway.invitations WHERE id = :id "
                    "AND status = 'pending' AND expires_at > now() FOR UPDATE"
                ),
                {"id": invitation_id},
            )
        ).first()
        if locked is None or locked.inviter == player:
            return None, False
        changed = (
            await conn.execute(
                text(
                    "UPDATE gateway.invitation_players SET answer = :a, answered_at = now() "
                    "WHERE invitation_id = :id AND player = :p "
                    "AND (answer = 'pending' OR (:a = 'declined' AND answer = 'accepted')) "
                    "RETURNING player"
                ),
                {"id": invitation_id, "p": player, "a": "accepted" if accept else "declined"},
            )
        ).first()
        answers = (
            await conn.execute(
                text(
                    "SELECT player, answer FROM gateway.invitation_players "
                    "WHERE invitation_id = :id LIMIT :n"
                ),
                {"id": invitation_id, "n": MAX_PLAYERS},
            )
        ).all()
        if player not in {a.player for a in answers}:
            return None, False
        claimed = False
        if not accept and changed is not None:
            await conn.execute(
                text(
                    "UPDATE gateway.invitations SET status = 'declined', decided_at = now() "
                    "WHERE id = :id"
                ),
                {"id": invitation_id},
            )
        elif accept and all(a.answer == "accepted" for a in answers):
            await conn.execute(
                text(
                    "UPDATE gateway.invitations SET status = 'accepted', decided_at = now() "
                    "WHERE id = :id"
                ),
                {"id": invitation_id},
            )
            claimed = True
        found = await _one(conn, "id = :id", {"id": invitation_id})
    return found, claimed


async def cancel(db: AsyncEngine, invitation_id: int, inviter: str) -> Invitation | None:
    """The inviter withdraws a pending, unexpired invitation; None when it was not (any more)."""
    if not 1 <= invitation_id <= MAX_ID:
        return None
    async with db.begin() as conn:
        row = (
            await conn.execute(
                text(
                    "UPDATE gateway.invitations SET status = 'cancelled', decided_at = now() "
                    "WHERE id = :id AND inviter = :u AND status = 'pending' "
                    "AND expires_at > now() RETURNING id"
                ),
                {"id": invitation_id, "u": inviter},
            )
        ).first()
        return None if row is None else await _one(conn, "id = :id", {"id": invitation_id})


async def record_outcome(
    db: AsyncEngine, invitation_id: int, *, table_id: str | None, failure: str | None
) -> Invitation:
    """After an accepted invitation's seating: the table it seated, or why it failed."""
    async with db.begin() as conn:
        row = (
            await conn.execute(
                text(
                    "UPDATE gateway.invitations SET table_id = :table, failure = :failure, "
                    "status = CASE WHEN CAST(:failure AS TEXT) IS NULL "
                    "THEN status ELSE 'failed' END "
                    "WHERE id = :id AND status = 'accepted' RETURNING id"
                ),
                {"id": invitation_id, "table": table_id, "failure": failure},
            )
        ).first()
        found = None if row is None else await _one(conn, "id = :id", {"id": invitation_id})
    if found is None:
        raise ServiceError(409, "invitation_closed", "that invitation is no longer open")
    return found
