"""The lobby: kinds and tiers, open tables, quick join, private tables, partners, CPU tables.

The player id sent to matchmaking is always the signed-in player's own. Naming a partner only
sends him an invitation (api/routes_invitations.py): he is seated, and held his stake, once he
accepts it in his own session; "play again" after a match is an invitation too. Every seat
passes `api.eligibility.check_may_sit` first, a paid one under the player's seating lock
(`api.eligibility.seating_lock`) held until matchmaking has answered.
"""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from litestar import Request, Response, get, post
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import FromPath, FromQuery, JSONBody, Parameter

from api import accounts, eligibility, invitations, limits
from api.accounts import Session, User
from api.backends import call, get_backends
from api.eligibility import (
    Eligible,
    account_refusal,
    check_may_sit,
    is_paid,
    seating_lock,
    stake_of,
)
from api.guards import CurrentSession, CurrentUser, GuardedController, requires_role, signed_in
from api.openapi_errors import READ_ERRORS, WRITE_ERRORS
from api.security import client_address
from services.common.errors import ServiceError
from services.common.logging import get_logger
from services.matchmaking.contract import (
    CreatePrivate,
    JoinByCode,
    JoinResult,
    KindList,
    Leave,
    LeaveResult,
    Lobby,
    PlayerTables,
    PlayVsCpu,
    QuickJoin,
    TableStatus,
)

Tier = Literal["free", "10", "20", "40", "80"]
KindId = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9-]{1,40}$")]
PlayerName = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9_.-]{3,32}$")]
InviteCode = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9]{4,16}$")]
TableId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
IdemKey = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.:-]{8,64}$")]

log = get_logger()


class JoinRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    kind: KindId
    tier: Tier
    partner: PlayerName | None = None
    idempotency_key: IdemKey | None = None


class CodeRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    invite_code: InviteCode
    partner: PlayerName | None = None
    idempotency_key: IdemKey | None = None


class CpuRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    kind: KindId
    idempotency_key: IdemKey | None = None


class LeaveRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    table_id: TableId
    idempotency_key: IdemKey | None = None


class SeatOut(msgspec.Struct, frozen=True):
    seat: int
    player: str | None
    bot: bool
    state: str | None


class TableOut(msgspec.Struct, frozen=True):
    """A table as a player may see it (no reservation or hold ids)."""

    table_id: str
    kind: str
    variant: str
    tier: str
    stake_cents: int
    currency: str
    seat_count: int
    pairs: bool
    private: bool
    vs_cpu: bool
    invite_code: str | None
    status: str
    seats: list[SeatOut]
    match_id: str | None
    my_seat: int | None


def table_out(t: TableStatus, me: str) -> TableOut:
    mine = next((s.seat for s in t.seats if s.player_id == me), None)
    return TableOut(
        table_id=t.table_id,
        kind=t.kind,
        variant=t.variant,
        tier=t.tier,
        stake_cents=t.stake_cents,
        currency=t.currency,
        seat_count=t.seat_count,
        pairs=t.pairs,
        private=t.private,
        vs_cpu=t.vs_cpu,
        # Only someone seated there sees a private table's code (to pass it to friends).
        invite_code=t.invite_code if mine is not None else None,
        status=t.status,
        seats=[SeatOut(s.seat, s.player_id, s.bot, s.state) for s in t.seats],
        match_id=t.match_id,
        my_seat=mine,
    )


def _key(request_key: str | None) -> str:
    return f"gw-{request_key or secrets.token_hex(12)}"


class PlayerAnswer(msgspec.Struct, frozen=True):
    player: str
    answer: str  # pending, accepted or declined


class InvitationOut(msgspec.Struct, frozen=True):
    """An invitation as one of its players sees it: a partner's (one invitee) or "play again"
    (`match_id`: everyone of that match). `table` is yours once seated."""

    invitation_id: int
    inviter: str
    invitees: list[str]
    op: str  # quick, private or code: the join it stands for
    kind: str | None
    tier: str | None
    invite_code: str | None
    match_id: str | None
    status: str  # pending, accepted, declined, cancelled, expired or failed
    failure: str | None
    table_id: str | None
    created_at: datetime
    expires_at: datetime
    players: list[PlayerAnswer]
    waiting_for: int
    my_answer: str
    sent_by_me: bool
    table: TableOut | None = None


def invitation_out(
    inv: invitations.Invitation, me: str, table: TableOut | None = None
) -> InvitationOut:
    return InvitationOut(
        invitation_id=inv.id,
        inviter=inv.inviter,
        invitees=inv.invitees(),
        op=inv.op,
        kind=inv.kind,
        tier=inv.tier,
        invite_code=inv.invite_code,
        match_id=inv.match_id,
        status="expired" if inv.expired else inv.status,
        failure=inv.failure,
        table_id=inv.table_id,
        created_at=inv.created_at,
        expires_at=inv.expires_at,
        players=[PlayerAnswer(p.player, p.answer) for p in inv.players],
        waiting_for=len(inv.waiting_for()),
        my_answer=inv.answer_of(me) or "pending",
        sent_by_me=inv.inviter == me,
        table=table,
    )


