"""Invitations: list yours, propose "play again" after a match, accept or decline one sent to
you, cancel one you sent.

A partner invitation is made by a join that names a partner (api/routes_lobby.py); "play again"
(`POST /api/invitations/rematch`) invites everyone of a finished match to the same game again.
Both are one mechanism (api/invitations.py). Accepting is each invitee's consent, given in his
own session, and runs `check_may_sit` for him. The last acceptance also checks every other
player again (on his recorded acceptance: a refusal reads `partner_unavailable` and leaves the
invitation open) before it claims the invitation and seats everyone: the inviter's team first
(the join the invitation stands for), any other team by the new private table's code. The
joins' idempotency keys are the invitation's, so accepting again after a 503 replays them; a
refusal midway releases the seats already taken, and the invitation is `failed` with its reason.
An acceptance at a paid tier holds every player's seating lock from its checks to the seating.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Request, Response, get, post
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import FromPath, JSONBody, Parameter

from api import invitations
from api.accounts import User
from api.backends import call, get_backends
from api.eligibility import seating_lock
from api.guards import CurrentSession, CurrentUser, GuardedController, requires_role
from api.invitations import Invitation, Seat
from api.openapi_errors import READ_ERRORS, WRITE_ERRORS
from api.routes_lobby import InvitationOut, TableOut, invitation_out, may_sit, table_out
from api.routes_table import seat_of
from services.common.errors import ServiceError
from services.common.logging import get_logger
from services.matchmaking.contract import (
    CreatePrivate,
    JoinByCode,
    JoinResult,
    KindList,
    Leave,
    LeaveResult,
    QuickJoin,
    TableStatus,
)

log = get_logger()

InvitationId = Annotated[int, Parameter(ge=1, le=invitations.MAX_ID)]
MatchId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]


class RematchRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    match_id: MatchId


class InvitationList(msgspec.Struct, frozen=True):
    """Your open invitations: sent to you (accept or decline) and sent by you (cancel); an
    accepted one without a table had its seating cut short (accept it again)."""

    incoming: list[InvitationOut]
    outgoing: list[InvitationOut]


def _closed(inv: Invitation) -> ServiceError:
    if inv.expired or inv.status == "expired":
        return ServiceError(409, "invitation_expired", "that invitation has expired")
    return ServiceError(409, "invitation_closed", f"that invitation is {inv.status}")


async def _mine(request: Request[Any, Any, Any], invitation_id: int, me: str) -> Invitation:
    """The invitation if `me` is one of its players (expired ones marked); 404 otherwise."""
    db = request.app.state.db
    found = await invitations.get(db, invitation_id)
    if found is None or me not in found.player_ids():
        raise ServiceError(404, "invitation_not_found", "no such invitation")
    if found.expired:
        await invitations.expire_due(db, me)
        found = await invitations.get(db, invitation_id) or found
    return found


def kind_of(kinds: KindList, variant: str, options: dict[str, Any], seat_count: int) -> str:
    """The table kind a match was played as (its variant, options and seat count)."""
    for info in kinds.kinds:
        if (
            info.variant == variant
            and info.seat_count == seat_count
            and all(options.get(k) == v for k, v in info.options.items())
        ):
            return info.kind
    raise ServiceError(409, "kind_not_offered", "that game is not offered any more")


def rematch_seats(seats: dict[int, str], proposer: str, pairs: bool) -> list[Seat]:
    """Everyone of a match at his seat; partners (seats half the table apart) in one team, the
    proposer's team numbered 0 so that it opens the table."""
    half = len(seats) // 2
    team = {s: (s % half if pairs else s) for s in seats}
    mine = next(team[s] for s, p in seats.items() if p == proposer)
    swap = {mine: 0, 0: mine}
    return [Seat(p, s, swap.get(team[s], team[s])) for s, p in sorted(seats.items())]


async def _leave_all(
    request: Request[Any, Any, Any], key: str, seated: list[tuple[str, str]]
) -> None:
    mm = get_backends(request.app.state).matchmaking
    for player, table_id in seated:
        leave = Leave(idempotency_key=f"{key}-leave-{player}", player_id=player, table_id=table_id)
        await call("matchmaking", mm.post("/v1/leave", leave, LeaveResult))


