"""Response times of finished matches for the integrity scan: for each player's own action
(an `Act` by "player"), the time since the record before it. Read from the match log; a page
of matches at a time, oldest closing first."""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Any

import asyncpg
import msgspec
from litestar import get
from litestar.datastructures import State
from litestar.params import Parameter

from services.common.auth import GATEWAY, INTEGRITY, callers_opt
from services.common.errors import ServiceError
from services.engine import records
from services.engine.contract import (
    MAX_TIMINGS_PAGE,
    MAX_TIMINGS_PER_MATCH,
    MatchTimings,
    SeatTiming,
    TimingPage,
)

_CURSOR = re.compile(r"^(\d{1,16}):([A-Za-z0-9_.:-]{1,128})$")


def _cursor(raw: str | None) -> tuple[dt.datetime, str]:
    if not raw:
        return dt.datetime.fromtimestamp(0, dt.UTC), ""
    found = _CURSOR.match(raw)
    if found is None:
        raise ServiceError(400, "invalid_cursor", "after is a page's next")
    return dt.datetime.fromtimestamp(int(found.group(1)) / 1_000_000, dt.UTC), found.group(2)


def _since(raw: str) -> dt.datetime:
    try:
        value = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise ServiceError(400, "invalid_time", "since must be an ISO 8601 time") from None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def timings_of(spec: dict[str, Any], log: list[bytes]) -> list[SeatTiming]:
    """Each player's own actions with the time since the record before each."""
    players = {
        s["seat"]: s.get("player_id")
        for s in spec.get("seats", [])
        if not s.get("bot") and s.get("player_id")
    }
    out: list[SeatTiming] = []
    previous: int | None = None
    for raw in log:
        record = records.decode(raw)
        if (
            isinstance(record, records.Act)
            and record.by == "player"
            and previous is not None
            and record.seat in players
            and len(out) < MAX_TIMINGS_PER_MATCH
        ):
            out.append(
                SeatTiming(
                    player=players[record.seat],
                    delta_ms=max(0, record.at_ms - previous),
                    at_ms=record.at_ms,
                )
            )
        previous = record.at_ms
    return out


@get("/internal/integrity/timings", opt=callers_opt(GATEWAY, INTEGRITY))
async def integrity_timings(
    state: State,
    since: Annotated[str, Parameter(min_length=1, max_length=40)],
    after: Annotated[str | None, Parameter(max_length=160)] = None,
    limit: Annotated[int, Parameter(ge=1, le=MAX_TIMINGS_PAGE)] = MAX_TIMINGS_PAGE,
) -> TimingPage:
    """Finished matches closed at or after `since`, after the cursor `after`, oldest first."""
    at, match_id = _cursor(after)
    pool: asyncpg.Pool = state.db
    rows = await pool.fetch(
        "SELECT c.match_id, c.closed_at, m.spec FROM engine.match_closed c"
        " JOIN engine.matches m ON m.match_id = c.match_id"
        " WHERE c.status = 'finished' AND c.closed_at >= $1 AND (c.closed_at, c.match_id) > ($2, $3)"
        " ORDER BY c.closed_at, c.match_id LIMIT $4",
        _since(since),
        at,
        match_id,
        limit,
    )
    matches = []
    for row in rows:
        logs = await pool.fetch(
            "SELECT record FROM engine.match_log WHERE match_id = $1 ORDER BY log_no",
            row["match_id"],
        )
        doc = row["spec"] if isinstance(row["spec"], dict) else msgspec.json.decode(row["spec"])
        spec: dict[str, Any] = doc.get("spec", {})  # stored as {spec, created_ms}
        matches.append(
            MatchTimings(
                match_id=row["match_id"],
                tier=str(spec.get("tier", "free")),
                closed_at_ms=int(row["closed_at"].timestamp() * 1000),
                timings=timings_of(spec, [bytes(r["record"]) for r in logs]),
            )
        )
    cursor = None
    if rows:
        micros = int(rows[-1]["closed_at"].timestamp() * 1_000_000)
        cursor = f"{micros}:{rows[-1]['match_id']}"
    return TimingPage(matches=matches, next=cursor, more=len(rows) == limit)


INTEGRITY_ROUTES = [integrity_timings]
