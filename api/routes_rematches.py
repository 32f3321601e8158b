""" "Play again" with the same people: propose, see, accept or decline a rematch.

A player of a finished match proposes it again (api/rematches.py); each other player accepts
in his own session, and each acceptance runs `check_may_sit` for him (with his own address).
The last acceptance checks every other player again (as his partner: any refusal reads
`partner_unavailable`) and seats them all at a new private table of the same kind and tier,
partners across: the proposer's side opens it, the other side(s) join by its code. The joins'
idempotency keys are the rematch's, so accepting again after a 503 replays them; a refusal
midway releases the seats already taken, and the rematch is `failed` with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

import msgspec
from litestar import Request, Response, get, post
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import FromPath, JSONBody, Parameter

from api import rematches
from api.accounts import User
from api.backends import call, get_backends
from api.guards import CurrentSession, CurrentUser, GuardedController, requires_role
from api.openapi_errors import READ_ERRORS, WRITE_ERRORS
from api.rematches import Rematch
from api.routes_lobby import TableOut, may_sit, table_out
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
    TableStatus,
)

log = get_logger()

MatchId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]
RematchId = Annotated[int, Parameter(ge=1, le=rematches.MAX_ID)]


class ProposeRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    match_id: MatchId


class RematchPlayerOut(msgspec.Struct, frozen=True):
    player: str
    answer: str  # pending, accepted or declined


class RematchOut(msgspec.Struct, frozen=True):
    """A rematch as its players see it; `table` is yours once seated."""

    rematch_id: int
    match_id: str
    proposer: str
    kind: str
    tier: str
    status: str  # pending, seating, seated, declined, expired or failed
    failure: str | None
    table_id: str | None
    expires_at: datetime
    players: list[RematchPlayerOut]
    waiting_for: int
    my_answer: str
    table: TableOut | None = None


@dataclass(frozen=True)
class _Consent:
    """Each player of a rematch accepted it in his own session: the last acceptor (`invitee`)
    seats the others (`inviter`) on their word, as an accepted invitation does."""

    inviter: str
    invitee: str


def rematch_out(rm: Rematch, me: str, table: TableOut | None = None) -> RematchOut:
    mine = next((p.answer for p in rm.players if p.player == me), "pending")
    return RematchOut(
        rematch_id=rm.id,
        match_id=rm.match_id,
        proposer=rm.proposer,
        kind=rm.kind,
        tier=rm.tier,
        status="expired" if rm.expired else rm.status,
        failure=rm.failure,
        table_id=rm.table_id,
        expires_at=rm.expires_at,
        players=[RematchPlayerOut(p.player, p.answer) for p in rm.players],
        waiting_for=len(rm.waiting_for()),
        my_answer=mine,
        table=table,
    )


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


async def _mine(request: Request[Any, Any, Any], rematch_id: int, me: str) -> Rematch:
    db = request.app.state.db
    rm = await rematches.get(db, rematch_id)
    if rm is None or me not in rm.player_ids():
        raise ServiceError(404, "rematch_not_found", "no such rematch")
    if rm.expired:
        await rematches.expire_due(db, rm.id)
        rm = await rematches.get(db, rematch_id) or rm
    return rm


def _closed(rm: Rematch) -> ServiceError:
    if rm.expired or rm.status == "expired":
        return ServiceError(409, "rematch_expired", "that rematch has expired")
    return ServiceError(409, "rematch_closed", f"that rematch is {rm.status}")


def _teams(rm: Rematch, seat_count: int) -> list[list[str]]:
    """Who joins together: partners (seats half the table apart) as one paired join, the
    proposer's side first (he opens the table); otherwise each player alone."""
    by_seat = {p.seat: p.player for p in rm.players}
    if rm.pairs:
        half = seat_count // 2
        teams = [[by_seat[s], by_seat[s + half]] for s in sorted(by_seat) if s < half]
    else:
        teams = [[by_seat[s]] for s in sorted(by_seat)]
    teams.sort(key=lambda team: rm.proposer not in team)
    return teams