async def _seat_all(request: Request[Any, Any, Any], inv: Invitation, me: str) -> TableOut:
    """The joins an accepted invitation stands for; its outcome is recorded on it."""
    mm = get_backends(request.app.state).matchmaking
    db = request.app.state.db
    key = f"gw-inv-{inv.id}"
    teams = inv.teams()
    seated: list[tuple[str, str]] = []  # (player, table) already holding a seat
    try:
        first = teams[0]
        partner = first[1] if len(first) > 1 else None
        body: QuickJoin | CreatePrivate | JoinByCode
        if inv.op == "code" and inv.invite_code is not None:
            path = "/v1/join/code"
            body = JoinByCode(
                idempotency_key=f"{key}-0",
                player_id=first[0],
                invite_code=inv.invite_code,
                partner_id=partner,
            )
        elif inv.op in ("quick", "private") and inv.kind is not None and inv.tier is not None:
            path = "/v1/join/quick" if inv.op == "quick" else "/v1/tables/private"
            body_type = QuickJoin if inv.op == "quick" else CreatePrivate
            body = body_type(
                idempotency_key=f"{key}-0",
                player_id=first[0],
                kind=inv.kind,
                tier=inv.tier,  # type: ignore[arg-type]  # the table's CHECK keeps it a Tier
                partner_id=partner,
            )
        else:
            raise ValueError(f"invitation {inv.id} has no join to stand for")
        table: TableStatus = (await call("matchmaking", mm.post(path, body, JoinResult))).table
        seated += [(p, table.table_id) for p in first]
        for n, team in enumerate(teams[1:], start=1):
            if table.invite_code is None:
                raise ServiceError(409, "table_not_private", "the new table has no code")
            join = JoinByCode(
                idempotency_key=f"{key}-{n}",
                player_id=team[0],
                invite_code=table.invite_code,
                partner_id=team[1] if len(team) > 1 else None,
            )
            table = (await call("matchmaking", mm.post("/v1/join/code", join, JoinResult))).table
            seated += [(p, table.table_id) for p in team]
    except ServiceError as exc:
        if exc.status < 500:
            if len(teams) > 1:
                await _leave_all(request, key, seated)
            await invitations.record_outcome(db, inv.id, table_id=None, failure=exc.code[:64])
            log.info("invitation_seating_refused", invitation_id=inv.id, code=exc.code)
        raise
    await invitations.record_outcome(db, inv.id, table_id=table.table_id, failure=None)
    log.info("invitation_seated", invitation_id=inv.id, table_id=table.table_id)
    return table_out(table, me)


async def _check_others(
    request: Request[Any, Any, Any], inv: Invitation, me: User, *, claimed: bool
) -> None:
    """Every other player again, now, on his recorded acceptance. A refusal fails a claimed
    invitation; an unclaimed one stays open (nothing was decided)."""
    for other in inv.player_ids():
        if other == me.id:
            continue
        try:
            await may_sit(request, other, me, inv.kind, inv.tier, invitation=inv)
        except ServiceError as exc:
            if claimed and exc.status < 500:
                await invitations.record_outcome(
                    request.app.state.db, inv.id, table_id=None, failure=exc.code[:64]
                )
            raise


async def _table_of(request: Request[Any, Any, Any], table_id: str, me: str) -> TableOut:
    mm = get_backends(request.app.state).matchmaking
    return table_out(await call("matchmaking", mm.get(f"/v1/tables/{table_id}", TableStatus)), me)


async def _accept(request: Request[Any, Any, Any], inv: Invitation, me: User) -> InvitationOut:
    """Accept under every player's seating lock (in one fixed order: two invitations with
    players in common cannot deadlock), so the checks and the holds of the last acceptance
    are not interleaved with another seating of any of them."""
    async with seating_lock(request.app.state.db, inv.player_ids(), inv.tier):
        # read again under the locks: another acceptance may have seated everyone meanwhile
        return await _accept_locked(request, await _mine(request, inv.id, me.id), me)


