"""The ledger's baseline: one-column checks are domains refusing under the constraint's name,
the journal is append-only for everyone (triggers) and the service role may change only the
columns a posting or a closing moves (grants), the house accounts exist, and the baseline
undoes and redoes cleanly with sealed books in the database."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest
from alembic import command
from alembic.config import Config

from ledger import chain
from ledger.ops import Ledger
from ledger.schema import APPEND_ONLY, COMMISSION_SHARDS
from services.common.db import APP_ROLE
from services.common.migrate import COMPONENTS, upgrade


def _alembic(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(COMPONENTS["ledger"][1]))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


async def _fetch(url: str, sql: str) -> list[tuple[Any, ...]]:
    conn = await asyncpg.connect(url)
    try:
        return [tuple(r) for r in await conn.fetch(sql)]
    finally:
        await conn.close()


async def _refusal(url: str, sql: str, *, role: str | None = None) -> tuple[str, str]:
    conn = await asyncpg.connect(url)
    try:
        if role is not None:
            await conn.execute(f"SET ROLE {role}")
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


@pytest.fixture(scope="module")
def books(database_url: str) -> str:
    """A migrated ledger with a posted and sealed journal."""
    upgrade(database_url, ["ledger"])

    async def post_and_seal() -> None:
        ledger = await Ledger.connect(database_url, min_size=1, max_size=2)
        try:
            await ledger.open_wallet("mig_p")
            for n in range(40):
                await ledger.deposit(f"mig-{n}-{uuid.uuid4().hex}", "mig_p", 1 + n, "USD", "mig")
        finally:
            await ledger.close()
        conn = await asyncpg.connect(database_url)
        try:
            assert await chain.seal(conn) >= 40
        finally:
            await conn.close()

    asyncio.run(post_and_seal())
    return database_url


def test_one_column_checks_are_domains_refusing_under_the_constraint_name(books: str) -> None:
    columns = asyncio.run(
        _fetch(
            books,
            "SELECT table_name, column_name, domain_name FROM information_schema.columns "
            "WHERE table_schema = 'ledger' AND domain_name IS NOT NULL",
        )
    )
    domains = {(t, c): d for t, c, d in columns}
    assert domains[("accounts", "kind")] == "accounts_kind"
    assert domains[("entries", "kind")] == "entries_kind"
    checks = asyncio.run(
        _fetch(
            books,
            "SELECT conname FROM pg_constraint WHERE conrelid = 'ledger.accounts'::regclass "
            "AND contype = 'c'",
        )
    )
    assert {c for (c,) in checks} == {"accounts_balance_nonnegative", "accounts_closed_at_zero"}
    for sql, constraint in BAD_ROWS:
        state, message = asyncio.run(_refusal(books, sql))
        assert state == "23514" and constraint in message


@pytest.mark.parametrize("table", APPEND_ONLY)
def test_the_journal_refuses_update_delete_and_truncate_even_to_its_owner(
    books: str, table: str
) -> None:
    for sql in (
        f"UPDATE ledger.{table} SET {_first_column(books, table)} = {_first_column(books, table)}",
        f"DELETE FROM ledger.{table}",
        f"TRUNCATE ledger.{table} CASCADE",
    ):
        rows = asyncio.run(_fetch(books, f"SELECT count(*) FROM ledger.{table}"))[0][0]
        if not sql.startswith("TRUNCATE") and rows == 0:
            continue  # a row trigger needs a row (every table but reversals has some)
        state, message = asyncio.run(_refusal(books, sql))
        assert (state, message) == ("LD403", "append_only"), sql


def _first_column(url: str, table: str) -> str:
    return str(
        asyncio.run(
            _fetch(
                url,
                "SELECT column_name FROM information_schema.columns WHERE table_schema = "
                f"'ledger' AND table_name = '{table}' ORDER BY ordinal_position LIMIT 1",
            )
        )[0][0]
    )


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE ledger.accounts SET code = code",
        "UPDATE ledger.accounts SET kind = kind",
        "UPDATE ledger.pots SET stake_total = stake_total",
        "DELETE FROM ledger.accounts",
        "INSERT INTO ledger.alembic_version VALUES ('x')",
    ],
)
def test_the_service_role_changes_only_what_postings_move(books: str, sql: str) -> None:
    state, _ = asyncio.run(_refusal(books, sql, role=APP_ROLE))
    assert state == "42501"  # insufficient_privilege


def test_the_house_accounts_are_there(books: str) -> None:
    rows = asyncio.run(
        _fetch(books, "SELECT code, kind, currency FROM ledger.accounts WHERE player IS NULL")
    )
    expected = {("external:cashier", "cashier", "USD")} | {
        (f"house:commission:{n:02d}", "commission", "USD") for n in range(COMMISSION_SHARDS)
    }
    assert set(rows) >= expected


def test_the_baseline_round_trips_and_the_chain_still_verifies(books: str) -> None:
    """Down to nothing (no ledger table is left) and up again: a fresh, verifiable chain."""
    command.downgrade(_alembic(books), "base")
    left = asyncio.run(_fetch(books, "SELECT tablename FROM pg_tables WHERE schemaname = 'ledger'"))
    assert left == [("alembic_version",)]
    upgrade(books, ["ledger"])

    async def verified() -> chain.ChainReport:
        conn = await asyncpg.connect(books)
        try:
            return await chain.verify(conn)
        finally:
            await conn.close()

    assert asyncio.run(verified()).ok