async def _seat_all(request: Request[Any, Any, Any], rm: Rematch, me: str) -> TableOut:
    mm = get_backends(request.app.state).matchmaking
    db = request.app.state.db
    key = f"gw-rm-{rm.id}"
    teams = _teams(rm, len(rm.players))
    seated: list[tuple[str, str]] = []  # (player, table) already holding a seat
    try:
        first = teams[0]
        opened = await call(
            "matchmaking",
            mm.post(
                "/v1/tables/private",
                CreatePrivate(
                    idempotency_key=f"{key}-0",
                    player_id=first[0],
                    kind=rm.kind,
                    tier=rm.tier,  # type: ignore[arg-type]  # the table's CHECK keeps it a Tier
                    partner_id=first[1] if len(first) > 1 else None,
                ),
                JoinResult,
            ),
        )
        table: TableStatus = opened.table
        seated += [(p, table.table_id) for p in first]
        if table.invite_code is None:
            raise ServiceError(409, "table_not_private", "the rematch table has no code")
        for n, team in enumerate(teams[1:], start=1):
            joined = await call(
                "matchmaking",
                mm.post(
                    "/v1/join/code",
                    JoinByCode(
                        idempotency_key=f"{key}-{n}",
                        player_id=team[0],
                        invite_code=table.invite_code,
                        partner_id=team[1] if len(team) > 1 else None,
                    ),
                    JoinResult,
                ),
            )
            table = joined.table
            seated += [(p, table.table_id) for p in team]
    except ServiceError as exc:
        if exc.status < 500:
            for player, table_id in seated:
                await call(
                    "matchmaking",
                    mm.post(
                        "/v1/leave",
                        Leave(
                            idempotency_key=f"{key}-leave-{player}",
                            player_id=player,
                            table_id=table_id,
                        ),
                        LeaveResult,
                    ),
                )
            await rematches.record_outcome(db, rm.id, table_id=None, failure=exc.code[:64])
            log.info("rematch_seating_refused", rematch_id=rm.id, code=exc.code)
        raise
    await rematches.record_outcome(db, rm.id, table_id=table.table_id, failure=None)
    log.info("rematch_seated", rematch_id=rm.id, table_id=table.table_id)
    return table_out(table, me)


async def _check_others(request: Request[Any, Any, Any], rm: Rematch, me: User) -> None:
    """Every other player again, now, on his acceptance: a refusal fails the rematch."""
    for other in rm.player_ids():
        if other == me.id:
            continue
        try:
            await may_sit(request, other, me, rm.kind, rm.tier, invitation=_Consent(other, me.id))
        except ServiceError as exc:
            if exc.status < 500:
                await rematches.record_outcome(
                    request.app.state.db, rm.id, table_id=None, failure=exc.code[:64]
                )
            raise


async def _finish(request: Request[Any, Any, Any], rm: Rematch, me: User) -> RematchOut:
    """A claimed rematch (`seating`): check the others, then seat everyone."""
    await _check_others(request, rm, me)
    table = await _seat_all(request, rm, me.id)
    final = await _mine(request, rm.id, me.id)
    return rematch_out(final, me.id, table)


async def _accept(request: Request[Any, Any, Any], rm: Rematch, me: User) -> RematchOut:
    db = request.app.state.db
    if rm.status == "seating":
        # A seating cut short by a failing service: accepting again replays its joins.
        return await _finish(request, rm, me)
    if rm.status == "seated":
        return rematch_out(rm, me.id)
    if rm.status != "pending" or rm.expired:
        raise _closed(rm)
    await may_sit(request, me.id, me, rm.kind, rm.tier)
    done, claimed = await rematches.answer(db, rm.id, me.id, accept=True)
    if done is None:
        raise _closed(await _mine(request, rm.id, me.id))
    log.info("rematch_accepted", rematch_id=rm.id, by=me.id, waiting=len(done.waiting_for()))
    if not claimed:
        return rematch_out(done, me.id)
    return await _finish(request, done, me)


# Proposing a match another player has proposed already is an acceptance: 200, not 201.
PROPOSE_RESPONSES: dict[int, ResponseSpec] = {
    **WRITE_ERRORS,
    200: ResponseSpec(
        data_container=RematchOut,
        description="Another player proposed it first: this was your acceptance",
        generate_examples=False,
    ),
}


