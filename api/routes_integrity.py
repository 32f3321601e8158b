"""Compliance: integrity alerts with their evidence, and what an officer does about them (hold
a player's withdrawals, freeze his account, close the alert), each in the staff audit log.

The day's alerts are also read by the daily report (`GET /api/integrity/days/{day}`).
"""

from __future__ import annotations

from datetime import date
from typing import Annotated, Any, Literal

import msgspec
from litestar import Request, get, post
from litestar.params import FromQuery, JSONBody, Parameter
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from api import accounts, staff_audit
from api.cashier import lock_player
from api.feed import MatchFeed
from api.guards import CurrentSession, GuardedController, requires_role
from api.integrity import alerts_of_day
from api.openapi_errors import READ_ERRORS, WRITE_ERRORS
from api.staff_audit import Reason
from integrity import store
from integrity.models import Alert, AlertPage, WithdrawalHold
from services.common.errors import ServiceError

PlayerPath = Annotated[str, Parameter(pattern=r"^[a-z0-9_.-]{3,32}$")]
AlertId = Annotated[int, Parameter(ge=1, le=2**62)]
Filter = Annotated[str | None, Parameter(max_length=64, pattern=r"^[A-Za-z0-9_.@:-]{1,64}$")]
MAX_EVIDENCE_ROWS = 200


