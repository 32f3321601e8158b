"""0006: the one-column checks became domains and the id checks lost their {1,n} bounds; the
same values are refused, and the migration undoes and redoes cleanly."""

from __future__ import annotations

import asyncio
import importlib.util
import uuid
from types import ModuleType

import asyncpg
import pytest
from alembic import command
from alembic.config import Config

from ledger import chain
from ledger.ops import Ledger
from services.common.migrate import COMPONENTS, upgrade


def _alembic(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(COMPONENTS["ledger"][1]))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


async def _fetch(url: str, sql: str) -> list[tuple[object, ...]]:
    conn = await asyncpg.connect(url)
    try:
        return [tuple(r) for r in await conn.fetch(sql)]
    finally:
        await conn.close()


def _schema(url: str) -> dict[str, list[tuple[object, ...]]]:
    """What 0006 touches: constraints, column types, function definitions, indexes."""
    return {
        "constraints": asyncio.run(
            _fetch(
                url,
                "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) "
                "FROM pg_constraint WHERE connamespace = 'ledger'::regnamespace ORDER BY 1, 2",
            )
        ),
        "columns": asyncio.run(
            _fetch(
                url,
                "SELECT table_name, column_name, data_type, domain_name "
                "FROM information_schema.columns WHERE table_schema = 'ledger' ORDER BY 1, 2",
            )
        ),
        "functions": asyncio.run(
            _fetch(
                url,
                "SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid) FROM pg_proc p "
                "WHERE p.pronamespace = 'ledger'::regnamespace AND p.prokind = 'f' ORDER BY 1",
            )
        ),
        "indexes": asyncio.run(
            _fetch(url, "SELECT indexdef FROM pg_indexes WHERE schemaname = 'ledger' ORDER BY 1")
        ),
    }


async def _refusal(url: str, sql: str) -> tuple[str, str]:
    conn = await asyncpg.connect(url)
    try:
        with pytest.raises(asyncpg.PostgresError) as refused:
            await conn.execute(sql)
        return refused.value.sqlstate, refused.value.message
    finally:
        await conn.close()


BAD_ROWS = (
    # (the statement, the constraint that refuses it)
    (
        "INSERT INTO ledger.accounts (code, kind, currency) VALUES ('x:1', 'bank', 'USD')",
        "accounts_kind_check",
    ),
    (
        "INSERT INTO ledger.accounts (code, kind, currency) VALUES ('x:2', 'wallet', 'usd')",
        "accounts_currency_check",
    ),
    (
        "INSERT INTO ledger.accounts (code, kind, currency) VALUES ('', 'wallet', 'USD')",
        "accounts_code_check",
    ),
    (
        "INSERT INTO ledger.accounts (code, kind, currency, balance) "
        "VALUES ('x:3', 'wallet', 'USD', -1)",
        "accounts_balance_nonnegative",
    ),
)


def test_checks_as_domains_refuse_the_same_and_round_trip(database_url: str) -> None:
    cfg = _alembic(database_url)
    upgrade(database_url, ["ledger"])
    command.downgrade(cfg, "0005_ledger_post_batch")
    before = _schema(database_url)
    upgrade(database_url, ["ledger"])
    after = _schema(database_url)

    domains = {(t, c): d for t, c, _, d in after["columns"] if d is not None}
    assert domains[("accounts", "kind")] == "accounts_kind"
    assert domains[("entries", "kind")] == "entries_kind"
    # the table keeps only the checks over two columns
    checks = {
        name
        for table, name, definition in after["constraints"]
        if table == "ledger.accounts" and str(definition).startswith("CHECK")
    }
    assert checks == {"accounts_balance_nonnegative", "accounts_closed_at_zero"}
    functions = "\n".join(str(body) for _, body in after["functions"])
    assert "{1,128}" not in functions and "{1,64}" not in functions
    bodies = {str(name): str(body) for name, body in after["functions"]}
    assert "force_generic_plan" in bodies["ledger.hold(text,bytea,text,text,bigint,text,text)"]
    for sql, constraint in BAD_ROWS:
        state, message = asyncio.run(_refusal(database_url, sql))
        assert state == "23514" and constraint in message

    command.downgrade(cfg, "0005_ledger_post_batch")
    assert _schema(database_url) == before
    upgrade(database_url, ["ledger"])
    assert _schema(database_url) == after


