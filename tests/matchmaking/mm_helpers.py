"""Matchmaking test stack: the real ledger service app, a fake engine, matchmaking, one clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import httpx
import msgspec
from litestar import Litestar, Response, get, post
from litestar.params import FromPath, JSONBody

from services.common.http import InternalClient, RemoteError
from services.engine.contract import CreateMatch, MatchCreated, PublicMatchState
from services.ledger.app import create_app as create_ledger_app
from services.ledger.contract import (
    AccountOpened,
    DepositRequest,
    EntryResult,
    OpenAccount,
    WalletBalance,
)
from services.matchmaking import contract as c
from services.matchmaking.app import create_app
from services.matchmaking.config import MatchmakingConfig
from tests.conftest import make_settings


class FakeClock:
    def __init__(self, now_ms: int = 1_800_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


@dataclass
class FakeEngine:
    """Records CreateMatch calls; `refuse` makes it answer 422 for good."""

    created: dict[str, CreateMatch] = field(default_factory=dict)
    refuse: bool = False
    over: set[str] = field(default_factory=set)

    def app(self) -> Litestar:
        engine = self

        @get("/internal/matches/{match_id:str}")
        async def state(match_id: FromPath[str]) -> Response[Any]:
            spec = engine.created.get(match_id)
            if spec is None:
                return Response({"error": "unknown_match", "detail": match_id}, status_code=404)
            return Response(
                PublicMatchState(
                    match_id=match_id,
                    variant=spec.variant,
                    options=spec.options,
                    tier=spec.tier,
                    seq=1,
                    status="finished" if match_id in engine.over else "playing",
                    seats=[],
                    scores=[],
                    hand_no=1,
                    deal_id=None,
                    phase="over" if match_id in engine.over else "play",
                    turn=0,
                    counts=[],
                    table=[],
                    deadline=None,
                    result=None,
                )
            )

        @post("/internal/matches", status_code=200)
        async def create(data: JSONBody[CreateMatch]) -> Response[Any]:
            if engine.refuse:
                return Response({"error": "bad_match", "detail": "refused"}, status_code=422)
            engine.created[data.match_id] = data
            return Response(MatchCreated(match_id=data.match_id, seq=0, status="live"))

        return Litestar([create, state])


class FlakyTransport(httpx.AsyncBaseTransport):
    """Wraps an ASGI transport; while `down` is set every call fails like a dead connection."""

    def __init__(self, app: Litestar) -> None:
        self.inner = httpx.ASGITransport(app=app)
        self.down = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("ledger down (test)")
        return await self.inner.handle_async_request(request)


@dataclass
class Stack:
    mm: InternalClient
    ledger: InternalClient
    app: Litestar
    clock: FakeClock
    engine: FakeEngine
    ledger_transport: FlakyTransport
    database_url: str

    @property
    def matchmaker(self) -> Any:
        return self.app.state.matchmaker

    async def deposit(self, player: str, cents: int) -> None:
        await self.ledger.post("/v1/accounts", OpenAccount(player=player), AccountOpened)
        await self.ledger.post(
            "/v1/deposits",
            DepositRequest(
                idempotency_key=f"dep-{player}-{cents}", player=player, amount=cents, reference="t"
            ),
            EntryResult,
        )

    async def balance(self, player: str) -> int:
        return (await self.ledger.get(f"/v1/wallets/{player}", WalletBalance)).balance

    async def quick(
        self, player: str, kind: str, tier: str, key: str | None = None, **kw: Any
    ) -> c.JoinResult:
        body = c.QuickJoin(
            idempotency_key=key or f"q-{player}-{kind}-{tier}",
            player_id=player,
            kind=kind,
            tier=tier,
            **kw,
        )
        return await self.mm.post("/v1/join/quick", body, c.JoinResult)

    async def leave(self, player: str, table_id: str, key: str | None = None) -> c.LeaveResult:
        body = c.Leave(
            idempotency_key=key or f"l-{player}-{table_id}", player_id=player, table_id=table_id
        )
        return await self.mm.post("/v1/leave", body, c.LeaveResult)

    async def status(self, table_id: str) -> c.TableStatus:
        return await self.mm.get(f"/v1/tables/{table_id}", c.TableStatus)

    async def open_holds(self) -> dict[str, int]:
        """reservation id -> cents, for every hold account still open in the ledger."""
        conn = await asyncpg.connect(self.database_url)
        try:
            rows = await conn.fetch(
                "SELECT reservation_id, balance FROM ledger.accounts WHERE kind = 'hold' "
                "AND closed_at IS NULL AND balance > 0"
            )
        finally:
            await conn.close()
        return {r["reservation_id"]: int(r["balance"]) for r in rows}

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        conn = await asyncpg.connect(self.database_url)
        try:
            return list(await conn.fetch(sql, *args))
        finally:
            await conn.close()


@asynccontextmanager
async def stack(
    database_url: str,
    secret: bytes,
    config: MatchmakingConfig | None = None,
    pool_size: int = 20,
) -> AsyncIterator[Stack]:
    settings = make_settings(database_url, secret)
    clock = FakeClock()
    engine = FakeEngine()
    ledger_app = create_ledger_app(settings, pool_size=pool_size, seal_in_background=False)
    flaky = FlakyTransport(ledger_app)
    app = create_app(
        settings,
        config=config or MatchmakingConfig(sweep_interval_ms=0),
        clock=clock,
        ledger_transport=flaky,
        engine_transport=httpx.ASGITransport(app=engine.app()),
        pool_size=pool_size,
    )
    # Lifespans run in this event loop so the pools and the ASGI transports share it.
    async with ledger_app.lifespan(), app.lifespan():
        mm = InternalClient(
            "http://mm",
            settings,
            "gateway",
            audience="matchmaking",
            transport=httpx.ASGITransport(app=app),
        )
        ledger = InternalClient(
            "http://ledger",
            settings,
            "gateway",
            audience="ledger",
            transport=httpx.ASGITransport(app=ledger_app),
        )
        try:
            yield Stack(mm, ledger, app, clock, engine, flaky, database_url)
        finally:
            await mm.aclose()
            await ledger.aclose()


async def refused(coro: Any) -> RemoteError:
    try:
        await coro
    except RemoteError as exc:
        return exc
    raise AssertionError("expected a refusal")


def decode(body: bytes, kind: type[Any]) -> Any:
    return msgspec.json.decode(body, type=kind)
