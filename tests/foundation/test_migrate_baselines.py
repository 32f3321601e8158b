"""Each schema is one baseline migration built from its SQLAlchemy metadata and its function
files: a migrated database matches the metadata (Alembic's autogenerate finds no drift), its
functions are the `.sql` files, and the baseline undoes and redoes cleanly."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import pool
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from services.common.db import sqlalchemy_url
from services.common.migrate import COMPONENTS, upgrade
from services.common.schema_source import function_sources

ROOT = Path(__file__).resolve().parents[2]
# component -> (module holding `metadata`, folder of its function files or None)
SOURCES: dict[str, tuple[str, Path | None]] = {
    "ledger": ("ledger.schema", ROOT / "ledger" / "sql"),
    "fairness": ("fairness.schema", ROOT / "fairness" / "sql"),
    "engine": ("services.engine.schema", None),
    "matchmaking": ("services.matchmaking.schema", ROOT / "services" / "matchmaking" / "sql"),
    "gateway": ("api.schema", None),
    "integrity": ("integrity.schema", None),
}


def _metadata(component: str) -> sa.MetaData:
    metadata = importlib.import_module(SOURCES[component][0]).metadata
    assert isinstance(metadata, sa.MetaData)
    return metadata


def _alembic(url: str, component: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(COMPONENTS[component][1]))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def _with_connection(url: str, work: Callable[[Connection], Any]) -> Any:
    async def run() -> Any:
        engine = create_async_engine(sqlalchemy_url(url), poolclass=pool.NullPool)
        try:
            async with engine.connect() as conn:
                return await conn.run_sync(work)
        finally:
            await engine.dispose()

    return asyncio.run(run())


def _drift(url: str, component: str) -> list[Any]:
    schema = COMPONENTS[component][0]

    def include(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
        if type_ == "table":
            return obj.schema == schema and name != "alembic_version"
        return True

    def compare(conn: Connection) -> list[Any]:
        context = MigrationContext.configure(
            conn,
            opts={
                "include_schemas": True,
                "include_name": lambda name, type_, parent: type_ != "schema" or name == schema,
                "include_object": include,
                "compare_type": True,
                "compare_server_default": True,
            },
        )
        return list(compare_metadata(context, _metadata(component)))

    result: list[Any] = _with_connection(url, compare)
    return result


async def _fetch(url: str, sql: str, *args: object) -> list[tuple[Any, ...]]:
    conn = await asyncpg.connect(url)
    try:
        return [tuple(r) for r in await conn.fetch(sql, *args)]
    finally:
        await conn.close()


def _catalog(url: str, schema: str) -> dict[str, list[tuple[Any, ...]]]:
    """What a baseline creates, as the catalog shows it."""
    queries = {
        "columns": "SELECT table_name, column_name, data_type, domain_name, column_default, "
        "is_nullable, generation_expression FROM information_schema.columns "
        "WHERE table_schema = $1 ORDER BY 1, 2",
        "constraints": "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) "
        "FROM pg_constraint WHERE connamespace = $1::regnamespace ORDER BY 1, 2",
        "indexes": "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1 ORDER BY 1",
        "triggers": "SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid) "
        "FROM pg_trigger WHERE NOT tgisinternal AND tgrelid::regclass::text LIKE $1 || '.%' "
        "ORDER BY 1, 2",
        "functions": "SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid), "
        "p.proacl::text FROM pg_proc p WHERE p.pronamespace = $1::regnamespace ORDER BY 1",
        "domains": "SELECT t.typname, format_type(t.typbasetype, t.typtypmod), "
        "pg_get_constraintdef(c.oid) FROM pg_type t JOIN pg_constraint c ON c.contypid = t.oid "
        "WHERE t.typnamespace = $1::regnamespace AND t.typtype = 'd' ORDER BY 1",
        "relations": "SELECT relname, relkind, reloptions::text FROM pg_class "
        "WHERE relnamespace = $1::regnamespace ORDER BY 1",
        "grants": "SELECT table_name, privilege_type, grantee FROM "
        "information_schema.role_table_grants WHERE table_schema = $1 ORDER BY 1, 2, 3",
        "column_grants": "SELECT table_name, column_name, privilege_type, grantee FROM "
        "information_schema.column_privileges WHERE table_schema = $1 "
        "AND grantee = 'mesa_app' ORDER BY 1, 2, 3",
    }
    return {k: asyncio.run(_fetch(url, q, schema)) for k, q in queries.items()}


@pytest.fixture(scope="module")
def migrated(database_url: str) -> str:
    upgrade(database_url)
    return database_url


@pytest.mark.parametrize("component", sorted(SOURCES))
def test_one_baseline_per_schema(component: str) -> None:
    versions = sorted((COMPONENTS[component][1] / "versions").glob("*.py"))
    assert [p.name.split("_", 1)[0] for p in versions] == ["0001"]
    assert "baseline" in versions[0].name


# Autogenerate only warns when a generated column's expression differs: a drift here too.
@pytest.mark.filterwarnings("error::UserWarning")
@pytest.mark.parametrize("component", sorted(SOURCES))
def test_autogenerate_finds_no_drift(migrated: str, component: str) -> None:
    assert _drift(migrated, component) == []


def test_autogenerate_sees_a_drift_when_there_is_one(migrated: str) -> None:
    """The comparison is not blind: a column the metadata lacks is reported."""
    asyncio.run(_fetch(migrated, "ALTER TABLE engine.matches ADD COLUMN extra int"))
    try:
        drift = _drift(migrated, "engine")
    finally:
        asyncio.run(_fetch(migrated, "ALTER TABLE engine.matches DROP COLUMN extra"))
    assert [d[0] for d in drift] == ["remove_column"]
    assert _drift(migrated, "engine") == []


@pytest.mark.parametrize("component", ["ledger", "fairness", "matchmaking"])
def test_the_database_functions_are_the_sql_files(migrated: str, component: str) -> None:
    """Re-applying each file changes no definition, and the schema has no other function."""
    schema = COMPONENTS[component][0]
    folder = SOURCES[component][1]
    assert folder is not None
    sources = function_sources(folder, schema)

    async def check() -> tuple[set[str], list[str]]:
        conn = await asyncpg.connect(migrated)
        definitions = (
            "SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc p "
            "WHERE p.pronamespace = $1::regnamespace ORDER BY 1"
        )
        try:
            before = dict(await conn.fetch(definitions, schema))
            changed = []
            async with conn.transaction():
                for name, source in sources.items():
                    await conn.execute(source)
                    after = dict(await conn.fetch(definitions, schema))
                    if after != before:
                        changed.append(name)
                        before = after
                raise _Rollback
        except _Rollback:
            pass
        finally:
            await conn.close()
        return set(before), changed

    names, changed = asyncio.run(check())
    assert names == set(sources)
    assert changed == []


class _Rollback(Exception):
    pass


@pytest.mark.parametrize("component", sorted(SOURCES))
def test_downgrade_leaves_nothing_and_upgrade_rebuilds_the_same(
    migrated: str, component: str
) -> None:
    schema = COMPONENTS[component][0]
    before = _catalog(migrated, schema)
    command.downgrade(_alembic(migrated, component), "base")
    left = {
        kind: [row for row in rows if "alembic_version" not in str(row)]
        for kind, rows in _catalog(migrated, schema).items()
    }
    assert left == {kind: [] for kind in left}
    upgrade(migrated, [component])
    assert _catalog(migrated, schema) == before
    assert _drift(migrated, component) == []
