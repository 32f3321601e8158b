"""`mesa up --demo`: a few demo accounts with play money, so a newcomer plays within a minute.

Creates four players and the staff (auditor, finance, admin, support, compliance) through the gateway's
own account code (schema `gateway`), opens each player's wallet and deposits play money into
it through the ledger service (idempotent: running it again changes nothing), and prints how
to sign in.
"""

from __future__ import annotations

import asyncio

from api import accounts
from services.common.config import Settings
from services.common.db import create_engine
from services.common.http import InternalClient, RemoteError, ServiceUnavailable
from services.ledger.contract import AccountOpened, DepositRequest, EntryResult, OpenAccount

DEMO_PASSWORD = "mesa-demo-2026"  # noqa: S105 (the published password of the demo accounts)
DEMO_PLAYERS = ("ana", "beto", "cris", "dani")
DEMO_STAFF = (
    ("auditor", "auditor"),
    ("finance", "finance"),
    ("admin", "admin"),
    ("support", "support"),
    ("compliance", "compliance"),
)
DEMO_DEPOSIT_CENTS = 100_00


async def create_demo_players(settings: Settings, out: object = print) -> list[str]:
    """Create the demo accounts and their play money; returns the lines printed."""
    engine = create_engine(settings.database_url, application_name="mesa-demo")
    created: list[tuple[str, str]] = []
    try:
        for name in DEMO_PLAYERS:
            created.append((name, "player"))
        created.extend(DEMO_STAFF)
        for name, role in created:
            if await accounts.get_user(engine, name) is None:
                await accounts.create_user(engine, name, DEMO_PASSWORD, role, name.capitalize())
    finally:
        await engine.dispose()
    ledger = InternalClient.of("ledger", settings, "cashier")
    try:
        for name in DEMO_PLAYERS:
            body = DepositRequest(
                idempotency_key=f"demo-deposit-{name}",
                player=name,
                amount=DEMO_DEPOSIT_CENTS,
                reference="demo play money",
            )
            for attempt in range(20):
                try:
                    await ledger.post("/v1/accounts", OpenAccount(player=name), AccountOpened)
                    await ledger.post("/v1/deposits", body, EntryResult)
                    break
                except ServiceUnavailable:
                    await asyncio.sleep(0.5 * (attempt + 1))
                except RemoteError as exc:
                    if exc.code != "idempotency_key_reused":
                        raise
                    break
    finally:
        await ledger.aclose()
    url = f"http://{settings.host}:{settings.gateway_port}/"
    lines = [
        f"demo: open {url} and sign in (password {DEMO_PASSWORD!r}):",
        f"demo:   players {', '.join(DEMO_PLAYERS)} (each with ${DEMO_DEPOSIT_CENTS // 100} "
        "of play money): four of them, one per browser profile, fill a table",
        "demo:   auditor / finance / admin / support / compliance for the staff screens",
        "demo:   or press 'Contra la CPU' to play at once against three CPUs",
    ]
    if callable(out):
        for line in lines:
            out(line)
    return lines


def main(settings: Settings) -> int:
    asyncio.run(create_demo_players(settings))
    return 0
