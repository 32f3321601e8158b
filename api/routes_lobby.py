"""The lobby: kinds and tiers, open tables, quick join, private tables, partners, CPU tables.

The player id sent to matchmaking is always the signed-in player's own; a locked or
self-excluded player is refused before any paid seat is asked for.
"""

from __future__ import annotations

import secrets
from typing import Annotated, Any, Literal

import msgspec
from litestar import Request, get, post
from litestar.params import FromPath, FromQuery, JSONBody, Parameter

from api import accounts
from api.accounts import Session
from api.backends import call, get_backends
from api.openapi_errors import READ_ERRORS, WRITE_ERRORS
from api.security import require, require_player_may_pay
from services.common.errors import ServiceError
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


async def _check_partner(request: Request[Any, Any, Any], partner: str | None, me: str) -> None:
    if partner is None:
        return
    if partner == me:
        raise ServiceError(400, "partner_is_self", "your partner must be someone else")
    user = await accounts.get_user(request.app.state.db, partner)
    if user is None or user.role != "player":
        raise ServiceError(404, "no_such_player", "no player with that name")


async def _paid_check(
    request: Request[Any, Any, Any], session: Session, tier: str, partner: str | None
) -> None:
    if tier == "free":
        return
    # The session's user row is read by this request's own session lookup (never cached
    # across requests): a lock or a self-exclusion counts from the moment it is set.
    require_player_may_pay(session.user)
    if partner is not None:
        other = await accounts.get_user(request.app.state.db, partner)
        if other is None or not other.may_play_paid():
            raise ServiceError(403, "partner_unavailable", "your partner cannot sit at paid tables")


@get("/api/lobby/kinds", tags=["lobby"], responses=READ_ERRORS)
async def kinds(request: Request[Any, Any, Any]) -> KindList:
    """Table kinds and the stake tiers each is offered at."""
    await require(request)
    mm = get_backends(request.app.state).matchmaking
    return await call("matchmaking", mm.get("/v1/kinds", KindList))


@get("/api/lobby/tables", tags=["lobby"], responses=READ_ERRORS)
async def open_tables(
    request: Request[Any, Any, Any],
    kind: Annotated[str | None, Parameter(pattern=r"^[a-z0-9-]{1,40}$")] = None,
    tier: FromQuery[Tier | None] = None,
) -> Lobby:
    """Open public tables with free seats."""
    await require(request, "player")
    params = {k: v for k, v in (("kind", kind), ("tier", tier)) if v is not None}
    mm = get_backends(request.app.state).matchmaking
    return await call("matchmaking", mm.get("/v1/lobby", Lobby, params=params))


@get("/api/lobby/mine", tags=["lobby"], responses=READ_ERRORS)
async def my_tables(request: Request[Any, Any, Any]) -> list[TableOut]:
    """Tables where you hold a seat (with the match id once the table has started)."""
    session = await require(request, "player")
    mm = get_backends(request.app.state).matchmaking
    found = await call("matchmaking", mm.get(f"/v1/players/{session.user.id}/tables", PlayerTables))
    return [table_out(t, session.user.id) for t in found.tables[:50]]


@get("/api/lobby/tables/{table_id:str}", tags=["lobby"], responses=READ_ERRORS)
async def table_status(request: Request[Any, Any, Any], table_id: FromPath[str]) -> TableOut:
    session = await require(request, "player")
    if not msgspec_table_ok(table_id):
        raise ServiceError(400, "invalid_request", "bad table id")
    mm = get_backends(request.app.state).matchmaking
    t = await call("matchmaking", mm.get(f"/v1/tables/{table_id}", TableStatus))
    out = table_out(t, session.user.id)
    if t.private and out.my_seat is None:
        raise ServiceError(404, "table_not_found", "no such table")
    return out


def msgspec_table_ok(table_id: str) -> bool:
    import re

    return re.fullmatch(r"[A-Za-z0-9_-]{1,64}", table_id) is not None


