"""A thin asyncpg layer: named `:params` SQL, one pool, transactions, rows with attributes.

The hot path (join, confirm, start, leave) is one call of a `matchmaking.*` function per step
(`Matchmaker._call` on the pool); the rare paths (refusals, repairs, expiry) run short
transactions through this layer. asyncpg's prepared-statement cache serves both. Sessions run as `mesa_app`.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import lru_cache
from typing import Any

import asyncpg

from services.common.db import APP_ROLE, asyncpg_dsn, keep_session

_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_][A-Za-z0-9_]*)")
RETRY_SQLSTATES = frozenset({"23505", "40001", "40P01"})
STATEMENT_TIMEOUT_S = 10


@lru_cache(maxsize=512)
def compile_sql(sql: str) -> tuple[str, tuple[str, ...]]:
    """`:name` placeholders -> `$n`; returns the SQL and the parameter names in order."""
    names: list[str] = []

    def swap(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return _PARAM.sub(swap, sql), tuple(names)


def text(sql: str) -> str:
    return sql


class Row:
    __slots__ = ("_record",)

    def __init__(self, record: asyncpg.Record) -> None:
        self._record = record

    def __getattr__(self, name: str) -> Any:
        try:
            return self._record[name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def _mapping(self) -> dict[str, Any]:
        return dict(self._record)


class Result:
    def __init__(self, rows: list[Row]) -> None:
        self.rows = rows

    def first(self) -> Any:
        return self.rows[0] if self.rows else None

    def one(self) -> Any:
        if len(self.rows) != 1:
            raise LookupError(f"expected one row, got {len(self.rows)}")
        return self.rows[0]

    def all(self) -> list[Any]:
        return self.rows

    def scalar(self) -> Any:
        return self.rows[0]._record[0] if self.rows else None


class Conn:
    def __init__(self, conn: asyncpg.Connection) -> None:
        self.raw = conn

    async def execute(
        self, sql: str, params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None
    ) -> Result:
        query, names = compile_sql(sql)
        if isinstance(params, Sequence):
            await self.raw.executemany(query, [[p[n] for n in names] for p in params])
            return Result([])
        values = [params[n] for n in names] if params else []
        records = await self.raw.fetch(query, *values)
        return Result([Row(r) for r in records])


class Database:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    @classmethod
    async def connect(
        cls, url: str, *, max_size: int = 20, application_name: str = "mesa-mm"
    ) -> Database:
        pool = await asyncpg.create_pool(
            asyncpg_dsn(url),
            min_size=2,
            max_size=max_size,
            server_settings={"role": APP_ROLE, "application_name": application_name},
            command_timeout=STATEMENT_TIMEOUT_S,
            reset=keep_session,
        )
        return cls(pool)

    async def close(self) -> None:
        await self.pool.close()

    @asynccontextmanager
    async def begin(self) -> AsyncIterator[Conn]:
        async with self.pool.acquire() as conn, conn.transaction():
            yield Conn(conn)

    @asynccontextmanager
    async def connect_(self) -> AsyncIterator[Conn]:
        async with self.pool.acquire() as conn:
            yield Conn(conn)
