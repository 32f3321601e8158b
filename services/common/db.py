"""Database access for services, as `mesa_app`: an asyncpg pool (ledger, engine, matchmaking)
or a SQLAlchemy 2 Core async engine over asyncpg (the gateway); one of them per service, the
one its traffic and its /health use (docs/explanation/architecture.md, Database).

Every connection a service opens starts with `role=mesa_app` (a startup parameter, so there
is no extra round trip): the application can do only what the migrations granted that role,
e.g. INSERT but never UPDATE or DELETE on journal entries and log leaves.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
from sqlalchemy import event, text
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.util.concurrency import await_

APP_ROLE = "mesa_app"
# Bounded pools: a burst waits for a connection instead of opening hundreds.
DEFAULT_POOL_SIZE = 10
DEFAULT_MAX_OVERFLOW = 10
DEFAULT_POOL_TIMEOUT_S = 10
# A health check waits this long for a connection and its answer: a saturated or stuck pool
# is reported unhealthy instead of hanging the probe.
HEALTH_TIMEOUT_S = 5.0


def asyncpg_dsn(url: str) -> str:
    """The plain `postgresql://` form that asyncpg and libpq tools accept."""
    parts = urlsplit(url)
    scheme = "postgresql"
    return urlunsplit((scheme, parts.netloc, parts.path, parts.query, parts.fragment))


def sqlalchemy_url(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(("postgresql+asyncpg", parts.netloc, parts.path, parts.query, parts.fragment))


def app_server_settings(application_name: str = "mesa") -> dict[str, str]:
    return {"role": APP_ROLE, "application_name": application_name}


def create_engine(
    url: str,
    *,
    application_name: str = "mesa",
    as_app_role: bool = True,
    pool_size: int = DEFAULT_POOL_SIZE,
    max_overflow: int = DEFAULT_MAX_OVERFLOW,
    **kwargs: Any,
) -> AsyncEngine:
    """A pooled engine whose connections are checked on every checkout (a pool keeps no
    connection PostgreSQL dropped, e.g. after a restart), in one round trip
    (`_ping_on_checkout`) instead of SQLAlchemy's three for asyncpg."""
    settings = (
        app_server_settings(application_name)
        if as_app_role
        else {"application_name": application_name}
    )
    engine = create_async_engine(
        sqlalchemy_url(url),
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_timeout=DEFAULT_POOL_TIMEOUT_S,
        connect_args={"server_settings": settings, "timeout": 5},
        # A statement's parameters stay out of its errors' text (which tracebacks and logs
        # show): they carry CSRF tokens, token hashes, seeds.
        hide_parameters=kwargs.pop("hide_parameters", True),
        **kwargs,
    )
    event.listen(engine.sync_engine.pool, "checkout", _ping_on_checkout)
    return engine


def _ping_on_checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """The pessimistic check in one round trip: an empty statement on the asyncpg connection.

    SQLAlchemy's asyncpg ping wraps it in BEGIN and ROLLBACK (for pgbouncer's transaction
    mode, which Mesa does not use): three round trips per checkout, a fifth of the gateway's
    CPU under `make load`. A dead connection raises DisconnectionError: the pool discards it
    and checks out another (SQLAlchemy retries a few times)."""
    try:
        await_(dbapi_connection.driver_connection.fetchrow(";"))
    except Exception as exc:
        raise DisconnectionError(f"pooled connection is dead: {type(exc).__name__}") from exc


async def create_pool(
    url: str,
    *,
    application_name: str,
    max_size: int,
    min_size: int = 2,
    command_timeout_s: float | None = None,
    reset: Callable[[asyncpg.Connection], Awaitable[None]] | None = None,
    as_app_role: bool = True,
) -> asyncpg.Pool:
    """An asyncpg pool whose sessions run as `mesa_app` (unless `as_app_role` is false)."""
    settings = (
        app_server_settings(application_name)
        if as_app_role
        else {"application_name": application_name}
    )
    return await asyncpg.create_pool(
        asyncpg_dsn(url),
        min_size=min_size,
        max_size=max_size,
        server_settings=settings,
        command_timeout=command_timeout_s,
        reset=reset,
    )


async def check_database(db: AsyncEngine | asyncpg.Pool | None) -> bool:
    """True when a trivial query succeeds on `db`, the pool that serves the service's
    traffic (an exhausted or closed pool fails the check); used by /health."""
    try:
        if isinstance(db, asyncpg.Pool):
            async with db.acquire(timeout=HEALTH_TIMEOUT_S) as conn:
                await conn.fetchval("SELECT 1", timeout=HEALTH_TIMEOUT_S)
        elif isinstance(db, AsyncEngine):
            async with db.connect() as conn:
                await conn.execute(text("SELECT 1"))
        else:
            return False
    except Exception:
        return False
    return True


async def keep_session(conn: Any) -> None:
    """An asyncpg pool's `reset=` for pools whose users leave no session state (no LISTEN,
    SET, cursors or session advisory locks): asyncpg's own step (a ROLLBACK of a transaction
    left open) suffices, and the default reset query, one more round trip per release, is
    skipped."""