# A join that names a partner answers 202 with the invitation (nothing seated yet).
JOIN_RESPONSES: dict[int, ResponseSpec] = {
    **WRITE_ERRORS,
    202: ResponseSpec(
        data_container=InvitationOut,
        description="A partner was named: the invitation sent to him (nobody is seated yet)",
        generate_examples=False,
    ),
}
JoinAnswer = Response[TableOut | InvitationOut]


async def may_sit(
    request: Request[Any, Any, Any],
    player_id: str,
    acting: User,
    kind: str | None,
    tier: str | None,
    invitation: eligibility.Invitation | None = None,
    *,
    random_seat: bool = False,
) -> Eligible:
    """`check_may_sit` with this app's database and services."""
    backends = get_backends(request.app.state)
    return await check_may_sit(
        request.app.state.db,
        backends,
        player_id,
        acting,
        kind,
        tier,
        invitation=invitation,
        random_seat=random_seat,
        client_address=client_address(request),
    )


async def _invite(
    request: Request[Any, Any, Any],
    session: Session,
    partner: str,
    new: invitations.NewInvitation,
) -> JoinAnswer:
    """Naming a partner: store an invitation he may accept in his own session."""
    me = session.user
    if partner == me.id:
        raise ServiceError(400, "partner_is_self", "your partner must be someone else")
    other = await accounts.get_user(request.app.state.db, partner)
    if other is None or other.role != "player":
        raise ServiceError(404, "no_such_player", "no player with that name")
    # The inviter's own seat is checked now and again on accept; the partner's only on accept,
    # but an invitation he could not accept at all is refused at once.
    await may_sit(request, me.id, me, new.kind, new.tier)
    if new.kind is not None and new.tier is not None:
        _stake, pairs = stake_of(await get_backends(request.app.state).kinds(), new.kind, new.tier)
        if not pairs:
            raise ServiceError(400, "partner_not_pairs", "partners sit only at pairs tables")
    partner_refused = account_refusal(other, new.tier) is not None
    if not partner_refused and is_paid(new.tier):
        partner_refused = (
            await limits.limits_of(request.app.state.db, partner)
        ).cooling_off_until is not None
    if partner_refused:
        raise ServiceError(403, "partner_unavailable", "your partner cannot sit at this table now")
    ttl_s = request.app.state.settings.invitation_ttl_s
    inv, replayed = await invitations.create(request.app.state.db, new, ttl_s)
    if not replayed:
        log.info("invitation_created", invitation_id=inv.id, inviter=me.id, invitee=partner)
    return Response(invitation_out(inv, me.id), status_code=202)


def msgspec_table_ok(table_id: str) -> bool:
    import re

    return re.fullmatch(r"[A-Za-z0-9_-]{1,64}", table_id) is not None


async def joined(request: Request[Any, Any, Any], path: str, body: Any, me: str) -> TableOut:
    mm = get_backends(request.app.state).matchmaking
    result = await call("matchmaking", mm.post(path, body, JoinResult))
    return table_out(result.table, me)


async def _join_kind(
    request: Request[Any, Any, Any],
    session: Session,
    data: JoinRequest,
    path: str,
    op: invitations.Op,
    body_type: type[QuickJoin] | type[CreatePrivate],
) -> JoinAnswer:
    """A join that names a kind and tier (quick join or a new private table)."""
    me = session.user
    if data.partner is not None:
        new = invitations.NewInvitation(
            inviter=me.id,
            players=invitations.partner_seats(me.id, data.partner),
            op=op,
            kind=data.kind,
            tier=data.tier,
            idempotency_key=_key(data.idempotency_key),
        )
        return await _invite(request, session, data.partner, new)
    quick = body_type is QuickJoin
    async with seating_lock(request.app.state.db, [me.id], data.tier):
        eligible = await may_sit(request, me.id, me, data.kind, data.tier, random_seat=quick)
        key = _key(data.idempotency_key)
        body: QuickJoin | CreatePrivate
        if quick:
            body = QuickJoin(
                idempotency_key=key,
                player_id=me.id,
                kind=data.kind,
                tier=data.tier,
                unlisted=eligible.random_opponents_only,
            )
        else:
            body = CreatePrivate(
                idempotency_key=key, player_id=me.id, kind=data.kind, tier=data.tier
            )
        return Response(await joined(request, path, body, me.id))


class CatalogueController(GuardedController):
    """Table kinds and tiers: anyone signed in."""

    guards = [signed_in]

    @get("/api/lobby/kinds", tags=["lobby"], responses=READ_ERRORS)
    async def kinds(self, request: Request[Any, Any, Any]) -> KindList:
        """Table kinds and the stake tiers each is offered at."""
        return await get_backends(request.app.state).kinds()