class RematchController(GuardedController):
    """ "Play again" with the same people: players only."""

    guards = [requires_role("player")]

    @post("/api/rematches", status_code=201, tags=["lobby"], responses=PROPOSE_RESPONSES)
    async def propose(
        self,
        session: CurrentSession,
        request: Request[Any, Any, Any],
        data: JSONBody[ProposeRequest],
    ) -> Response[RematchOut]:
        """Propose the match you just played again, to the same people; 201 with the rematch.

        When another player of that match proposed it first, this is your acceptance (200)."""
        me = session.user
        backends = get_backends(request.app.state)
        db = request.app.state.db
        existing = await rematches.get_by_match(db, data.match_id)
        if existing is not None and me.id in existing.player_ids():
            return Response(await _accept(request, existing, me), status_code=200)
        _seat, state = await seat_of(backends, data.match_id, me.id)
        if state.status not in ("finished", "void"):
            raise ServiceError(409, "match_not_over", "that match is still being played")
        if any(s.player_id is None for s in state.seats):
            raise ServiceError(
                400, "rematch_needs_players", "only a match between players can be proposed again"
            )
        seats = {s.seat: str(s.player_id) for s in state.seats}
        if len(set(seats.values())) < 2:
            raise ServiceError(400, "rematch_needs_players", "nobody else to play with")
        kinds = await backends.kinds()
        kind = kind_of(kinds, state.variant, state.options, len(state.seats))
        pairs = next(k.pairs for k in kinds.kinds if k.kind == kind)
        await may_sit(request, me.id, me, kind, state.tier)
        rm, created = await rematches.propose(
            db,
            match_id=data.match_id,
            proposer=me.id,
            kind=kind,
            tier=state.tier,
            pairs=pairs,
            seats=seats,
            ttl_s=request.app.state.settings.invitation_ttl_s,
        )
        if not created:
            return Response(await _accept(request, rm, me), status_code=200)
        log.info("rematch_proposed", rematch_id=rm.id, match_id=rm.match_id, by=me.id)
        return Response(rematch_out(rm, me.id), status_code=201)

    @get("/api/rematches/by-match/{match_id:str}", tags=["lobby"], responses=READ_ERRORS)
    async def rematch_of_match(
        self, user: CurrentUser, request: Request[Any, Any, Any], match_id: FromPath[str]
    ) -> RematchOut:
        """The rematch proposed for a match you played (404 while there is none)."""
        found = await rematches.get_by_match(request.app.state.db, match_id[:128])
        if found is None or user.id not in found.player_ids():
            raise ServiceError(404, "rematch_not_found", "no rematch of that match")
        return rematch_out(await _mine(request, found.id, user.id), user.id)

    @get("/api/rematches/{rematch_id:int}", tags=["lobby"], responses=READ_ERRORS)
    async def rematch_status(
        self, user: CurrentUser, request: Request[Any, Any, Any], rematch_id: RematchId
    ) -> RematchOut:
        """A rematch you are part of: who has answered, and its table once seated."""
        return rematch_out(await _mine(request, rematch_id, user.id), user.id)

    @post(
        "/api/rematches/{rematch_id:int}/accept",
        status_code=200,
        tags=["lobby"],
        responses=WRITE_ERRORS,
    )
    async def accept(
        self, session: CurrentSession, request: Request[Any, Any, Any], rematch_id: RematchId
    ) -> RematchOut:
        """Accept: you are checked now; the last acceptance seats everyone."""
        get_backends(request.app.state)  # 503 before any change while the gateway is starting
        rm = await _mine(request, rematch_id, session.user.id)
        return await _accept(request, rm, session.user)

    @post(
        "/api/rematches/{rematch_id:int}/decline",
        status_code=200,
        tags=["lobby"],
        responses=WRITE_ERRORS,
    )
    async def decline(
        self, user: CurrentUser, request: Request[Any, Any, Any], rematch_id: RematchId
    ) -> RematchOut:
        """Decline: the rematch ends for everyone (nobody was seated or held anything)."""
        db = request.app.state.db
        rm = await _mine(request, rematch_id, user.id)
        done, _claimed = await rematches.answer(db, rm.id, user.id, accept=False)
        if done is None:
            raise _closed(await _mine(request, rematch_id, user.id))
        log.info("rematch_declined", rematch_id=rm.id, by=user.id)
        return rematch_out(done, user.id)


ROUTES = [RematchController]