async def _joined(request: Request[Any, Any, Any], path: str, body: Any, me: str) -> TableOut:
    mm = get_backends(request.app.state).matchmaking
    result = await call("matchmaking", mm.post(path, body, JoinResult))
    return table_out(result.table, me)


async def _join_kind(
    request: Request[Any, Any, Any],
    data: JoinRequest,
    path: str,
    body_type: type[QuickJoin] | type[CreatePrivate],
) -> TableOut:
    """A join that names a kind and tier (quick join or a new private table)."""
    session = await require(request, "player")
    await _check_partner(request, data.partner, session.user.id)
    await _paid_check(request, session, data.tier, data.partner)
    body = body_type(
        idempotency_key=_key(data.idempotency_key),
        player_id=session.user.id,
        kind=data.kind,
        tier=data.tier,
        partner_id=data.partner,
    )
    return await _joined(request, path, body, session.user.id)


@post("/api/lobby/quick-join", status_code=200, tags=["lobby"], responses=WRITE_ERRORS)
async def quick_join(request: Request[Any, Any, Any], data: JSONBody[JoinRequest]) -> TableOut:
    """Sit at the fullest waiting table of that kind and tier (or a new one)."""
    return await _join_kind(request, data, "/v1/join/quick", QuickJoin)


@post("/api/lobby/private", status_code=200, tags=["lobby"], responses=WRITE_ERRORS)
async def create_private(request: Request[Any, Any, Any], data: JSONBody[JoinRequest]) -> TableOut:
    """Open a private table; share its invite code."""
    return await _join_kind(request, data, "/v1/tables/private", CreatePrivate)


@post("/api/lobby/join-code", status_code=200, tags=["lobby"], responses=WRITE_ERRORS)
async def join_by_code(request: Request[Any, Any, Any], data: JSONBody[CodeRequest]) -> TableOut:
    """Sit at a private table by its invite code."""
    session = await require(request, "player")
    await _check_partner(request, data.partner, session.user.id)
    user = session.user  # read by this request's session lookup, so current
    # The tier of a private table is only known to matchmaking: a locked or self-excluded
    # player is refused every invite code (free play stays open through quick join and CPUs).
    body = JoinByCode(
        idempotency_key=_key(data.idempotency_key),
        player_id=session.user.id,
        invite_code=data.invite_code.upper(),
        partner_id=data.partner,
    )
    if not user.may_play_paid():
        raise ServiceError(
            403,
            "self_excluded" if user.status == "self_excluded" else "account_locked",
            "you cannot sit at private tables while excluded",
        )
    return await _joined(request, "/v1/join/code", body, session.user.id)


@post("/api/lobby/cpu", status_code=200, tags=["lobby"], responses=WRITE_ERRORS)
async def play_vs_cpu(request: Request[Any, Any, Any], data: JSONBody[CpuRequest]) -> TableOut:
    """A free table against CPU players, started at once."""
    session = await require(request, "player")
    body = PlayVsCpu(
        idempotency_key=_key(data.idempotency_key), player_id=session.user.id, kind=data.kind
    )
    return await _joined(request, "/v1/tables/cpu", body, session.user.id)


@post("/api/lobby/leave", status_code=200, tags=["lobby"], responses=WRITE_ERRORS)
async def leave(request: Request[Any, Any, Any], data: JSONBody[LeaveRequest]) -> LeaveResult:
    """Leave a table before it starts (the stake is released)."""
    session = await require(request, "player")
    body = Leave(
        idempotency_key=_key(data.idempotency_key),
        player_id=session.user.id,
        table_id=data.table_id,
    )
    mm = get_backends(request.app.state).matchmaking
    return await call("matchmaking", mm.post("/v1/leave", body, LeaveResult))


ROUTES = [
    kinds,
    open_tables,
    my_tables,
    table_status,
    quick_join,
    create_private,
    join_by_code,
    play_vs_cpu,
    leave,
]