def _migration_0006() -> ModuleType:
    path = COMPONENTS["ledger"][1] / "versions" / "0006_ledger_cheaper_checks.py"
    spec = importlib.util.spec_from_file_location("ledger_0006", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


IDS = ["", "a", "a" * 63, "a" * 64, "a" * 65, "a" * 128, "a" * 129, "a b", "a\n", "\na",
       "é", "A-z_0.9:x", "p@mesa", "@", "-", "a$", "^a", "a*"]  # fmt: skip


def test_id_checks_accept_exactly_what_the_bounded_patterns_accept(url: str) -> None:
    checks = _migration_0006().ID_CHECKS
    assert checks
    for _, old, new in checks:
        variable = old.split()[0]
        rows = asyncio.run(
            _fetch_with(
                url,
                f"SELECT {variable}, ({old}) AS old, ({new}) AS new "
                f"FROM unnest($1::text[]) AS {variable}",
                IDS,
            )
        )
        assert len(rows) == len(IDS)
        assert [r for r in rows if r[1] != r[2]] == []


async def _fetch_with(url: str, sql: str, arg: list[str]) -> list[tuple[object, ...]]:
    conn = await asyncpg.connect(url)
    try:
        return [tuple(r) for r in await conn.fetch(sql, arg)]
    finally:
        await conn.close()


_SEALS = "SELECT id, entry_ids, entry_hashes, chain_hash FROM ledger.chain_seals ORDER BY id"


def test_the_chain_survives_the_move_of_its_links_into_the_seals(database_url: str) -> None:
    """0009 moves each seal's links into the seal; its downgrade rebuilds them. With sealed
    books, down to 0008 and up again: the links chain as 0001's sealer wrote them, the seals
    come back the same, and the chain verifies."""
    upgrade(database_url, ["ledger"])

    async def post_and_seal() -> None:
        ledger = await Ledger.connect(database_url, min_size=1, max_size=2)
        try:
            await ledger.open_wallet("mig_p")
            for n in range(130):
                await ledger.deposit(f"mig-{n}-{uuid.uuid4().hex}", "mig_p", 1 + n, "USD", "mig")
        finally:
            await ledger.close()
        conn = await asyncpg.connect(database_url)
        try:
            assert await chain.seal(conn) >= 130
        finally:
            await conn.close()

    async def verified() -> chain.ChainReport:
        conn = await asyncpg.connect(database_url)
        try:
            return await chain.verify(conn)
        finally:
            await conn.close()

    asyncio.run(post_and_seal())
    before = asyncio.run(_fetch(database_url, _SEALS))
    assert len(before) >= 3 and asyncio.run(verified()).ok

    command.downgrade(_alembic(database_url), "0008_ledger_batch_statements")
    links = asyncio.run(
        _fetch(
            database_url,
            "SELECT entry_id, entry_hash, chain_hash, seal_id FROM ledger.chain_links "
            "ORDER BY entry_id",
        )
    )
    assert [e for e, _, _, _ in links] == [e for _, ids, _, _ in before for e in ids]
    previous = chain.GENESIS
    for _, entry_hash, chain_hash, _ in links:
        previous = chain.link(previous, bytes(entry_hash))  # type: ignore[arg-type]
        assert bytes(chain_hash) == previous  # type: ignore[arg-type]
    assert previous == bytes(before[-1][3])  # type: ignore[arg-type]

    upgrade(database_url, ["ledger"])
    assert asyncio.run(_fetch(database_url, _SEALS)) == before
    report = asyncio.run(verified())
    assert report.ok and report.verified >= 130, report.problem
