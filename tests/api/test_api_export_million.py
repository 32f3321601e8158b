"""The journal export at 1,000,000 journal lines, end to end: the ledger and the gateway on
uvicorn (the gateway reads the ledger through its internal client, as `mesa up` runs them),
the CSV streamed to the client and checked as it arrives: every line there once, in order,
adding up to zero, with the process's traced memory far below the size of the file.

The lines are written in one statement by a superuser (500,000 cashier deposits spread over
1,000 wallets, two postings each, with the running balances and versions the ledger's own
functions would record), then the accounts are set to what their postings add up to, and a
check like `reconcile`'s (balances, versions, last running balance) holds before the export.
Memory is the test process's resident set (it serves both apps and reads the answer),
sampled on every chunk: tracemalloc would trace it too, but made the run five times slower.
"""

from __future__ import annotations

import asyncio
import csv
import io
import resource
import time
from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest

from api.app import create_app as create_gateway
from ledger.ops import plain_dsn
from services.common.migrate import upgrade
from services.common.serve import uvicorn_options
from services.ledger.app import create_app as create_ledger
from tests.api.api_helpers import make_user, sign_in
from tests.api.platform_stack import COMPONENTS
from tests.conftest import make_settings
from tests.uvicorn_server import UvicornServer

pytestmark = pytest.mark.slow

ENTRIES = 500_000
LINES = 2 * ENTRIES
WALLETS = 1_000
# How much the process's resident memory may grow while the whole export goes through the
# ledger, the gateway and the client (all in this process); the CSV itself is over 100 MB.
GROWTH_BYTES = 64 * 1024 * 1024

# Deposit i (from 0) goes to wallet i % WALLETS, each wallet always receiving its own amount,
# so every running balance and version is arithmetic (no sort of a million rows): the
# wallet's k-th deposit leaves k times its amount; the cashier's running total after deposit
# i is its full cycles of all wallets plus the wallets of the last, partial one.
BULK = f"""
WITH w AS (
  SELECT n, (SELECT id FROM ledger.accounts WHERE code = 'wallet:mil' || n) AS id,
         100 + n % 97 AS amount,
         sum(100 + n % 97) OVER (ORDER BY n) AS upto
  FROM generate_series(0, {WALLETS - 1}) n
), cycle AS (
  SELECT sum(amount) AS total FROM w
), e AS (
  INSERT INTO ledger.entries (id, kind, idempotency_key, request_hash, reference, created_at,
                              result)
  SELECT i + 1, 'deposit', 'mil-' || i, sha256(('mil-' || i)::bytea), 'mil ' || i,
         now() - interval '1 hour' + i * interval '1 microsecond', '{{}}'::jsonb
  FROM generate_series(0, {ENTRIES - 1}) i
)
INSERT INTO ledger.postings (entry_id, leg, account_id, amount, currency, balance_after,
                             version_after)
SELECT i + 1, 1, $1, -w.amount, 'USD', -((i / {WALLETS}) * cycle.total + w.upto), i + 1
FROM generate_series(0, {ENTRIES - 1}) i JOIN w ON w.n = i % {WALLETS}, cycle
UNION ALL
SELECT i + 1, 2, w.id, w.amount, 'USD', w.amount * (i / {WALLETS} + 1), i / {WALLETS} + 1
FROM generate_series(0, {ENTRIES - 1}) i JOIN w ON w.n = i % {WALLETS}
"""