async def _accept_locked(
    request: Request[Any, Any, Any], inv: Invitation, me: User
) -> InvitationOut:
    db = request.app.state.db
    if inv.expired or inv.status not in ("pending", "accepted"):
        raise _closed(inv)
    if me.id == inv.inviter and inv.status == "pending":
        raise ServiceError(403, "not_invitee", "only an invited player may accept")
    if inv.status == "accepted" and inv.table_id is not None:
        return invitation_out(inv, me.id, await _table_of(request, inv.table_id, me.id))
    if inv.status == "accepted":
        # A seating cut short by a failing service: everyone again, then its joins replayed.
        await may_sit(request, me.id, me, inv.kind, inv.tier)
        await _check_others(request, inv, me, claimed=True)
    else:
        await may_sit(request, me.id, me, inv.kind, inv.tier)
        last = inv.waiting_for() in ([], [me.id])
        if last:
            await _check_others(request, inv, me, claimed=False)
        done, claimed = await invitations.answer(db, inv.id, me.id, accept=True)
        if done is None:
            raise _closed(await _mine(request, inv.id, me.id))
        log.info("invitation_accepted", invitation_id=inv.id, by=me.id)
        if not claimed:
            return invitation_out(done, me.id)
        if not last:  # the others answered meanwhile: checked now, after the claim
            await _check_others(request, done, me, claimed=True)
        inv = done
    table = await _seat_all(request, inv, me.id)
    return invitation_out(await _mine(request, inv.id, me.id), me.id, table)


# Proposing a match another player has proposed already is an acceptance: 200, not 201.
REMATCH_RESPONSES: dict[int, ResponseSpec] = {
    **WRITE_ERRORS,
    200: ResponseSpec(
        data_container=InvitationOut,
        description="Another player proposed it first: this was your acceptance",
        generate_examples=False,
    ),
}