class LobbyController(GuardedController):
    """Finding and taking a seat: players only."""

    guards = [requires_role("player")]

    @get("/api/lobby/tables", tags=["lobby"], responses=READ_ERRORS)
    async def open_tables(
        self,
        request: Request[Any, Any, Any],
        kind: Annotated[str | None, Parameter(pattern=r"^[a-z0-9-]{1,40}$")] = None,
        tier: FromQuery[Tier | None] = None,
    ) -> Lobby:
        """Open public tables with free seats."""
        params = {k: v for k, v in (("kind", kind), ("tier", tier)) if v is not None}
        mm = get_backends(request.app.state).matchmaking
        return await call("matchmaking", mm.get("/v1/lobby", Lobby, params=params))

    @get("/api/lobby/mine", tags=["lobby"], responses=READ_ERRORS)
    async def my_tables(self, user: CurrentUser, request: Request[Any, Any, Any]) -> list[TableOut]:
        """Tables where you hold a seat (with the match id once the table has started)."""
        mm = get_backends(request.app.state).matchmaking
        found = await call("matchmaking", mm.get(f"/v1/players/{user.id}/tables", PlayerTables))
        return [table_out(t, user.id) for t in found.tables[:50]]

    @get("/api/lobby/tables/{table_id:str}", tags=["lobby"], responses=READ_ERRORS)
    async def table_status(
        self, user: CurrentUser, request: Request[Any, Any, Any], table_id: FromPath[str]
    ) -> TableOut:
        if not msgspec_table_ok(table_id):
            raise ServiceError(400, "invalid_request", "bad table id")
        mm = get_backends(request.app.state).matchmaking
        t = await call("matchmaking", mm.get(f"/v1/tables/{table_id}", TableStatus))
        out = table_out(t, user.id)
        if t.private and out.my_seat is None:
            raise ServiceError(404, "table_not_found", "no such table")
        return out

    @post("/api/lobby/quick-join", status_code=200, tags=["lobby"], responses=JOIN_RESPONSES)
    async def quick_join(
        self, session: CurrentSession, request: Request[Any, Any, Any], data: JSONBody[JoinRequest]
    ) -> JoinAnswer:
        """Sit at the fullest waiting table of that kind and tier (or a new one).

        With a `partner`: 202 and an invitation; both sit across once he accepts it."""
        return await _join_kind(request, session, data, "/v1/join/quick", "quick", QuickJoin)

    @post("/api/lobby/private", status_code=200, tags=["lobby"], responses=JOIN_RESPONSES)
    async def create_private(
        self, session: CurrentSession, request: Request[Any, Any, Any], data: JSONBody[JoinRequest]
    ) -> JoinAnswer:
        """Open a private table; share its invite code.

        With a `partner`: 202 and an invitation; the table opens once he accepts it."""
        return await _join_kind(
            request, session, data, "/v1/tables/private", "private", CreatePrivate
        )

    @post("/api/lobby/join-code", status_code=200, tags=["lobby"], responses=JOIN_RESPONSES)
    async def join_by_code(
        self, session: CurrentSession, request: Request[Any, Any, Any], data: JSONBody[CodeRequest]
    ) -> JoinAnswer:
        """Sit at a private table by its invite code.

        With a `partner`: 202 and an invitation; both sit once he accepts it."""
        me = session.user
        code = data.invite_code.upper()
        key = _key(data.idempotency_key)
        if data.partner is not None:
            new = invitations.NewInvitation(
                inviter=me.id,
                players=invitations.partner_seats(me.id, data.partner),
                op="code",
                invite_code=code,
                idempotency_key=key,
            )
            return await _invite(request, session, data.partner, new)
        # A private table's tier is known only to matchmaking: checked (and locked) as paid.
        async with seating_lock(request.app.state.db, [me.id], None):
            await may_sit(request, me.id, me, None, None)
            body = JoinByCode(idempotency_key=key, player_id=me.id, invite_code=code)
            return Response(await joined(request, "/v1/join/code", body, me.id))

    @post("/api/lobby/cpu", status_code=200, tags=["lobby"], responses=WRITE_ERRORS)
    async def play_vs_cpu(
        self, user: CurrentUser, request: Request[Any, Any, Any], data: JSONBody[CpuRequest]
    ) -> TableOut:
        """A free table against CPU players, started at once."""
        await may_sit(request, user.id, user, data.kind, "free", random_seat=True)
        body = PlayVsCpu(
            idempotency_key=_key(data.idempotency_key), player_id=user.id, kind=data.kind
        )
        return await joined(request, "/v1/tables/cpu", body, user.id)

    @post("/api/lobby/leave", status_code=200, tags=["lobby"], responses=WRITE_ERRORS)
    async def leave(
        self, user: CurrentUser, request: Request[Any, Any, Any], data: JSONBody[LeaveRequest]
    ) -> LeaveResult:
        """Leave a table before it starts (the stake is released)."""
        body = Leave(
            idempotency_key=_key(data.idempotency_key),
            player_id=user.id,
            table_id=data.table_id,
        )
        mm = get_backends(request.app.state).matchmaking
        return await call("matchmaking", mm.post("/v1/leave", body, LeaveResult))


ROUTES = [CatalogueController, LobbyController]
