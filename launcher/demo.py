"""`mesa up --demo`: a few demo accounts with play money, so a newcomer plays within a minute.

Creates four players and the staff (auditor, finance, admin, support, compliance) through the
gateway's own account code (schema `gateway`), then funds each player the way staff do: signed
in as the demo's finance user, through the gateway's cashier (`POST /api/finance/deposits`), so
each deposit is checked (identity, region, limits, cool-off) and in the staff audit log.
Idempotent: running it again replays the same deposits and moves no money. Prints how to sign in.
"""

from __future__ import annotations

import asyncio

import httpx

from api import accounts
from services.common.config import Settings
from services.common.db import create_engine

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
    await _fund_players(f"http://{settings.host}:{settings.gateway_port}")
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


class DemoError(RuntimeError):
    """The gateway refused to sign in the demo's finance user or to fund a demo player."""


# The gateway is healthy when the demo starts, but its ledger may still be warming up (503).
_ATTEMPTS = 20
_TIMEOUT_S = 30.0


async def _fund_players(gateway_url: str) -> None:
    """Deposit each demo player's play money through the gateway's cashier as `finance`."""
    async with httpx.AsyncClient(
        base_url=gateway_url, timeout=_TIMEOUT_S, trust_env=False
    ) as client:
        signed_in = await client.post(
            "/api/auth/tokens",
            json={"username": "finance", "password": DEMO_PASSWORD, "label": "mesa up --demo"},
        )
        if signed_in.status_code != 201:
            raise DemoError(
                f"demo: finance cannot sign in: {signed_in.status_code} {signed_in.text}"
            )
        headers = {"Authorization": f"Bearer {signed_in.json()['token']}"}
        try:
            for name in DEMO_PLAYERS:
                body = {
                    "player": name,
                    "amount": DEMO_DEPOSIT_CENTS,
                    "reference": "demo play money",
                    "idempotency_key": f"demo-deposit-{name}",
                }
                for attempt in range(_ATTEMPTS):
                    r = await client.post("/api/finance/deposits", json=body, headers=headers)
                    if r.status_code != 503:
                        break
                    await asyncio.sleep(0.5 * (attempt + 1))
                if r.status_code != 200:
                    raise DemoError(f"demo: deposit for {name} refused: {r.status_code} {r.text}")
        finally:
            # the token is of no further use: revoke it rather than leave it live for days
            await client.post("/api/auth/logout", headers=headers)


def main(settings: Settings) -> int:
    asyncio.run(create_demo_players(settings))
    return 0
