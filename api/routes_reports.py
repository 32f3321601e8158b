"""Players report other players; compliance reads the reports (issue 29).

`POST /api/reports` (players): report someone you played a match with, from the table or from
your history, under a category and with an optional short plain text. The answer says only
that the report was received: nothing about the reported player. A player you did not sit
with, an unknown match and an unknown player all answer the same 404 `unknown_match`. At most
`REPORTS_PER_DAY` reports a day; the same player and match reported again answers the first
report. Reports are append-only for the application (`gateway.player_reports`).

`GET /api/compliance/reports` (compliance): the reports, newest first, a page at a time,
optionally about one player.

Each new report also raises (or updates) a low-score `player_report` integrity alert about the
reported player, one per player and UTC month (`player_report:PLAYER:YYYY-MM`), in the same
transaction as the report: reports enter the compliance queue next to the scan's alerts, and
several reports about one player add up in one alert (its figures count them, its evidence
lists them) instead of flooding the queue. A month whose alert was closed gets no new one:
the reports are still listed, and the next month opens a new alert.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import msgspec
import sqlalchemy as sa
from litestar import Request, get, post
from litestar.params import JSONBody, Parameter
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from api.backends import call, get_backends
from api.guards import CurrentUser, GuardedController, requires_role
from api.openapi_errors import READ_ERRORS, WRITE_ERRORS
from api.schema import player_reports
from integrity import store as integrity_store
from integrity.models import EvidenceRef, NewAlert
from services.common.errors import ServiceError
from services.common.logging import get_logger
from services.engine.contract import PublicMatchState

REPORTS_PER_DAY = 10
# A report is a lead, not a finding: its alert sorts below the detectors' (whose scores are
# around 1 and more at their thresholds) until several reporters agree.
REPORT_ALERT_SCORE = 0.1
MAX_REPORT_ALERT_SCORE = 1.0
MAX_TEXT = 500
MAX_PAGE = 200
Category = Literal["collusion", "cheating", "abuse", "bot", "other"]
MatchId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]
PlayerId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.@:-]{1,64}$")]
# Plain text: any printable character and line breaks; no other control character.
ReportText = Annotated[
    str, msgspec.Meta(max_length=MAX_TEXT, pattern=r"^[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f]*$")
]
_SPACES = re.compile(r"[ \t]+")

log = get_logger()


class ReportIn(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    match_id: MatchId
    player: PlayerId
    category: Category
    text: ReportText = ""


class ReportReceived(msgspec.Struct, frozen=True):
    report_id: int
    received_at: datetime


class ReportOut(msgspec.Struct, frozen=True):
    id: int
    created_at: datetime
    reporter: str
    reported: str
    match_id: str
    category: str
    text: str


class ReportPage(msgspec.Struct, frozen=True):
    reports: list[ReportOut]
    # The `before` of the next (older) page; null on the last.
    next: int | None


def _unknown() -> ServiceError:
    return ServiceError(404, "unknown_match", "no such match with that player at your table")


async def _played_together(
    request: Request[Any, Any, Any], match_id: str, me: str, other: str
) -> None:
    """404 unless both sat at `match_id` as players (not a CPU seat)."""
    engine = get_backends(request.app.state).engine
    try:
        state = await call("engine", engine.get(f"/internal/matches/{match_id}", PublicMatchState))
    except ServiceError as exc:
        if exc.status == 404:
            raise _unknown() from None
        raise
    humans = {s.player_id for s in state.seats if s.player_id is not None and not s.bot}
    seated = {s.player_id for s in state.seats if s.player_id is not None}
    if me not in seated or other not in humans:
        raise _unknown()


async def _raise_report_alert(
    conn: AsyncConnection, reported: str, report_id: int, at: datetime
) -> None:
    """The reported player's `player_report` alert of the report's month, with the month's
    counts as figures and this report as evidence."""
    month_start = at.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    counts = (
        await conn.execute(
            sa.select(sa.func.count(), sa.func.count(sa.distinct(player_reports.c.reporter))).where(
                player_reports.c.reported == reported,
                player_reports.c.created_at >= month_start,
            )
        )
    ).one()
    reports, reporters = int(counts[0]), int(counts[1])
    row = (
        await conn.execute(
            sa.select(
                player_reports.c.reporter, player_reports.c.match_id, player_reports.c.category
            ).where(player_reports.c.id == report_id)
        )
    ).one()
    await integrity_store.raise_alerts(
        conn,
        [
            NewAlert(
                kind="player_report",
                player=reported,
                dedup_key=f"player_report:{reported}:{month_start:%Y-%m}",
                score=min(MAX_REPORT_ALERT_SCORE, round(REPORT_ALERT_SCORE * reporters, 3)),
                figures={"reports": reports, "reporters": reporters},
                evidence=[
                    EvidenceRef(
                        kind="report",
                        ref=str(report_id),
                        detail={
                            "reporter": row.reporter,
                            "match_id": row.match_id,
                            "category": row.category,
                            "at": at.isoformat(),
                        },
                    )
                ],
            )
        ],
    )


class ReportController(GuardedController):
    """A player's report of another player he played with."""

    guards = [requires_role("player")]

    @post("/api/reports", status_code=200, tags=["player"], responses=WRITE_ERRORS)
    async def report(
        self, user: CurrentUser, request: Request[Any, Any, Any], data: JSONBody[ReportIn]
    ) -> ReportReceived:
        """Report a player of a match you played in; compliance reads it."""
        if data.player.lower() == user.id:
            raise ServiceError(400, "report_self", "you cannot report yourself")
        await _played_together(request, data.match_id, user.id, data.player)
        text = "\n".join(_SPACES.sub(" ", line).strip() for line in data.text.splitlines())
        text = text.strip()
        async with request.app.state.db.begin() as conn:
            # One reporter at a time: the day's count and the insert are one decision.
            await conn.execute(
                sa.select(sa.func.pg_advisory_xact_lock(sa.func.hashtext("report:" + user.id)))
            )
            found = (
                await conn.execute(
                    sa.select(player_reports.c.id, player_reports.c.created_at).where(
                        player_reports.c.reporter == user.id,
                        player_reports.c.reported == data.player,
                        player_reports.c.match_id == data.match_id,
                    )
                )
            ).first()
            if found is not None:
                return ReportReceived(report_id=found.id, received_at=found.created_at)
            today = (
                await conn.execute(
                    sa.select(sa.func.count())
                    .select_from(player_reports)
                    .where(
                        player_reports.c.reporter == user.id,
                        player_reports.c.created_at > sa.func.now() - sa.text("interval '1 day'"),
                    )
                )
            ).scalar_one()
            if today >= REPORTS_PER_DAY:
                raise ServiceError(429, "rate_limited", f"at most {REPORTS_PER_DAY} reports a day")
            row = (
                await conn.execute(
                    insert(player_reports)
                    .values(
                        reporter=user.id,
                        reported=data.player,
                        match_id=data.match_id,
                        category=data.category,
                        text=text,
                    )
                    .returning(player_reports.c.id, player_reports.c.created_at)
                )
            ).one()
            await _raise_report_alert(conn, data.player, row.id, row.created_at)
        log.info("player_report", report_id=row.id, category=data.category)
        return ReportReceived(report_id=row.id, received_at=row.created_at)


class ComplianceReportsController(GuardedController):
    """Players' reports, for compliance."""

    guards = [requires_role("compliance")]

    @get("/api/compliance/reports", tags=["compliance"], responses=READ_ERRORS)
    async def reports(
        self,
        request: Request[Any, Any, Any],
        before: Annotated[int | None, Parameter(ge=1, le=2**62)] = None,
        limit: Annotated[int, Parameter(ge=1, le=MAX_PAGE)] = 50,
        reported: Annotated[str | None, Parameter(pattern=r"^[A-Za-z0-9_.@:-]{1,64}$")] = None,
    ) -> ReportPage:
        """Reports, newest first; `next` is the `before` of the next page."""
        query = sa.select(player_reports).order_by(player_reports.c.id.desc()).limit(limit + 1)
        if before is not None:
            query = query.where(player_reports.c.id < before)
        if reported is not None:
            query = query.where(player_reports.c.reported == reported)
        async with request.app.state.db.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        page = [ReportOut(**dict(r)) for r in rows[:limit]]
        more = len(rows) > limit
        return ReportPage(reports=page, next=page[-1].id if more and page else None)


ROUTES = [ReportController, ComplianceReportsController]