class ActionReason(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    reason: Reason
    # the alert that led to the action, for the record
    alert_id: Annotated[int, msgspec.Meta(ge=1, le=2**62)] | None = None


class CloseAlert(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    resolution: Literal["dismissed", "actioned"]
    reason: Reason


class MatchRow(msgspec.Struct, frozen=True):
    match_id: str
    tier: str | None
    private: bool | None
    at: str | None
    detail: dict[str, Any]
    # the finished hands of this match: GET /api/audit/transcripts?match_id=...
    transcripts: str


class EntryRow(msgspec.Struct, frozen=True):
    entry_id: str
    kind: str | None
    player: str | None
    amount: int | None
    currency: str | None
    at: str | None


class FlowRow(msgspec.Struct, frozen=True):
    from_player: str
    to_player: str
    currency: str
    detail: dict[str, Any]


class OtherRow(msgspec.Struct, frozen=True):
    kind: str
    ref: str
    detail: dict[str, Any]


class PlayerState(msgspec.Struct, frozen=True):
    player: str
    status: str | None  # active | locked | self_excluded; null: no such account
    withdrawals_held: bool


class AlertDetail(msgspec.Struct, frozen=True):
    alert: Alert
    players: list[PlayerState]
    matches: list[MatchRow]
    entries: list[EntryRow]
    flows: list[FlowRow]
    other: list[OtherRow]


class DayAlerts(msgspec.Struct, frozen=True):
    day: date
    alerts: list[Alert]
    by_kind: dict[str, int]
    open: int


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


async def _player_state(db: AsyncEngine, player: str) -> PlayerState:
    user = await accounts.get_user(db, player)
    hold = await store.active_hold(db, player)
    return PlayerState(
        player=player, status=user.status if user else None, withdrawals_held=hold is not None
    )


async def _player(db: AsyncEngine, player: str) -> accounts.User:
    user = await accounts.get_user(db, player)
    if user is None:
        raise ServiceError(404, "no_such_user", "no such user")
    if user.role != "player":
        raise ServiceError(422, "not_a_player", "compliance acts on players' accounts only")
    return user


class ComplianceController(GuardedController):
    """Integrity alerts and the actions on them: compliance officers only."""

    guards = [requires_role("compliance")]

    @get("/api/compliance/alerts", tags=["compliance"], responses=READ_ERRORS)
    async def alerts(
        self,
        request: Request[Any, Any, Any],
        status: FromQuery[Literal["open", "closed"] | None] = None,
        kind: Annotated[str | None, Parameter(pattern=r"^[a-z][a-z0-9_]{0,39}$")] = None,
        player: Filter = None,
        before: Annotated[int | None, Parameter(ge=1, le=2**62)] = None,
        limit: Annotated[int, Parameter(ge=1, le=store.MAX_PAGE)] = 50,
    ) -> AlertPage:
        """Alerts, newest first, by status, kind or player (as player or counterpart)."""
        return await store.list_alerts(
            request.app.state.db,
            status=status,
            kind=kind,
            player=player,
            before=before,
            limit=limit,
        )

    @get("/api/compliance/alerts/{alert_id:int}", tags=["compliance"], responses=READ_ERRORS)
    async def alert(self, request: Request[Any, Any, Any], alert_id: AlertId) -> AlertDetail:
        """One alert with its evidence as rows: matches (tier, private, link to their hands),
        cashier entries, pair flows, and where its players stand (account, withdrawals)."""
        db: AsyncEngine = request.app.state.db
        alert, evidence = await store.get_alert(db, alert_id)
        matches: list[MatchRow] = []
        entries: list[EntryRow] = []
        flows: list[FlowRow] = []
        other: list[OtherRow] = []
        for e in evidence[:MAX_EVIDENCE_ROWS]:
            d = e.detail
            if e.kind == "match":
                matches.append(
                    MatchRow(
                        match_id=e.ref,
                        tier=_str(d.get("tier")),
                        private=d.get("private") if isinstance(d.get("private"), bool) else None,
                        at=_str(d.get("at")),
                        detail=d,
                        transcripts=f"/api/audit/transcripts?match_id={e.ref}",
                    )
                )
            elif e.kind == "entry":
                amount = d.get("amount")
                entries.append(
                    EntryRow(
                        entry_id=e.ref,
                        kind=_str(d.get("kind")),
                        player=_str(d.get("player")),
                        amount=amount if isinstance(amount, int) else None,
                        currency=_str(d.get("currency")),
                        at=_str(d.get("at")),
                    )
                )
            elif e.kind == "flow" and ">" in e.ref and ":" in e.ref:
                pair, _, currency = e.ref.rpartition(":")
                giver, _, taker = pair.partition(">")
                flows.append(
                    FlowRow(from_player=giver, to_player=taker, currency=currency, detail=d)
                )
            else:
                other.append(OtherRow(kind=e.kind, ref=e.ref, detail=d))
        matches.sort(key=lambda m: m.at or "")
        entries.sort(key=lambda x: x.at or "")
        names = [alert.player] + ([alert.counterpart] if alert.counterpart else [])
        players = [await _player_state(db, name) for name in names]
        return AlertDetail(
            alert=alert, players=players, matches=matches, entries=entries, flows=flows, other=other
        )

    @post(
        "/api/compliance/alerts/{alert_id:int}/close",
        status_code=200,
        tags=["compliance"],
        responses=WRITE_ERRORS,
    )
    async def close(
        self,
        session: CurrentSession,
        request: Request[Any, Any, Any],
        alert_id: AlertId,
        data: JSONBody[CloseAlert],
    ) -> Alert:
        """Close an open alert as dismissed or actioned, with the reason."""
        db: AsyncEngine = request.app.state.db
        async with db.begin() as conn:
            closed = await store.close_alert(
                conn,
                alert_id,
                actor=session.user.id,
                resolution=data.resolution,
                reason=data.reason,
            )
            await staff_audit.record(
                conn,
                session.user,
                "compliance.close_alert",
                f"alert:{alert_id}",
                data.reason,
                {"resolution": data.resolution, "kind": closed.kind, "player": closed.player},
            )
        return closed

    @post(
        "/api/compliance/players/{player:str}/hold",
        status_code=200,
        tags=["compliance"],
        responses=WRITE_ERRORS,
    )
    async def hold(
        self,
        session: CurrentSession,
        request: Request[Any, Any, Any],
        player: PlayerPath,
        data: JSONBody[ActionReason],
    ) -> WithdrawalHold:
        """Hold a player's withdrawals: the cashier's withdrawals for him are refused (403
        `withdrawals_held`) until released. 409 `already_held`."""
        db: AsyncEngine = request.app.state.db
        await _player(db, player)
        async with db.begin() as conn:
            # The cashier's lock: a withdrawal in flight posts before the hold, or sees it.
            await lock_player(conn, player)
            placed = await store.place_hold(
                conn, player, actor=session.user.id, reason=data.reason, alert_id=data.alert_id
            )
            await staff_audit.record(
                conn,
                session.user,
                "compliance.hold_withdrawals",
                f"user:{player}",
                data.reason,
                {"alert_id": data.alert_id, "hold_id": placed.id},
            )
        return placed

    @post(
        "/api/compliance/players/{player:str}/release",
        status_code=200,
        tags=["compliance"],
        responses=WRITE_ERRORS,
    )
    async def release(
        self,
        session: CurrentSession,
        request: Request[Any, Any, Any],
        player: PlayerPath,
        data: JSONBody[ActionReason],
    ) -> WithdrawalHold:
        """Release a player's withdrawal hold. 409 `not_held`."""
        db: AsyncEngine = request.app.state.db
        async with db.begin() as conn:
            released = await store.release_hold(
                conn, player, actor=session.user.id, reason=data.reason
            )
            await staff_audit.record(
                conn,
                session.user,
                "compliance.release_withdrawals",
                f"user:{player}",
                data.reason,
                {"alert_id": data.alert_id, "hold_id": released.id},
            )
        return released

    async def _set_status(
        self,
        session: Any,
        request: Request[Any, Any, Any],
        player: str,
        data: ActionReason,
        status: str,
    ) -> PlayerState:
        db: AsyncEngine = request.app.state.db
        user = await _player(db, player)
        if status == "active" and user.status != "locked":
            raise ServiceError(409, "not_frozen", "the account is not frozen")
        if status == "locked" and user.status == "locked":
            raise ServiceError(409, "already_frozen", "the account is already frozen")
        action = "compliance.freeze" if status == "locked" else "compliance.unfreeze"

        async def audit(conn: AsyncConnection, changed: accounts.User) -> None:
            await staff_audit.record(
                conn,
                session.user,
                action,
                f"user:{changed.id}",
                data.reason,
                {"alert_id": data.alert_id},
            )

        await accounts.update_user(db, player, status=status, then=audit)
        if status == "locked":
            feed: MatchFeed = request.app.state.feed
            await feed.announce_session_ended(db, player)
        return await _player_state(db, player)

    @post(
        "/api/compliance/players/{player:str}/freeze",
        status_code=200,
        tags=["compliance"],
        responses=WRITE_ERRORS,
    )
    async def freeze(
        self,
        session: CurrentSession,
        request: Request[Any, Any, Any],
        player: PlayerPath,
        data: JSONBody[ActionReason],
    ) -> PlayerState:
        """Freeze a player's account (locked): signed out everywhere, his sockets closed."""
        return await self._set_status(session, request, player, data, "locked")

    @post(
        "/api/compliance/players/{player:str}/unfreeze",
        status_code=200,
        tags=["compliance"],
        responses=WRITE_ERRORS,
    )
    async def unfreeze(
        self,
        session: CurrentSession,
        request: Request[Any, Any, Any],
        player: PlayerPath,
        data: JSONBody[ActionReason],
    ) -> PlayerState:
        """Unfreeze a frozen account."""
        return await self._set_status(session, request, player, data, "active")


class IntegrityDayController(GuardedController):
    """A UTC day's integrity alerts, for the daily report."""

    guards = [requires_role("compliance", "auditor", "finance", "admin")]

    @get("/api/integrity/days/{day:str}", tags=["compliance"], responses=READ_ERRORS)
    async def day_alerts(
        self, request: Request[Any, Any, Any], day: Annotated[str, Parameter(max_length=10)]
    ) -> DayAlerts:
        """The alerts raised on `day` (YYYY-MM-DD, UTC), by kind, and how many are still open."""
        try:
            when = date.fromisoformat(day)
        except ValueError:
            raise ServiceError(400, "invalid_date", "day must be YYYY-MM-DD") from None
        found = await alerts_of_day(request.app.state.db, when)
        by_kind: dict[str, int] = {}
        for a in found:
            by_kind[a.kind] = by_kind.get(a.kind, 0) + 1
        return DayAlerts(
            day=when,
            alerts=found,
            by_kind=by_kind,
            open=sum(1 for a in found if a.status == "open"),
        )


ROUTES = [ComplianceController, IntegrityDayController]
