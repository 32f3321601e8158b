"""Support: find a player and see his account, sessions, matches and statement; replay his
finished hands; keep dispute notes; propose refunds, which finance decides (`api.refunds`).

Support reads; admins read too. Only support changes anything here (a dispute, a note, a
refund proposal), and every change is written to the staff audit log in the same transaction.
Reads are not logged. Nothing here moves money: a refund is a proposal until a finance user,
never its proposer, approves it.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
import sqlalchemy as sa
from litestar import Request, get, post
from litestar.params import FromPath, FromQuery, JSONBody, Parameter
from sqlalchemy.ext.asyncio import AsyncConnection

from api import limits, refunds, staff_audit
from api.backends import call, get_backends
from api.guards import CurrentUser, GuardedController, requires_role
from api.openapi_errors import READ_ERRORS, WRITE_ERRORS
from api.routes_audit import DEAL_ID_RE, MATCH_ID_RE, checked_deal_id
from api.routes_money import PageSize, Version, Wallet, _statement, wallet_of
from api.schema import dispute_notes, disputes, sessions, users
from api.staff_audit import Reason
from services.common.errors import ServiceError
from services.engine.audit_contract import TranscriptList
from services.engine.contract import PublicMatchState
from services.ledger.contract import MAX_STATEMENT_PAGE, StatementPage

PLAYER_RE = re.compile(r"^[a-z0-9_.-]{3,32}$")
MAX_SEARCH_PAGE = 50
MAX_SESSIONS_SHOWN = 50
MAX_DISPUTES_SHOWN = 100
MAX_NOTES_PER_DISPUTE = 500
MAX_OPEN_DISPUTES_PER_PLAYER = 20
MAX_TRANSCRIPTS_PAGE = 100

PlayerName = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9_.-]{3,32}$")]
MatchId = Annotated[str, msgspec.Meta(pattern=MATCH_ID_RE.pattern)]
DealId = Annotated[str, msgspec.Meta(pattern=DEAL_ID_RE.pattern)]


class PlayerSummary(msgspec.Struct, frozen=True):
    id: str
    display_name: str
    status: str
    excluded_until: datetime | None
    created_at: datetime


class PlayerPage(msgspec.Struct, frozen=True):
    players: list[PlayerSummary]
    # The `after` of the next page (players are in id order); null on the last.
    next: str | None


class SessionInfo(msgspec.Struct, frozen=True):
    """A session as support sees it: never its token, hash or CSRF token."""

    kind: str
    label: str
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None
    live: bool


class Note(msgspec.Struct, frozen=True):
    id: int
    author: str
    created_at: datetime
    body: str


class Dispute(msgspec.Struct, frozen=True):
    id: int
    player: str
    opened_by: str
    match_id: str | None
    deal_id: str | None
    status: str
    created_at: datetime
    closed_by: str | None
    closed_at: datetime | None
    close_reason: str | None
    notes: list[Note]


class PlayerProfile(msgspec.Struct, frozen=True):
    id: str
    display_name: str
    status: str
    excluded_until: datetime | None
    created_at: datetime
    wallet: Wallet
    # Newest first, at most MAX_SESSIONS_SHOWN.
    sessions: list[SessionInfo]
    disputes: list[Dispute]
    refunds: list[refunds.Proposal]
    # The player's responsible-play limits, reminder and cool-off as they apply now.
    limits: limits.PlayerLimits


class SupportHand(msgspec.Struct, frozen=True):
    transcript: dict[str, Any]
    # The player at each seat (null: a CPU seat); empty when the engine no longer knows.
    players: list[str | None]


class OpenDispute(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    player: PlayerName
    # What the player says, in support's words: the dispute's first note.
    reason: Reason
    match_id: MatchId | None = None
    deal_id: DealId | None = None


class AddNote(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    note: Reason


class CloseDispute(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    reason: Reason


# A player as the search and the profile show him.
SUMMARY_COLUMNS = tuple(users.c[name] for name in PlayerSummary.__struct_fields__)


def _player(player: str) -> str:
    if PLAYER_RE.match(player) is None:
        raise ServiceError(400, "invalid_request", "player: 3 to 32 of a-z 0-9 _ . -")
    return player


async def _player_row(db: Any, player: str) -> Any:
    async with db.connect() as conn:
        row = (
            await conn.execute(
                sa.select(*SUMMARY_COLUMNS).where(
                    users.c.id == _player(player), users.c.role == "player"
                )
            )
        ).first()
    if row is None:
        raise ServiceError(404, "no_such_player", "no player with that name")
    return row


def _like_prefix(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def search_query(q: str, after: str, limit: int) -> sa.Select[Any]:
    """The search's statement. Each arm of the OR is a LIKE prefix that its own index serves
    (`users_id_prefix`, `users_display_name_prefix` in api/schema.py), so a search reads the
    matching rows, not the table."""
    if not q.strip():
        raise ServiceError(400, "invalid_request", "q: a user name or the start of a name")
    prefix = _like_prefix(q.strip().lower())
    query = (
        sa.select(*SUMMARY_COLUMNS)
        .where(
            users.c.role == "player",
            sa.or_(
                users.c.id.like(prefix, escape="\\"),
                sa.func.lower(users.c.display_name).like(prefix, escape="\\"),
            ),
        )
        .order_by(users.c.id)
        .limit(limit + 1)
    )
    # `id > ''` would be true of every row yet tempts the planner into the primary key
    return query.where(users.c.id > after) if after else query


async def search_players(db: Any, q: str, after: str, limit: int) -> PlayerPage:
    """Players whose id is `q` or starts with it, or whose display name starts with it
    (case-insensitive), in id order."""
    query = search_query(q, after, limit)
    async with db.connect() as conn:
        rows = (await conn.execute(query)).all()
    found = [PlayerSummary(**row._asdict()) for row in rows[:limit]]
    return PlayerPage(players=found, next=found[-1].id if len(rows) > limit and found else None)


async def _sessions(conn: AsyncConnection, player: str) -> list[SessionInfo]:
    live = sa.and_(sessions.c.revoked_at.is_(None), sessions.c.expires_at > sa.func.now())
    rows = (
        await conn.execute(
            sa.select(
                sessions.c.kind,
                sessions.c.label,
                sessions.c.created_at,
                sessions.c.expires_at,
                sessions.c.revoked_at,
                live.label("live"),
            )
            .where(sessions.c.user_id == player)
            .order_by(sessions.c.created_at.desc())
            .limit(MAX_SESSIONS_SHOWN)
        )
    ).all()
    return [SessionInfo(**row._asdict()) for row in rows]


async def _disputes(
    conn: AsyncConnection,
    *,
    player: str | None = None,
    dispute_id: int | None = None,
    status: str | None = None,
    before: int | None = None,
) -> list[Dispute]:
    """Disputes with their notes, newest first, at most `MAX_DISPUTES_SHOWN` (two queries)."""
    query = sa.select(disputes).order_by(disputes.c.id.desc()).limit(MAX_DISPUTES_SHOWN)
    if player is not None:
        query = query.where(disputes.c.player == player)
    if dispute_id is not None:
        query = query.where(disputes.c.id == dispute_id)
    if status is not None:
        query = query.where(disputes.c.status == status)
    if before is not None:
        query = query.where(disputes.c.id < before)
    rows = (await conn.execute(query)).mappings().all()
    if not rows:
        return []
    notes = (
        (
            await conn.execute(
                sa.select(dispute_notes)
                .where(dispute_notes.c.dispute_id.in_([r["id"] for r in rows]))
                .order_by(dispute_notes.c.id)
            )
        )
        .mappings()
        .all()
    )
    by_dispute: dict[int, list[Note]] = {}
    for n in notes:
        by_dispute.setdefault(n["dispute_id"], []).append(
            Note(id=n["id"], author=n["author"], created_at=n["created_at"], body=n["body"])
        )
    return [Dispute(**dict(r), notes=by_dispute.get(r["id"], [])) for r in rows]


async def _dispute(conn: AsyncConnection, dispute_id: int) -> Dispute:
    found = await _disputes(conn, dispute_id=dispute_id)
    if not found:
        raise ServiceError(404, "no_such_dispute", "no dispute with that id")
    return found[0]


async def _add_note(conn: AsyncConnection, dispute_id: int, author: str, body: str) -> int:
    note_id: int = (
        await conn.execute(
            sa.insert(dispute_notes)
            .values(dispute_id=dispute_id, author=author, body=body.strip())
            .returning(dispute_notes.c.id)
        )
    ).scalar_one()
    return note_id


async def _locked_open_dispute(conn: AsyncConnection, dispute_id: int) -> Any:
    row = (
        await conn.execute(
            sa.select(disputes.c.id, disputes.c.player, disputes.c.status)
            .where(disputes.c.id == dispute_id)
            .with_for_update()
        )
    ).first()
    if row is None:
        raise ServiceError(404, "no_such_dispute", "no dispute with that id")
    if row.status != "open":
        raise ServiceError(409, "dispute_closed", "the dispute is closed")
    return row


DisputeId = Annotated[int, Parameter(ge=1, le=2**62)]


SUPPORT_ONLY = [requires_role("support")]


class SupportController(GuardedController):
    """What support (and admins) see of a player, and support's changes. Reads are not
    logged."""

    guards = [requires_role("support", "admin")]

    @get("/api/support/players", tags=["support"], responses=READ_ERRORS)
    async def find_players(
        self,
        request: Request[Any, Any, Any],
        q: Annotated[str, Parameter(min_length=1, max_length=40)],
        after: Annotated[str, Parameter(pattern=r"^[a-z0-9_.-]{0,32}$")] = "",
        limit: Annotated[int, Parameter(ge=1, le=MAX_SEARCH_PAGE)] = 20,
    ) -> PlayerPage:
        """Players by id or by the start of their id or display name, a page at a time in id
        order (`after`: the previous page's `next`)."""
        return await search_players(request.app.state.db, q, after, limit)

    @get("/api/support/players/{player:str}", tags=["support"], responses=READ_ERRORS)
    async def profile(
        self, request: Request[Any, Any, Any], player: FromPath[str]
    ) -> PlayerProfile:
        """A player's account, wallet, sessions, disputes and refund proposals."""
        row = await _player_row(request.app.state.db, player)
        async with request.app.state.db.connect() as conn:
            found_sessions = await _sessions(conn, row.id)
            found_disputes = await _disputes(conn, player=row.id)
            proposals = await refunds.proposals_of(conn, player=row.id)
        return PlayerProfile(
            **row._asdict(),
            wallet=await wallet_of(request.app.state, row.id),
            sessions=found_sessions,
            disputes=found_disputes,
            refunds=proposals,
            limits=await limits.limits_of(request.app.state.db, row.id),
        )

    @get("/api/support/players/{player:str}/matches", tags=["support"], responses=READ_ERRORS)
    async def matches(
        self,
        request: Request[Any, Any, Any],
        player: FromPath[str],
        after: Annotated[int | None, Parameter(ge=0, le=2**40)] = None,
    ) -> TranscriptList:
        """The player's finished hands, newest first, 100 a page (`after`: the previous page's
        `next`)."""
        row = await _player_row(request.app.state.db, player)
        params: dict[str, Any] = {"player": row.id, "limit": MAX_TRANSCRIPTS_PAGE}
        if after is not None:
            params["after"] = after
        engine = get_backends(request.app.state).engine
        return await call(
            "engine", engine.get("/internal/audit/transcripts", TranscriptList, params)
        )

    @get("/api/support/players/{player:str}/statement", tags=["support"], responses=READ_ERRORS)
    async def statement(
        self,
        request: Request[Any, Any, Any],
        player: FromPath[str],
        after: Version = 0,
        limit: PageSize = MAX_STATEMENT_PAGE,
    ) -> StatementPage:
        """The player's wallet statement, a page at a time (as `/api/me/statement`)."""
        row = await _player_row(request.app.state.db, player)
        return await _statement(request.app.state, row.id, None, None, after, limit)

    @get("/api/support/transcripts/{deal_id:path}", tags=["support"], responses=READ_ERRORS)
    async def transcript(
        self, request: Request[Any, Any, Any], deal_id: FromPath[str]
    ) -> SupportHand:
        """A finished hand's transcript, to replay it (the engine refuses a live hand), with
        the players by seat (the log names them by pseudonyms)."""
        deal = checked_deal_id(deal_id.lstrip("/"))
        engine = get_backends(request.app.state).engine
        doc = await call(
            "engine", engine.get(f"/internal/audit/transcripts/{deal}", dict[str, Any])
        )
        players: list[str | None] = []
        match_id = deal.rsplit("/", 1)[0]
        if "/" in deal and MATCH_ID_RE.match(match_id) is not None:
            try:
                state = await call(
                    "engine", engine.get(f"/internal/matches/{match_id}", PublicMatchState)
                )
                players = [s.player_id for s in sorted(state.seats, key=lambda s: s.seat)]
            except ServiceError as exc:
                # a match the engine no longer holds still replays, seats unnamed
                if exc.status != 404:
                    raise
        return SupportHand(transcript=doc, players=players)

    @get("/api/support/disputes", tags=["support"], responses=READ_ERRORS)
    async def list_disputes(
        self,
        request: Request[Any, Any, Any],
        status: FromQuery[Literal["open", "closed"] | None] = None,
        before: Annotated[int | None, Parameter(ge=1, le=2**62)] = None,
    ) -> list[Dispute]:
        """Disputes newest first, at most 100 (`before`: the last one's id, for older ones)."""
        async with request.app.state.db.connect() as conn:
            return await _disputes(conn, status=status, before=before)

    @get("/api/support/disputes/{dispute_id:int}", tags=["support"], responses=READ_ERRORS)
    async def get_dispute(
        self, request: Request[Any, Any, Any], dispute_id: FromPath[DisputeId]
    ) -> Dispute:
        async with request.app.state.db.connect() as conn:
            return await _dispute(conn, dispute_id)

    # Support's changes (disputes, their notes, refund proposals): support only, each one in
    # the staff audit log with its reason.

    @post(
        "/api/support/disputes",
        status_code=201,
        tags=["support"],
        responses=WRITE_ERRORS,
        guards=SUPPORT_ONLY,
    )
    async def open_dispute(
        self, user: CurrentUser, request: Request[Any, Any, Any], data: JSONBody[OpenDispute]
    ) -> Dispute:
        """Open a dispute for a player (optionally about one match or hand); `reason` is its
        first note."""
        row = await _player_row(request.app.state.db, data.player)
        async with request.app.state.db.begin() as conn:
            # One player's open disputes are bounded (serialised on his account row).
            await conn.execute(sa.select(users.c.id).where(users.c.id == row.id).with_for_update())
            count = (
                await conn.execute(
                    sa.select(sa.func.count()).where(
                        disputes.c.player == row.id, disputes.c.status == "open"
                    )
                )
            ).scalar_one()
            if count >= MAX_OPEN_DISPUTES_PER_PLAYER:
                raise ServiceError(
                    409, "too_many_disputes", "close some of this player's open disputes first"
                )
            dispute_id = (
                await conn.execute(
                    sa.insert(disputes)
                    .values(
                        player=row.id,
                        opened_by=user.id,
                        match_id=data.match_id,
                        deal_id=data.deal_id,
                    )
                    .returning(disputes.c.id)
                )
            ).scalar_one()
            await _add_note(conn, dispute_id, user.id, data.reason)
            await staff_audit.record(
                conn,
                user,
                "support.dispute_open",
                f"user:{row.id}",
                data.reason,
                {"dispute_id": dispute_id, "match_id": data.match_id, "deal_id": data.deal_id},
            )
            return await _dispute(conn, dispute_id)

    @post(
        "/api/support/disputes/{dispute_id:int}/notes",
        status_code=201,
        tags=["support"],
        responses=WRITE_ERRORS,
        guards=SUPPORT_ONLY,
    )
    async def add_note(
        self,
        user: CurrentUser,
        request: Request[Any, Any, Any],
        dispute_id: FromPath[DisputeId],
        data: JSONBody[AddNote],
    ) -> Dispute:
        """Append a note to an open dispute (notes are never edited or removed)."""
        async with request.app.state.db.begin() as conn:
            row = await _locked_open_dispute(conn, dispute_id)
            count = (
                await conn.execute(
                    sa.select(sa.func.count()).where(dispute_notes.c.dispute_id == dispute_id)
                )
            ).scalar_one()
            if count >= MAX_NOTES_PER_DISPUTE:
                raise ServiceError(409, "too_many_notes", "open a new dispute to go on")
            note_id = await _add_note(conn, dispute_id, user.id, data.note)
            await staff_audit.record(
                conn,
                user,
                "support.dispute_note",
                f"user:{row.player}",
                data.note,
                {"dispute_id": dispute_id, "note_id": note_id},
            )
            return await _dispute(conn, dispute_id)

    @post(
        "/api/support/disputes/{dispute_id:int}/close",
        status_code=200,
        tags=["support"],
        responses=WRITE_ERRORS,
        guards=SUPPORT_ONLY,
    )
    async def close_dispute(
        self,
        user: CurrentUser,
        request: Request[Any, Any, Any],
        dispute_id: FromPath[DisputeId],
        data: JSONBody[CloseDispute],
    ) -> Dispute:
        """Close an open dispute with the outcome told to the player."""
        async with request.app.state.db.begin() as conn:
            row = await _locked_open_dispute(conn, dispute_id)
            await conn.execute(
                sa.update(disputes)
                .where(disputes.c.id == dispute_id)
                .values(
                    status="closed",
                    closed_by=user.id,
                    closed_at=sa.func.now(),
                    close_reason=data.reason.strip(),
                )
            )
            await staff_audit.record(
                conn,
                user,
                "support.dispute_close",
                f"user:{row.player}",
                data.reason,
                {"dispute_id": dispute_id},
            )
            return await _dispute(conn, dispute_id)

    @post(
        "/api/support/refunds",
        status_code=201,
        tags=["support"],
        responses=WRITE_ERRORS,
        guards=SUPPORT_ONLY,
    )
    async def propose_refund(
        self,
        user: CurrentUser,
        request: Request[Any, Any, Any],
        data: JSONBody[refunds.ProposeRefund],
    ) -> refunds.Proposal:
        """Propose reversing one entry of the player's statement; finance decides."""
        await _player_row(request.app.state.db, data.player)
        return await refunds.propose(request.app.state, user, data)


ROUTES = [SupportController]
