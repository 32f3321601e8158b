"""Responsible play for the player himself: his limits, session reminders, cool-off.

See `api.limits` for the rules (rolling windows, a rise waits 24 hours, a cool-off cannot be
shortened). Self-exclusion is `POST /api/me/self-exclusion` (api/routes_auth.py).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any

import msgspec
from litestar import Request, get, post
from litestar.params import JSONBody
from sqlalchemy import text

from api import cashier, limits
from api.backends import get_backends
from api.feed import MatchFeed
from api.guards import CurrentSession, GuardedController, requires_role
from api.limits import PlayerLimits
from api.openapi_errors import READ_ERRORS, WRITE_ERRORS
from api.schema import MAX_LIMIT_CENTS, LimitName, ReminderMinutes
from services.common.errors import ServiceError

LimitCents = Annotated[int, msgspec.Meta(ge=1, le=MAX_LIMIT_CENTS)]


class LimitsRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The limits to change, by name (null removes one; a limit not named stays as it is), and
    the session reminder interval in minutes (0: off; null or absent: unchanged)."""

    limits: Annotated[dict[LimitName, LimitCents | None], msgspec.Meta(max_length=6)] = {}
    reminder_min: ReminderMinutes | None = None


class CoolOffRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    hours: Annotated[int, msgspec.Meta(ge=limits.COOL_OFF_MIN_HOURS, le=limits.COOL_OFF_MAX_HOURS)]


class SessionSummary(msgspec.Struct, frozen=True):
    """This session so far, for the reminder banner: since sign-in (the session's start)."""

    started_at: datetime
    now: datetime
    played_s: int
    currency: str
    net_cents: int  # won minus lost at the tables since sign-in (negative: a loss)
    reminder_min: int
    next_reminder_at: datetime | None


class LimitsController(GuardedController):
    """A player's own responsible-play settings: players only."""

    guards = [requires_role("player")]

    @get("/api/me/limits", tags=["player"], responses=READ_ERRORS)
    async def my_limits(
        self, session: CurrentSession, request: Request[Any, Any, Any]
    ) -> PlayerLimits:
        """Your limits as they apply now, any pending rise with its time, reminder, cool-off."""
        return await limits.limits_of(request.app.state.db, session.user.id)

    @post("/api/me/limits", status_code=200, tags=["player"], responses=WRITE_ERRORS)
    async def set_my_limits(
        self,
        session: CurrentSession,
        request: Request[Any, Any, Any],
        data: JSONBody[LimitsRequest],
    ) -> PlayerLimits:
        """Lower a limit (at once) or raise or remove one (after 24 hours); set reminders."""
        player = session.user.id
        async with cashier.player_locked(request.app.state.db, player) as conn:
            return await limits.set_limits(
                conn,
                player,
                {str(name): cents for name, cents in data.limits.items()},
                data.reminder_min,
            )

    @post("/api/me/cool-off", status_code=200, tags=["player"], responses=WRITE_ERRORS)
    async def cool_off(
        self,
        session: CurrentSession,
        request: Request[Any, Any, Any],
        data: JSONBody[CoolOffRequest],
    ) -> PlayerLimits:
        """A break from paid tables and deposits for `hours` (24 to 1008); it cannot be
        shortened or cancelled. Free tables stay open."""
        db = request.app.state.db
        async with cashier.player_locked(db, session.user.id) as conn:
            found = await limits.start_cool_off(conn, session.user.id, data.hours)
        # Its table sockets close, as at a self-exclusion: a paid seat must not outlive it.
        feed: MatchFeed = request.app.state.feed
        await feed.announce_session_ended(db, session.user.id)
        return found

    @get("/api/me/session", tags=["player"], responses=READ_ERRORS)
    async def my_session(
        self, session: CurrentSession, request: Request[Any, Any, Any]
    ) -> SessionSummary:
        """Time played and net result since this session began, and the next reminder."""
        db = request.app.state.db
        async with db.connect() as conn:
            row = (
                await conn.execute(
                    text(
                        "SELECT created_at, now() AS now FROM gateway.sessions "
                        "WHERE token_hash = :h"
                    ),
                    {"h": session.token_hash},
                )
            ).first()
            found = await limits.limits_of(conn, session.user.id)
        if row is None:
            raise ServiceError(401, "not_signed_in", "no such session")
        started: datetime = row.created_at
        now: datetime = row.now
        # The ledger answers for at most its window (a bearer token may be older than that).
        since = max(started, now - limits.WINDOWS["month"])
        figures = await limits.activity(
            get_backends(request.app.state).ledger, session.user.id, [since]
        )
        net = 0 if figures is None else -figures.windows[0].net_loss
        return SessionSummary(
            started_at=started,
            now=now,
            played_s=max(int((now - started) / timedelta(seconds=1)), 0),
            currency=limits.CURRENCY if figures is None else figures.currency,
            net_cents=net,
            reminder_min=found.reminder_min,
            next_reminder_at=limits.next_reminder_at(started, found.reminder_min, now),
        )


ROUTES = [LimitsController]
