"""Shared body of every component's alembic `env.py`.

Each component (ledger, fairness, engine, matchmaking, gateway) owns one PostgreSQL schema
and keeps its own version table inside it, so components migrate independently.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy import pool, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from services.common.db import sqlalchemy_url


def _run(connection: Connection, schema: str) -> None:
    connection.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
    context.configure(
        connection=connection,
        version_table_schema=schema,
        include_schemas=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_async(url: str, schema: str) -> None:
    engine = create_async_engine(sqlalchemy_url(url), poolclass=pool.NullPool)
    async with engine.connect() as connection:
        await connection.run_sync(_run, schema)
        await connection.commit()
    await engine.dispose()


def run_migrations(schema: str) -> None:
    url = context.config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("alembic config has no sqlalchemy.url")
    if context.is_offline_mode():
        context.configure(url=url, version_table_schema=schema, literal_binds=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    asyncio.run(_run_async(url, schema))