async def _million_lines(url: str) -> None:
    conn = await asyncpg.connect(plain_dsn(url))
    try:
        await conn.execute(
            f"SELECT ledger.open_wallet('mil' || n, 'USD') FROM generate_series(0, {WALLETS - 1}) n"
        )
        cashier = await conn.fetchval(
            "SELECT id FROM ledger.accounts WHERE code = 'external:cashier'"
        )
        async with conn.transaction():
            # The rows are consistent by construction (checked below): the foreign-key
            # triggers are skipped for this one transaction, and nothing waits on the WAL.
            await conn.execute("SET LOCAL session_replication_role = replica")
            await conn.execute("SET LOCAL synchronous_commit = off")
            await conn.execute("SET LOCAL work_mem = '256MB'")
            await conn.execute(BULK, cashier)
            await conn.execute(
                """
                UPDATE ledger.accounts a SET balance = s.total, version = s.n
                FROM (SELECT account_id, sum(amount) AS total, count(*) AS n
                      FROM ledger.postings GROUP BY account_id) s
                WHERE s.account_id = a.id
                """
            )
            await conn.execute(
                "SELECT setval('ledger.entries_id_seq', (SELECT max(id) FROM ledger.entries))"
            )
        await conn.execute("ANALYZE ledger.entries, ledger.postings, ledger.accounts")
        # the books are the ledger's own shape: every account is what its postings add up to,
        # the last posting's running balance and version included, and they add up to zero
        wrong = await conn.fetchval(
            """
            SELECT count(*) FROM ledger.accounts a
            LEFT JOIN (SELECT account_id, sum(amount) AS total, count(*) AS n,
                              max(version_after) AS top
                       FROM ledger.postings GROUP BY account_id) s ON s.account_id = a.id
            LEFT JOIN ledger.postings l ON l.account_id = a.id AND l.version_after = s.top
            WHERE a.balance <> coalesce(s.total, 0) OR a.version <> coalesce(s.n, 0)
               OR a.version <> coalesce(s.top, 0) OR l.balance_after <> a.balance
            """
        )
        totals = await conn.fetchrow(
            "SELECT count(*) AS n, sum(amount) AS total FROM ledger.postings"
        )
        if wrong or (totals["n"], totals["total"]) != (LINES, 0):
            raise AssertionError(f"bulk books: {wrong} accounts wrong, {dict(totals)}")
    finally:
        await conn.close()


@pytest.fixture(scope="module")
def million_db(database_url: str) -> str:
    upgrade(database_url, COMPONENTS)
    asyncio.run(make_user(database_url, "millon", "finance"))
    started = time.perf_counter()
    asyncio.run(_million_lines(database_url))
    print(f"1,000,000 journal lines written in {time.perf_counter() - started:.1f} s")
    return database_url


@pytest.fixture
async def served(million_db: str, internal_secret: bytes) -> AsyncIterator[str]:
    ledger_settings = make_settings(million_db, internal_secret)
    ledger = create_ledger(ledger_settings, seal_in_background=False)
    async with UvicornServer(ledger, **uvicorn_options()) as led:
        settings = make_settings(million_db, internal_secret, ledger_url=led.url)
        gateway = create_gateway(settings)
        async with UvicornServer(gateway, lifespan="on", log_config=None) as gw:
            yield gw.url


async def test_the_journal_export_streams_a_million_lines_in_bounded_memory(
    served: str, million_db: str
) -> None:
    client = httpx.AsyncClient(base_url=served, timeout=120)
    lines = 0
    total = 0
    body_bytes = 0
    last = (0, 0)
    header: list[str] = []
    rest = b""
    try:
        await sign_in(client, "millon")
        started = time.perf_counter()
        baseline = peak = _resident_bytes()
        async with client.stream("GET", "/api/finance/export/journal") as response:
            assert response.status_code == 200
            assert "content-length" not in response.headers
            async for chunk in response.aiter_raw():
                body_bytes += len(chunk)
                peak = max(peak, _resident_bytes())
                complete, _, rest = (rest + chunk).rpartition(b"\n")
                if not complete:
                    continue
                rows = csv.reader(io.StringIO(complete.decode() + "\n", newline=""))
                if not header:
                    header = next(rows)
                    amount, entry, leg = (header.index(c) for c in ("amount", "entry_id", "leg"))
                for row in rows:
                    key = (int(row[entry]), int(row[leg]))
                    assert key > last, (key, last)  # in order, none twice
                    last = key
                    total += int(row[amount])
                    lines += 1
    finally:
        await client.aclose()
    elapsed = time.perf_counter() - started
    print(
        f"exported {lines} lines, {body_bytes / 1e6:.0f} MB in {elapsed:.1f} s; resident memory "
        f"grew {(peak - baseline) / 1e6:.1f} MB"
    )
    assert rest == b""
    assert lines == LINES
    assert last == (ENTRIES, 2)
    assert total == 0
    assert peak - baseline < GROWTH_BYTES < body_bytes


def _resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()