class InvitationController(GuardedController):
    """Invitations to sit together: players only."""

    guards = [requires_role("player")]

    @get("/api/invitations", tags=["lobby"], responses=READ_ERRORS)
    async def my_invitations(
        self, user: CurrentUser, request: Request[Any, Any, Any]
    ) -> InvitationList:
        """Open invitations sent to you and by you: pending ones (expired ones are dropped),
        and accepted ones whose seating was cut short (`accepted`, no `table_id`): accept
        one again to replay it."""
        incoming, outgoing = await invitations.pending_of(request.app.state.db, user.id)
        return InvitationList(
            incoming=[invitation_out(i, user.id) for i in incoming],
            outgoing=[invitation_out(i, user.id) for i in outgoing],
        )

    @get("/api/invitations/{invitation_id:int}", tags=["lobby"], responses=READ_ERRORS)
    async def invitation_status(
        self, user: CurrentUser, request: Request[Any, Any, Any], invitation_id: InvitationId
    ) -> InvitationOut:
        """One invitation you sent or received: who has answered, its outcome once decided."""
        return invitation_out(await _mine(request, invitation_id, user.id), user.id)

    @get("/api/invitations/by-match/{match_id:str}", tags=["lobby"], responses=READ_ERRORS)
    async def invitation_of_match(
        self, user: CurrentUser, request: Request[Any, Any, Any], match_id: FromPath[str]
    ) -> InvitationOut:
        """The "play again" invitation of a match you played (404 while there is none)."""
        found = await invitations.get_by_match(request.app.state.db, match_id[:128])
        if found is None or user.id not in found.player_ids():
            raise ServiceError(404, "invitation_not_found", "no invitation for that match")
        return invitation_out(await _mine(request, found.id, user.id), user.id)

    @post("/api/invitations/rematch", status_code=201, tags=["lobby"], responses=REMATCH_RESPONSES)
    async def play_again(
        self,
        session: CurrentSession,
        request: Request[Any, Any, Any],
        data: JSONBody[RematchRequest],
    ) -> Response[InvitationOut]:
        """Invite everyone of the match you just played to the same game again; 201.

        When another player of that match proposed it first, this is your acceptance (200)."""
        me = session.user
        backends = get_backends(request.app.state)
        db = request.app.state.db
        existing = await invitations.get_by_match(db, data.match_id)
        if existing is None:
            _seat, state = await seat_of(backends, data.match_id, me.id)
            if state.status not in ("finished", "void"):
                raise ServiceError(409, "match_not_over", "that match is still being played")
            if any(s.player_id is None for s in state.seats):
                raise ServiceError(
                    400, "rematch_needs_players", "only a match between players can be replayed"
                )
            seats = {s.seat: str(s.player_id) for s in state.seats}
            if len(set(seats.values())) < 2:
                raise ServiceError(400, "rematch_needs_players", "nobody else to play with")
            kinds = await backends.kinds()
            kind = kind_of(kinds, state.variant, state.options, len(state.seats))
            pairs = next(k.pairs for k in kinds.kinds if k.kind == kind)
            await may_sit(request, me.id, me, kind, state.tier)
            new = invitations.NewInvitation(
                inviter=me.id,
                players=rematch_seats(seats, me.id, pairs),
                op="private",
                kind=kind,
                tier=state.tier,
                match_id=data.match_id,
            )
            ttl_s = request.app.state.settings.invitation_ttl_s
            inv, replayed = await invitations.create(db, new, ttl_s)
            if not replayed:
                log.info("rematch_proposed", invitation_id=inv.id, match_id=data.match_id)
                return Response(invitation_out(inv, me.id), status_code=201)
            existing = inv
        if me.id not in existing.player_ids():
            raise ServiceError(404, "match_not_found", "no such match of yours")
        found = await _mine(request, existing.id, me.id)
        if me.id == found.inviter:
            return Response(invitation_out(found, me.id), status_code=200)
        return Response(await _accept(request, found, me), status_code=200)

    @post(
        "/api/invitations/{invitation_id:int}/accept",
        status_code=200,
        tags=["lobby"],
        responses=WRITE_ERRORS,
    )
    async def accept(
        self, session: CurrentSession, request: Request[Any, Any, Any], invitation_id: InvitationId
    ) -> InvitationOut:
        """Accept an invitation sent to you: you are checked now; the last acceptance checks
        everyone again and seats them all (`table` is yours)."""
        get_backends(request.app.state)  # 503 before any change while the gateway is starting
        inv = await _mine(request, invitation_id, session.user.id)
        return await _accept(request, inv, session.user)

    @post(
        "/api/invitations/{invitation_id:int}/decline",
        status_code=200,
        tags=["lobby"],
        responses=WRITE_ERRORS,
    )
    async def decline(
        self, user: CurrentUser, request: Request[Any, Any, Any], invitation_id: InvitationId
    ) -> InvitationOut:
        """Decline an invitation sent to you: it ends for everyone (nobody was seated)."""
        db = request.app.state.db
        inv = await _mine(request, invitation_id, user.id)
        if inv.inviter == user.id:
            raise ServiceError(403, "not_invitee", "only an invited player may decline")
        done, _claimed = await invitations.answer(db, inv.id, user.id, accept=False)
        if done is None or done.status != "declined":
            raise _closed(await _mine(request, invitation_id, user.id))
        log.info("invitation_declined", invitation_id=inv.id, by=user.id)
        return invitation_out(done, user.id)

    @post(
        "/api/invitations/{invitation_id:int}/cancel",
        status_code=200,
        tags=["lobby"],
        responses=WRITE_ERRORS,
    )
    async def cancel(
        self, user: CurrentUser, request: Request[Any, Any, Any], invitation_id: InvitationId
    ) -> InvitationOut:
        """Cancel an invitation you sent while it is pending."""
        inv = await _mine(request, invitation_id, user.id)
        if inv.inviter != user.id:
            raise ServiceError(403, "not_inviter", "only the player who sent it may cancel")
        done = await invitations.cancel(request.app.state.db, inv.id, user.id)
        if done is None:
            raise _closed(await _mine(request, invitation_id, user.id))
        log.info("invitation_cancelled", invitation_id=inv.id, by=user.id)
        return invitation_out(done, user.id)


ROUTES = [InvitationController]
