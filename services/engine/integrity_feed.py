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
from litestar.params import FromQuery, Parameter

from services.common.auth import GATEWAY, INTEGRITY, callers_opt
from services.common.errors import ServiceError
from services.engine import records
from services.engine.audit import build_transcript, match_events
from services.engine.contract import (
    MAX_HANDS_PAGE,
    MAX_HANDS_PER_MATCH,
    MAX_TIMINGS_PAGE,
    MAX_TIMINGS_PER_MATCH,
    FinishedHand,
    HandMove,
    HandPage,
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


_FINISHED_PAGE = (
    "SELECT c.match_id, c.closed_at, m.spec FROM engine.match_closed c"
    " JOIN engine.matches m ON m.match_id = c.match_id"
    " WHERE c.status = 'finished' AND c.closed_at >= $1 AND (c.closed_at, c.match_id) > ($2, $3)"
    " ORDER BY c.closed_at, c.match_id LIMIT $4"
)
# The same read from the other end: `after` is then a position to read back from.
_FINISHED_PAGE_NEWEST_FIRST = (
    "SELECT c.match_id, c.closed_at, m.spec FROM engine.match_closed c"
    " JOIN engine.matches m ON m.match_id = c.match_id"
    " WHERE c.status = 'finished' AND c.closed_at >= $1"
    " AND ($2::timestamptz IS NULL OR (c.closed_at, c.match_id) < ($2, $3))"
    " ORDER BY c.closed_at DESC, c.match_id DESC LIMIT $4"
)


async def _finished_page(
    pool: asyncpg.Pool, since: str, after: str | None, limit: int, newest_first: bool = False
) -> list[asyncpg.Record]:
    """A page of finished matches closed at or after `since`, past the cursor, oldest first
    (or newest first)."""
    at: dt.datetime | None
    at, match_id = _cursor(after)
    if newest_first and not after:
        at = None
    rows: list[asyncpg.Record] = await pool.fetch(
        _FINISHED_PAGE_NEWEST_FIRST if newest_first else _FINISHED_PAGE,
        _since(since),
        at,
        match_id,
        limit,
    )
    return rows


def _next_cursor(rows: list[asyncpg.Record]) -> str | None:
    """The `after` of the next page: the last match's close time (microseconds) and id."""
    if not rows:
        return None
    micros = int(rows[-1]["closed_at"].timestamp() * 1_000_000)
    return f"{micros}:{rows[-1]['match_id']}"


@get("/internal/integrity/timings", opt=callers_opt(GATEWAY, INTEGRITY))
async def integrity_timings(
    state: State,
    since: Annotated[str, Parameter(min_length=1, max_length=40)],
    after: Annotated[str | None, Parameter(max_length=160)] = None,
    limit: Annotated[int, Parameter(ge=1, le=MAX_TIMINGS_PAGE)] = MAX_TIMINGS_PAGE,
) -> TimingPage:
    """Finished matches closed at or after `since`, after the cursor `after`, oldest first."""
    pool: asyncpg.Pool = state.db
    rows = await _finished_page(pool, since, after, limit)
    logs: dict[str, list[bytes]] = {}
    for r in await pool.fetch(
        "SELECT match_id, record FROM engine.match_log WHERE match_id = ANY($1::text[])"
        " ORDER BY match_id, log_no",
        [row["match_id"] for row in rows],
    ):
        logs.setdefault(r["match_id"], []).append(bytes(r["record"]))
    matches = []
    for row in rows:
        doc = row["spec"] if isinstance(row["spec"], dict) else msgspec.json.decode(row["spec"])
        spec: dict[str, Any] = doc.get("spec", {})  # stored as {spec, created_ms}
        matches.append(
            MatchTimings(
                match_id=row["match_id"],
                tier=str(spec.get("tier", "free")),
                closed_at_ms=int(row["closed_at"].timestamp() * 1000),
                timings=timings_of(spec, logs.get(row["match_id"], [])),
            )
        )
    cursor = _next_cursor(rows)
    return TimingPage(matches=matches, next=cursor, more=len(rows) == limit)


def _players(spec: dict[str, Any]) -> dict[int, str]:
    return {
        int(s["seat"]): str(s["player_id"])
        for s in spec.get("seats", [])
        if not s.get("bot") and s.get("player_id")
    }


@get("/internal/integrity/hands", opt=callers_opt(GATEWAY, INTEGRITY))
async def integrity_hands(
    state: State,
    since: Annotated[str, Parameter(min_length=1, max_length=40)],
    after: Annotated[str | None, Parameter(max_length=160)] = None,
    limit: Annotated[int, Parameter(ge=1, le=MAX_HANDS_PAGE)] = MAX_HANDS_PAGE,
    newest_first: FromQuery[bool] = False,
) -> HandPage:
    """The played hands (true deal and moves) of the finished matches closed at or after
    `since`, after the cursor `after`, oldest match first; at most `limit` matches and
    `MAX_HANDS_PER_MATCH` hands of each. Opening draws and hands without a result are left
    out. `newest_first`: the newest match first and each match's last hand first, so a
    reader that stops at a cap keeps the most recent hands."""
    pool: asyncpg.Pool = state.db
    rows = await _finished_page(pool, since, after, limit, newest_first)
    engine = state.get("engine")
    out: list[FinishedHand] = []
    for row in rows:
        doc = row["spec"] if isinstance(row["spec"], dict) else msgspec.json.decode(row["spec"])
        spec: dict[str, Any] = doc.get("spec", {})
        players = _players(spec)
        try:
            events = await match_events(engine, row["match_id"]) if engine is not None else []
        except ServiceError:
            events = []
        deals = list(
            dict.fromkeys(
                str(e.data["deal_id"])
                for e in events
                if e.kind == "hand_ended" and e.data.get("deal_id")
            )
        )
        if newest_first:
            deals.reverse()
        for deal in deals[:MAX_HANDS_PER_MATCH]:
            hand = await build_transcript(state, deal, events=events, proofs=False)
            if hand is None:
                continue
            record = hand["commitment"]["record"]
            seats = len(record.get("seats") or []) or len(hand["deal"]["hands"])
            out.append(
                FinishedHand(
                    deal_id=deal,
                    match_id=row["match_id"],
                    tier=str(spec.get("tier", "free")),
                    variant=str(record["variant"]),
                    options=dict(record.get("options") or {}),
                    players=[players.get(s) for s in range(seats)],
                    hands=hand["deal"]["hands"],
                    stock=hand["deal"]["stock"],
                    opener=hand["opener"],
                    first_hand=hand["first_hand"],
                    scores=[int(x) for x in hand["scores"]],
                    moves=[msgspec.convert(m, HandMove) for m in hand["moves"]],
                    closed_at_ms=int(row["closed_at"].timestamp() * 1000),
                )
            )
    cursor = _next_cursor(rows)
    return HandPage(hands=out, next=cursor, more=len(rows) == limit)


INTEGRITY_ROUTES = [integrity_timings, integrity_hands]
