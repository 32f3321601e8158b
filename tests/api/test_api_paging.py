"""Long answers through the gateway: a statement read by pages, the journal export streamed.

The ledger and the gateway are real uvicorn servers on loopback ports, so the gateway reads
the ledger through its internal client (`services/common/http.py`, on aiohttp), as `mesa up`
runs them; answers are far above a 64 KiB header limit. The rows are posted fast in
the setup: SQL statements calling `ledger.deposit` for a few hundred rows each.
"""

from __future__ import annotations

import asyncio
import csv
import io
from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest

from api.app import create_app as create_gateway
from ledger import reports
from ledger.ops import plain_dsn
from services.common.migrate import upgrade
from services.common.serve import uvicorn_options
from services.ledger.app import create_app as create_ledger
from services.ledger.contract import MAX_JOURNAL_PAGE, MAX_STATEMENT_PAGE
from tests.api.api_helpers import make_user, sign_in
from tests.api.platform_stack import COMPONENTS
from tests.conftest import make_settings
from tests.uvicorn_server import UvicornServer

LINES = 10_000


# Deposits per statement: each updates the wallet's row, and within one transaction every
# update leaves a row version the next one walks past (2,000 deposits: 4.9 s in one
# statement, 2.1 s in statements of 250).
DEPOSITS_PER_STATEMENT = 250


async def _post_deposits(url: str, player: str, n: int) -> None:
    """`n` deposits to `player`'s wallet (one entry, two postings each), a few hundred to a
    statement calling `ledger.deposit` for each."""
    conn = await asyncpg.connect(plain_dsn(url))
    try:
        await conn.execute("SELECT ledger.open_wallet($1, 'USD')", player)
        for first in range(1, n + 1, DEPOSITS_PER_STATEMENT):
            await conn.execute(
                """
                SELECT ledger.deposit('pg-' || $1 || '-' || i, sha256(('pg-' || i)::bytea), $1,
                                      100 + i, 'USD', 'bulk deposit ' || i)
                FROM generate_series($2::int, $3::int) AS i
                """,
                player,
                first,
                min(n, first + DEPOSITS_PER_STATEMENT - 1),
            )
    finally:
        await conn.close()


@pytest.fixture(scope="module")
def paging_db(database_url: str) -> str:
    upgrade(database_url, COMPONENTS)
    asyncio.run(make_user(database_url, "pagina"))
    asyncio.run(make_user(database_url, "libro", "finance"))
    asyncio.run(_post_deposits(database_url, "pagina", LINES))
    return database_url


@pytest.fixture
async def served(paging_db: str, internal_secret: bytes) -> AsyncIterator[str]:
    """The gateway's URL, with the ledger behind it, both on uvicorn."""
    ledger_settings = make_settings(paging_db, internal_secret)
    ledger = create_ledger(ledger_settings, seal_in_background=False)
    async with UvicornServer(ledger, **uvicorn_options()) as led:
        settings = make_settings(paging_db, internal_secret, ledger_url=led.url)
        gateway = create_gateway(settings)
        async with UvicornServer(gateway, lifespan="on", log_config=None) as gw:
            yield gw.url


async def _signed_in(url: str, name: str) -> httpx.AsyncClient:
    client = httpx.AsyncClient(base_url=url, timeout=60)
    await sign_in(client, name)
    return client


async def test_a_10000_line_statement_is_read_whole_by_pages(served, paging_db):
    client = await _signed_in(served, "pagina")
    try:
        lines: list[dict[str, object]] = []
        after, pages = 0, 0
        while True:
            response = await client.get("/api/me/statement", params={"after": after})
            assert response.status_code == 200, response.text
            page = response.json()
            pages += 1
            assert len(page["lines"]) <= MAX_STATEMENT_PAGE
            lines.extend(page["lines"])
            if page["next"] is None:
                break
            after = page["next"]
        too_big = await client.get("/api/me/statement", params={"limit": MAX_STATEMENT_PAGE + 1})
        assert too_big.status_code == 400
    finally:
        await client.aclose()
    assert pages == LINES // MAX_STATEMENT_PAGE + (1 if LINES % MAX_STATEMENT_PAGE else 0)
    assert page["opening_balance"] == 0
    total = sum(100 + i for i in range(1, LINES + 1))
    assert page["closing_balance"] == total
    conn = await asyncpg.connect(plain_dsn(paging_db))
    try:
        expected = await reports.statement(conn, "pagina")
    finally:
        await conn.close()
    assert expected is not None
    assert lines == expected["lines"] and len(lines) == LINES
    assert [line["version"] for line in lines] == list(range(1, LINES + 1))


