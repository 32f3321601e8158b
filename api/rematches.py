""" "Play again" with the same people (schema `gateway`, tables `rematches`, `rematch_players`).

After a match, one of its players proposes the same game again (same kind, tier and
partnerships) to everyone who sat there. The proposal is his own acceptance; every other player
answers in his own session (and may still decline after accepting, until all have). Nobody is seated or held anything until all have accepted: then the
last acceptance claims the rematch (`pending` -> `seating`) and seats them all. A decline ends it
for everyone (`declined`); so does its time passing (`expired`, the database clock decides, the
lifetime of an invitation). One rematch per match: a second proposal for the same match is an
acceptance of the first. Every transition is one conditional UPDATE under the rematch's row
lock, so two racing answers cannot both claim it.
"""

from __future__ import annotations

from datetime import datetime

import msgspec
from sqlalchemy import text
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

MAX_ID = 2**62
MAX_PLAYERS = 16
MAX_TTL_S = 86_400


class RematchPlayer(msgspec.Struct, frozen=True):
    player: str
    seat: int
    answer: str  # pending, accepted or declined


class Rematch(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    match_id: str
    proposer: str
    kind: str
    tier: str
    pairs: bool
    status: str
    failure: str | None
    table_id: str | None
    created_at: datetime
    expires_at: datetime
    decided_at: datetime | None
    expired: bool  # pending, but its time has passed (the database's clock)
    players: list[RematchPlayer]

    def waiting_for(self) -> list[str]:
        return [p.player for p in self.players if p.answer == "pending"]

    def player_ids(self) -> list[str]:
        return [p.player for p in self.players]


_COLUMNS = (
    "id, match_id, proposer, kind, tier, pairs, status, failure, table_id, created_at, "
    "expires_at, decided_at, (status = 'pending' AND expires_at <= now()) AS expired"
)


async def _load(conn: AsyncConnection, row: Row[object]) -> Rematch:
    m = row._mapping
    players = (
        await conn.execute(
            text(
                "SELECT player, seat, answer FROM gateway.rematch_players "
                "WHERE rematch_id = :id ORDER BY seat LIMIT :n"
            ),
            {"id": m["id"], "n": MAX_PLAYERS},
        )
    ).all()
    return Rematch(
        id=m["id"],
        match_id=m["match_id"],
        proposer=m["proposer"],
        kind=m["kind"],
        tier=m["tier"],
        pairs=m["pairs"],
        status=m["status"],
        failure=m["failure"],
        table_id=m["table_id"],
        created_at=m["created_at"],
        expires_at=m["expires_at"],
        decided_at=m["decided_at"],
        expired=bool(m["expired"]),
        players=[RematchPlayer(p.player, p.seat, p.answer) for p in players],
    )


async def _one(conn: AsyncConnection, where: str, params: dict[str, object]) -> Rematch | None:
    row = (
        await conn.execute(
            text(f"SELECT {_COLUMNS} FROM gateway.rematches WHERE {where}"),  # noqa: S608 (fixed columns and conditions; values are bound)
            params,
        )
    ).first()
    return None if row is None else await _load(conn, row)


async def propose(
    db: AsyncEngine,
    *,
    match_id: str,
    proposer: str,
    kind: str,
    tier: str,
    pairs: bool,
    seats: dict[int, str],
    ttl_s: int,
) -> tuple[Rematch, bool]:
    """Store the proposal (the proposer's acceptance with it); (rematch, created). An existing
    rematch of the match is returned as it is (created False)."""
    if not 0 < ttl_s <= MAX_TTL_S:
        raise ValueError(f"rematch lifetime must be 1 to {MAX_TTL_S} s, not {ttl_s}")
    if not 2 <= len(seats) <= MAX_PLAYERS or proposer not in seats.values():
        raise ValueError("a rematch is proposed by one of its two to sixteen players")
    async with db.begin() as conn:
        row = (
            await conn.execute(
                text(
                    "INSERT INTO gateway.rematches (match_id, proposer, kind, tier, pairs, "
                    "expires_at) VALUES (:m, :p, :kind, :tier, :pairs, "
                    "now() + make_interval(secs => :ttl)) "
                    "ON CONFLICT (match_id) DO NOTHING RETURNING id"
                ),
                {
                    "m": match_id,
                    "p": proposer,
                    "kind": kind,
                    "tier": tier,
                    "pairs": pairs,
                    "ttl": float(ttl_s),
                },
            )
        ).first()
        if row is not None:
            await conn.execute(
                text(
                    "INSERT INTO gateway.rematch_players (rematch_id, player, seat, answer, "
                    "answered_at) VALUES (:id, :player, :seat, :answer, "
                    "CASE WHEN :answer = 'accepted' THEN now() END)"
                ),
                [
                    {
                        "id": row.id,
                        "player": player,
                        "seat": seat,
                        "answer": "accepted" if player == proposer else "pending",
                    }
                    for seat, player in sorted(seats.items())
                ],
            )
        found = await _one(conn, "match_id = :m", {"m": match_id})
    if found is None:
        raise RuntimeError(f"rematch of {match_id} vanished")
    return found, row is not None


async def get(db: AsyncEngine, rematch_id: int) -> Rematch | None:
    if not 1 <= rematch_id <= MAX_ID:
        return None
    async with db.connect() as conn:
        return await _one(conn, "id = :id", {"id": rematch_id})


async def get_by_match(db: AsyncEngine, match_id: str) -> Rematch | None:
    async with db.connect() as conn:
        return await _one(conn, "match_id = :m", {"m": match_id})


async def expire_due(db: AsyncEngine, rematch_id: int) -> None:
    async with db.begin() as conn:
        await conn.execute(
            text(
                "UPDATE gateway.rematches SET status = 'expired', decided_at = expires_at "
                "WHERE id = :id AND status = 'pending' AND expires_at <= now()"
            ),
            {"id": rematch_id},
        )


async def answer(
    db: AsyncEngine, rematch_id: int, player: str, *, accept: bool
) -> tuple[Rematch | None, bool]:
    """Record `player`'s answer on a pending, unexpired rematch: (rematch, claimed), claimed
    when this answer was the last acceptance and moved it to `seating` (the caller seats all).
    (None, False) when it was not pending any more, or he was no player of it."""
    async with db.begin() as conn:
        locked = (
            await conn.execute(
                text(
                    "SELECT id FROM gateway.rematches WHERE id = :id AND status = 'pending' "
                    "AND expires_at > now() FOR UPDATE"
                ),
                {"id": rematch_id},
            )
        ).first()
        if locked is None:
            return None, False
        changed = (
            await conn.execute(
                text(
                    "UPDATE gateway.rematch_players SET answer = :a, answered_at = now() "
                    "WHERE rematch_id = :id AND player = :p "
                    "AND (answer = 'pending' OR (:a = 'declined' AND answer = 'accepted')) "
                    "RETURNING player"
                ),
                {"id": rematch_id, "p": player, "a": "accepted" if accept else "declined"},
            )
        ).first()
        member = (
            await conn.execute(
                text(
                    "SELECT answer FROM gateway.rematch_players "
                    "WHERE rematch_id = :id AND player = :p"
                ),
                {"id": rematch_id, "p": player},
            )
        ).first()
        if member is None:
            return None, False
        claimed = False
        if not accept and changed is not None:
            await conn.execute(
                text(
                    "UPDATE gateway.rematches SET status = 'declined', decided_at = now() "
                    "WHERE id = :id"
                ),
                {"id": rematch_id},
            )
        elif accept:
            waiting = (
                await conn.execute(
                    text(
                        "SELECT count(*) FROM gateway.rematch_players "
                        "WHERE rematch_id = :id AND answer <> 'accepted'"
                    ),
                    {"id": rematch_id},
                )
            ).scalar_one()
            if waiting == 0:
                await conn.execute(
                    text(
                        "UPDATE gateway.rematches SET status = 'seating', decided_at = now() "
                        "WHERE id = :id"
                    ),
                    {"id": rematch_id},
                )
                claimed = True
        found = await _one(conn, "id = :id", {"id": rematch_id})
    return found, claimed


async def record_outcome(
    db: AsyncEngine, rematch_id: int, *, table_id: str | None, failure: str | None
) -> Rematch | None:
    """After the seating: the table it seated them at, or why it failed."""
    async with db.begin() as conn:
        await conn.execute(
            text(
                "UPDATE gateway.rematches SET table_id = :table, failure = :failure, "
                "status = CASE WHEN CAST(:failure AS TEXT) IS NULL THEN 'seated' "
                "ELSE 'failed' END WHERE id = :id AND status = 'seating'"
            ),
            {"id": rematch_id, "table": table_id, "failure": failure},
        )
        return await _one(conn, "id = :id", {"id": rematch_id})
