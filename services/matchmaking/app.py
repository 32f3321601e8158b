"""The matchmaking service's ASGI app: routes of `services.matchmaking.contract`."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
from litestar import Litestar, get, post
from litestar.datastructures import State
from litestar.params import FromPath, FromQuery, JSONBody

from services.common.app import create_service_app
from services.common.auth import GATEWAY, callers_opt
from services.common.config import Settings
from services.common.db import create_pool, keep_session
from services.common.errors import bad_request
from services.common.http import InternalClient
from services.common.logging import get_logger
from services.matchmaking import contract as c
from services.matchmaking.config import MatchmakingConfig, load_config
from services.matchmaking.kinds import CATALOGUE
from services.matchmaking.service import Clock, JoinSpec, Matchmaker, _hash, wall_clock_ms

log = get_logger()
# Every route serves the gateway's lobby and table screens.
LOBBY = callers_opt(GATEWAY)


def _mm(state: State) -> Matchmaker:
    mm: Matchmaker = state.matchmaker
    return mm


@get("/v1/kinds", opt=LOBBY)
async def list_kinds(state: State) -> c.KindList:
    return _mm(state).kinds()


@get("/v1/lobby", opt=LOBBY)
async def lobby(
    state: State, kind: FromQuery[str | None] = None, tier: FromQuery[str | None] = None
) -> c.Lobby:
    return await _mm(state).lobby(kind, tier)


async def _join_kind(state: State, op: str, data: c.QuickJoin | c.CreatePrivate) -> c.JoinResult:
    """A join that names a kind and tier: a quick join or a new private table."""
    mm = _mm(state)
    mm._kind(data.kind, data.tier)
    _check_partner(data.kind, data.partner_id)
    spec = JoinSpec(
        op,
        data.player_id,
        data.idempotency_key,
        _hash(data),
        data.partner_id,
        data.kind,
        data.tier,
        unlisted=isinstance(data, c.QuickJoin) and data.unlisted,
    )
    return await mm.join(spec)


@post("/v1/join/quick", status_code=200, opt=LOBBY)
async def quick_join(state: State, data: JSONBody[c.QuickJoin]) -> c.JoinResult:
    return await _join_kind(state, "quick", data)


@post("/v1/tables/private", status_code=200, opt=LOBBY)
async def create_private(state: State, data: JSONBody[c.CreatePrivate]) -> c.JoinResult:
    return await _join_kind(state, "private", data)


@post("/v1/join/code", status_code=200, opt=LOBBY)
async def join_by_code(state: State, data: JSONBody[c.JoinByCode]) -> c.JoinResult:
    spec = JoinSpec(
        "code",
        data.player_id,
        data.idempotency_key,
        _hash(data),
        data.partner_id,
        invite_code=data.invite_code,
    )
    return await _mm(state).join(spec)


@post("/v1/tables/cpu", status_code=200, opt=LOBBY)
async def play_vs_cpu(state: State, data: JSONBody[c.PlayVsCpu]) -> c.JoinResult:
    mm = _mm(state)
    tiers = mm.config.offered_tiers(data.kind)
    if tiers and "free" not in tiers:  # a kind offered, but only for money
        raise bad_request("cpu_free_only", "CPU tables are free tables")
    mm._kind(data.kind, "free")  # an unknown kind: 404 unknown_kind
    spec = JoinSpec(
        "cpu", data.player_id, data.idempotency_key, _hash(data), None, data.kind, "free"
    )
    return await mm.join(spec)


@post("/v1/leave", status_code=200, opt=LOBBY)
async def leave(state: State, data: JSONBody[c.Leave]) -> c.LeaveResult:
    return await _mm(state).leave(data)


@post("/v1/heartbeat", status_code=200, opt=LOBBY)
async def heartbeat(state: State, data: JSONBody[c.Heartbeat]) -> c.HeartbeatResult:
    return await _mm(state).heartbeat(data)


@post("/v1/disconnect", status_code=200, opt=LOBBY)
async def disconnect(state: State, data: JSONBody[c.Heartbeat]) -> c.HeartbeatResult:
    return await _mm(state).heartbeat(data, disconnect=True)


@get("/v1/players/{player_id:str}/tables", opt=LOBBY)
async def player_tables(state: State, player_id: FromPath[str]) -> c.PlayerTables:
    return await _mm(state).player_tables(player_id[:64])


@get("/v1/tables/{table_id:str}", opt=LOBBY)
async def table_status(state: State, table_id: FromPath[str]) -> c.TableStatus:
    return await _mm(state).table_status(table_id[:64])


def _check_partner(kind: str, partner_id: str | None) -> None:
    if partner_id is not None and not CATALOGUE[kind].pairs:
        raise bad_request("partner_not_pairs", f"{kind} is not played in pairs")


ROUTE_HANDLERS = [
    list_kinds,
    lobby,
    quick_join,
    create_private,
    join_by_code,
    play_vs_cpu,
    leave,
    heartbeat,
    disconnect,
    player_tables,
    table_status,
]


# A statement far slower than this means a stuck database: fail the request, keep the pool.
STATEMENT_TIMEOUT_S = 10


def create_app(
    settings: Settings,
    *,
    config: MatchmakingConfig | None = None,
    clock: Clock = wall_clock_ms,
    ledger_transport: httpx.AsyncBaseTransport | None = None,
    engine_transport: httpx.AsyncBaseTransport | None = None,
    pool_size: int = 20,
) -> Litestar:
    cfg = config.validate() if config is not None else load_config(settings)

    async def start(app: Litestar) -> None:
        ledger = InternalClient.of("ledger", settings, "matchmaking", transport=ledger_transport)
        engine = InternalClient.of("engine", settings, "matchmaking", transport=engine_transport)
        # The service's one database path: joins, sweeps and /health share this pool.
        db = app.state.db = await create_pool(
            settings.database_url,
            application_name="mesa-matchmaking",
            max_size=pool_size,
            command_timeout_s=STATEMENT_TIMEOUT_S,
            reset=keep_session,
        )
        app.state.matchmaker = Matchmaker(
            db, cfg, ledger=ledger, engine=engine, currency=settings.currency, clock=clock
        )
        if cfg.sweep_interval_ms > 0:
            app.state.sweeper = asyncio.create_task(_sweep_forever(app.state.matchmaker, cfg))

    async def stop(app: Litestar) -> None:
        task = app.state.get("sweeper")
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        mm: Matchmaker | None = app.state.get("matchmaker")
        if mm is not None:
            await mm.ledger.aclose()
            await mm.engine.aclose()
            await mm.db.close()

    return create_service_app(
        "matchmaking",
        settings,
        route_handlers=ROUTE_HANDLERS,
        on_startup=[start],
        on_shutdown=[stop],
        pool_size=None,
    )


async def _sweep_forever(mm: Matchmaker, cfg: MatchmakingConfig) -> None:
    while True:
        try:
            counts = await mm.sweep_once()
            if any(counts.values()):
                log.info("sweep", **counts)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # keep sweeping; one bad pass must not stop expiry
            log.exception("sweep_failed", error=type(exc).__name__)
        await asyncio.sleep(cfg.sweep_interval_ms / 1000)
