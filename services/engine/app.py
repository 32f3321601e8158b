"""The engine service's ASGI app: routes of services.engine.contract over the Engine."""

from __future__ import annotations

from typing import Any

from litestar import Litestar, get, post
from litestar.datastructures import State
from litestar.params import FromPath, JSONBody, Parameter

from fairness.keys import load_operator_key
from fairness.witness_push import WitnessEndpoint
from services.common.app import create_service_app
from services.common.auth import GATEWAY, MATCHMAKING, callers_opt
from services.common.config import Settings
from services.common.logging import get_logger
from services.engine.audit import AUDIT_ROUTES
from services.engine.clock import Clock, RealClock
from services.engine.contract import (
    MAX_EVENTS_PAGE,
    MAX_WAIT_MS,
    ActionApplied,
    CreateMatch,
    EventPage,
    FeedReads,
    MatchCreated,
    MatchResult,
    PublicMatchState,
    SeatFeed,
    SeatFeeds,
    SeatSnapshot,
    SubmitAction,
)
from services.engine.integrity_feed import INTEGRITY_ROUTES
from services.engine.ports import FairnessLog, HttpLedger, Ledger, PgFairnessLog
from services.engine.service import Engine
from services.engine.store import Store

log = get_logger()


def _engine(state: State) -> Engine:
    engine: Engine = state.engine
    return engine


# Matches are created by matchmaking; played and read by the gateway (matchmaking reads a
# match's state to see whether it is over).
PLAYERS = callers_opt(GATEWAY)


@post("/internal/matches", status_code=200, opt=callers_opt(MATCHMAKING))
async def create_match(state: State, data: JSONBody[CreateMatch]) -> MatchCreated:
    return await _engine(state).create(data)


@get("/internal/matches/{match_id:str}", opt=callers_opt(GATEWAY, MATCHMAKING))
async def match_state(state: State, match_id: FromPath[str]) -> PublicMatchState:
    return await _engine(state).public_state(match_id)


@get("/internal/matches/{match_id:str}/result", opt=PLAYERS)
async def match_result(state: State, match_id: FromPath[str]) -> MatchResult:
    return await _engine(state).result(match_id)


@get("/internal/matches/{match_id:str}/seats/{seat:int}/view", opt=PLAYERS)
async def seat_view(state: State, match_id: FromPath[str], seat: FromPath[int]) -> SeatSnapshot:
    return await _engine(state).snapshot(match_id, seat)


@get("/internal/matches/{match_id:str}/seats/{seat:int}/events", opt=PLAYERS)
async def seat_events(
    state: State,
    match_id: FromPath[str],
    seat: FromPath[int],
    after: int = Parameter(default=0, ge=0),
    wait_ms: int = Parameter(default=0, ge=0, le=MAX_WAIT_MS),
    limit: int = Parameter(default=MAX_EVENTS_PAGE, ge=1, le=MAX_EVENTS_PAGE),
) -> EventPage:
    return await _engine(state).events(match_id, seat, after, wait_ms, limit)


@get("/internal/matches/{match_id:str}/seats/{seat:int}/feed", opt=PLAYERS)
async def seat_feed(
    state: State,
    match_id: FromPath[str],
    seat: FromPath[int],
    after: int = Parameter(default=0, ge=0),
    limit: int = Parameter(default=MAX_EVENTS_PAGE, ge=1, le=MAX_EVENTS_PAGE),
) -> SeatFeed:
    return await _engine(state).feed(match_id, seat, after, limit)


@post("/internal/matches/{match_id:str}/actions", status_code=200, opt=PLAYERS)
async def submit_action(
    state: State, match_id: FromPath[str], data: JSONBody[SubmitAction]
) -> ActionApplied:
    return await _engine(state).submit(match_id, data)


@post("/internal/matches/{match_id:str}/feeds", status_code=200, opt=PLAYERS)
async def seat_feeds(state: State, match_id: FromPath[str], data: JSONBody[FeedReads]) -> SeatFeeds:
    reads = [(r.seat, r.after) for r in data.reads]
    feeds = await _engine(state).feeds(match_id, reads, gateway=data.gateway)
    return SeatFeeds(feeds=feeds)


def create_app(
    settings: Settings,
    *,
    clock: Clock | None = None,
    fairness: FairnessLog | None = None,
    ledger: Ledger | None = None,
    scan: bool = True,
) -> Litestar:
    """`clock`, `fairness` and `ledger` are injectable for tests; by default real time, the
    PostgreSQL transparency log and the ledger service."""

    async def start_engine(app: Litestar) -> None:
        key = load_operator_key(settings.operator_key_file)
        store = Store(settings.database_url)
        await store.start()
        # The engine's one database path: match log, fairness log, audit reads and /health.
        app.state.db = store.started_pool
        fair: Any = fairness
        if fair is None:
            witnesses = [WitnessEndpoint.parse(k, u) for k, u in settings.witnesses]
            fair = PgFairnessLog(store.started_pool, key, settings.log_origin, witnesses)
            if not await fair.start():
                # Verifiers trust a key only when the previous key announced it in the log.
                log.error("operator_key_not_announced", key_id=key.key_id)
                if settings.env == "production":
                    raise RuntimeError("the operator key is not announced in the fairness log")
        led: Any = ledger if ledger is not None else HttpLedger(settings)
        engine = Engine(store, clock or RealClock(), key, fair, led)
        app.state.engine = engine
        app.state.engine_store = store
        await engine.start(scan=scan)

    async def stop_engine(app: Litestar) -> None:
        engine: Engine | None = app.state.get("engine")
        if engine is not None:
            await engine.stop()
            # The fairness writer stops before the pool it writes through closes.
            if isinstance(engine.fairness, PgFairnessLog):
                await engine.fairness.aclose()
            await engine.store.stop()
            if isinstance(engine.ledger, HttpLedger):
                await engine.ledger.aclose()

    return create_service_app(
        "engine",
        settings,
        route_handlers=[
            create_match,
            match_state,
            match_result,
            seat_view,
            seat_events,
            seat_feed,
            submit_action,
            seat_feeds,
            *AUDIT_ROUTES,
            *INTEGRITY_ROUTES,
        ],
        on_startup=[start_engine],
        on_shutdown=[stop_engine],
        pool_size=None,
    )