async def test_the_journal_export_streams_over_a_megabyte_matching_the_ledger(served, paging_db):
    client = await _signed_in(served, "libro")
    try:
        chunks = 0
        body = bytearray()
        async with client.stream("GET", "/api/finance/export/journal") as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/csv")
            assert "content-length" not in response.headers  # streamed, not built whole
            async for chunk in response.aiter_raw():
                chunks += 1
                body += chunk
    finally:
        await client.aclose()
    assert len(body) > 1_000_000
    conn = await asyncpg.connect(plain_dsn(paging_db))
    try:
        expected = await reports.journal(conn)
    finally:
        await conn.close()
    assert len(expected) > 2 * MAX_JOURNAL_PAGE  # the export took several ledger pages
    rows = list(csv.reader(io.StringIO(body.decode())))
    assert rows[0] == list(reports.JOURNAL_COLUMNS)
    assert rows[1:] == [
        ["" if r[c] is None else str(r[c]) for c in reports.JOURNAL_COLUMNS] for r in expected
    ]
    assert chunks > 1


async def test_registration_opens_the_wallet_the_ledger_then_takes_money_for(served, paging_db):
    """A player's wallet is opened when they register (no deposit opens one any more): the
    ledger has it, empty, before any money moved."""
    client = httpx.AsyncClient(base_url=served, timeout=60)
    try:
        response = await client.post(
            "/api/auth/register",
            json={"username": "nuevo", "password": "a long enough secret 1"},
        )
        assert response.status_code == 201, response.text
        wallet = await client.get("/api/me/wallet")
        assert wallet.json() == {"player": "nuevo", "currency": "USD", "balance": 0}
    finally:
        await client.aclose()
    conn = await asyncpg.connect(plain_dsn(paging_db))
    try:
        row = await conn.fetchrow(
            "SELECT kind, balance, version FROM ledger.accounts WHERE code = 'wallet:nuevo'"
        )
    finally:
        await conn.close()
    assert row is not None and dict(row) == {"kind": "wallet", "balance": 0, "version": 0}


POTS = 23


async def _start_matches(url: str, n: int) -> None:
    """`n` $1 1v1 matches between two players, each a pot in the ledger."""
    from ledger.ops import Ledger, Seat

    ledger = await Ledger.connect(url)
    try:
        for player in ("olla_a", "olla_b"):
            await ledger.open_wallet(player)
            await ledger.deposit(f"olla-dep-{player}", player, 100 * n, "USD", "pots test")
        for m in range(n):
            seats = []
            for seat, player in enumerate(("olla_a", "olla_b")):
                reservation = f"olla-r-{m}-{seat}"
                await ledger.hold(f"olla-h-{m}-{seat}", player, reservation, 100)
                seats.append(Seat(seat=seat, player=player, reservation_id=reservation))
            await ledger.start_match(f"olla-s-{m}", f"olla-match-{m:03d}", "free", "casa", seats)
    finally:
        await ledger.close()


@pytest.fixture(scope="module")
def pots_db(paging_db: str) -> str:
    asyncio.run(_start_matches(paging_db, POTS))
    return paging_db


async def _ledger_pots(url: str) -> list[dict[str, object]]:
    conn = await asyncpg.connect(plain_dsn(url))
    try:
        return [dict(r) for r in await reports.pots(conn)]
    finally:
        await conn.close()


async def test_pots_are_paged_and_their_export_streams_page_by_page(served, pots_db, monkeypatch):
    """The pots list grows with every match: the finance route pages it by cursor, and the
    CSV export reads it from the ledger a page at a time (a page of 4 here)."""
    import api.routes_money

    expected = await _ledger_pots(pots_db)
    assert len(expected) == POTS
    client = await _signed_in(served, "libro")
    try:
        seen: list[str] = []
        after: str | None = None
        for _ in range(POTS + 1):
            params: dict[str, object] = {"limit": 4, **({"after": after} if after else {})}
            response = await client.get("/api/finance/pots", params=params)
            assert response.status_code == 200, response.text
            page = response.json()
            assert len(page) <= 4
            seen.extend(str(row["match_id"]) for row in page)
            if len(page) < 4:
                break
            after = str(page[-1]["match_id"])
        assert seen == [str(row["match_id"]) for row in expected]

        monkeypatch.setattr(api.routes_money, "MAX_POTS_PAGE", 4)
        body = bytearray()
        chunks = 0
        async with client.stream("GET", "/api/finance/export/pots") as response:
            assert response.status_code == 200
            assert "content-length" not in response.headers
            async for chunk in response.aiter_bytes():
                chunks += 1
                body.extend(chunk)
    finally:
        await client.aclose()
    rows = list(csv.DictReader(io.StringIO(body.decode())))
    assert [r["match_id"] for r in rows] == [str(row["match_id"]) for row in expected]
    assert [int(r["stake_total"]) for r in rows] == [int(str(p["stake_total"])) for p in expected]
    assert chunks > 1
