"""The engine service's ASGI app: routes of services.engine.contract over the Engine."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any, cast

import msgspec
from litestar import Litestar, get, post
from litestar.datastructures import State
from litestar.params import FromPath, JSONBody, Parameter
from litestar.types import HTTPResponseBodyEvent, HTTPResponseStartEvent, Receive, Scope, Send

from fairness.keys import load_operator_key
from services.common.app import (
    MAX_REQUEST_BODY_BYTES,
    DirectRoute,
    ErrorBody,
    create_service_app,
)
from services.common.config import Settings
from services.common.errors import ServiceError
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
from services.engine.ports import FairnessLog, HttpLedger, Ledger, PgFairnessLog
from services.engine.service import Engine
from services.engine.store import Store

log = get_logger()


def _engine(state: State) -> Engine:
    engine: Engine = state.engine
    return engine


@post("/internal/matches", status_code=200)
async def create_match(state: State, data: JSONBody[CreateMatch]) -> MatchCreated:
    return await _engine(state).create(data)


@get("/internal/matches/{match_id:str}")
async def match_state(state: State, match_id: FromPath[str]) -> PublicMatchState:
    return await _engine(state).public_state(match_id)


@get("/internal/matches/{match_id:str}/result")
async def match_result(state: State, match_id: FromPath[str]) -> MatchResult:
    return await _engine(state).result(match_id)


@get("/internal/matches/{match_id:str}/seats/{seat:int}/view")
async def seat_view(state: State, match_id: FromPath[str], seat: FromPath[int]) -> SeatSnapshot:
    return await _engine(state).snapshot(match_id, seat)


@get("/internal/matches/{match_id:str}/seats/{seat:int}/events")
async def seat_events(
    state: State,
    match_id: FromPath[str],
    seat: FromPath[int],
    after: int = Parameter(default=0, ge=0),
    wait_ms: int = Parameter(default=0, ge=0, le=MAX_WAIT_MS),
    limit: int = Parameter(default=MAX_EVENTS_PAGE, ge=1, le=MAX_EVENTS_PAGE),
) -> EventPage:
    return await _engine(state).events(match_id, seat, after, wait_ms, limit)


@get("/internal/matches/{match_id:str}/seats/{seat:int}/feed")
async def seat_feed(
    state: State,
    match_id: FromPath[str],
    seat: FromPath[int],
    after: int = Parameter(default=0, ge=0),
    limit: int = Parameter(default=MAX_EVENTS_PAGE, ge=1, le=MAX_EVENTS_PAGE),
) -> SeatFeed:
    return await _engine(state).feed(match_id, seat, after, limit)


# The two routes every action goes through (the action, and the feeds read when a socket is
# woken) are plain ASGI handlers: Litestar's per-request signature parsing, dependency
# resolution and response building cost more CPU than the engine's own work on an action.
# Behind the same middleware (service credential, request id, metrics) and with the same
# answers: the body decoded by msgspec against the contract (400 invalid_request), the
# engine's ServiceError as {"error", "detail"}, anything else a logged 500.
_JSON_HEADERS = [(b"content-type", b"application/json")]
_submit_decoder = msgspec.json.Decoder(SubmitAction)
_reads_decoder = msgspec.json.Decoder(FeedReads)
_encoder = msgspec.json.Encoder()


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ServiceError(400, "invalid_request", "the client went away")
        chunk = cast(bytes, message.get("body", b""))
        size += len(chunk)
        if size > MAX_REQUEST_BODY_BYTES:
            raise ServiceError(413, "body_too_large", "request body too large")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _answer(send: Send, status: int, body: bytes) -> None:
    start: HTTPResponseStartEvent = {
        "type": "http.response.start",
        "status": status,
        "headers": [*_JSON_HEADERS, (b"content-length", str(len(body)).encode())],
    }
    await send(start)
    end: HTTPResponseBodyEvent = {"type": "http.response.body", "body": body, "more_body": False}
    await send(end)


def _error(code: str, detail: str) -> bytes:
    return _encoder.encode(ErrorBody(error=code, detail=detail))


async def _post_route(
    scope: Scope,
    receive: Receive,
    send: Send,
    decoder: msgspec.json.Decoder[Any],
    run: Callable[[Engine, str, Any], Awaitable[Any]],
) -> None:
    try:
        if scope.get("method") != "POST":
            raise ServiceError(405, "method_not_allowed", "Method Not Allowed")
        raw = await _read_body(receive)
        try:
            data = decoder.decode(raw)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise ServiceError(400, "invalid_request", f"invalid body: {str(exc)[:400]}") from None
        match_id = str(scope["path_params"]["match_id"])
        result = await run(_engine(scope["app"].state), match_id, data)
    except ServiceError as exc:
        await _answer(send, exc.status, _error(exc.code, exc.detail))
        return
    except Exception as exc:
        log.exception("unhandled_error", path=scope.get("path", ""), error=type(exc).__name__)
        await _answer(send, 500, _error("server_error", "internal error"))
        return
    await _answer(send, 200, _encoder.encode(result))


async def _submit(engine: Engine, match_id: str, data: SubmitAction) -> ActionApplied:
    return await engine.submit(match_id, data)


async def _feeds(engine: Engine, match_id: str, data: FeedReads) -> SeatFeeds:
    feeds = await engine.feeds(match_id, [(r.seat, r.after) for r in data.reads])
    return SeatFeeds(feeds=feeds)


async def submit_action(scope: Scope, receive: Receive, send: Send) -> None:
    """SubmitAction -> ActionApplied."""
    await _post_route(scope, receive, send, _submit_decoder, _submit)


async def seat_feeds(scope: Scope, receive: Receive, send: Send) -> None:
    """FeedReads -> SeatFeeds."""
    await _post_route(scope, receive, send, _reads_decoder, _feeds)


# Match ids as the router takes them (one path segment); anything else goes to the router.
_MATCH = r"/internal/matches/(?P<match_id>[^/]+)"
DIRECT_ROUTES = (
    DirectRoute(
        re.compile(_MATCH + "/actions"), "/internal/matches/{match_id}/actions", submit_action
    ),
    DirectRoute(re.compile(_MATCH + "/feeds"), "/internal/matches/{match_id}/feeds", seat_feeds),
)


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
        fair: Any = fairness
        if fair is None:
            fair = PgFairnessLog(app.state.db, key)
            await fair.start()
        led: Any = ledger if ledger is not None else HttpLedger(settings)
        engine = Engine(store, clock or RealClock(), key, fair, led)
        app.state.engine = engine
        app.state.engine_store = store
        await engine.start(scan=scan)

    async def stop_engine(app: Litestar) -> None:
        engine: Engine | None = app.state.get("engine")
        if engine is not None:
            await engine.stop()
            await engine.store.stop()
            if isinstance(engine.ledger, HttpLedger):
                await engine.ledger.aclose()
            if isinstance(engine.fairness, PgFairnessLog):
                await engine.fairness.aclose()

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
            *AUDIT_ROUTES,
        ],
        direct_routes=DIRECT_ROUTES,
        light_ping=True,
        on_startup=[start_engine],
        on_shutdown=[stop_engine],
    )
