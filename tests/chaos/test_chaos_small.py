"""A small crash test in `make test`: kill -9 an engine replica and the ledger, restart
PostgreSQL.

The real platform (`mesa up --engines 2 --gateways 2` on free loopback ports) with five paid
1v1 tables played by simulated players over the public HTTP + WebSocket protocol through both
gateways (bench/sim.py, shared with `make chaos`). Each victim is killed once while the tables
play; the killed engine replica's live matches must be taken over (by the other replica, or
the restarted one) from their event logs. Then the tables finish their matches and the money
and fairness invariants are checked from PostgreSQL.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from bench.chaos import kill_and_recover, kills_ok
from bench.sim import (
    DEPOSIT_CENTS,
    GatewayClient,
    MatchRecord,
    Platform,
    Schedule,
    Stats,
    TableDriver,
    check_invariants,
    setup_players,
    wait_settled,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TABLES = 5
ENGINES = 2
GATEWAYS = 2
RATE = 6.0  # actions per second per table: matches end within the test's budget
BUDGET_S = 150


async def _run(platform: Platform) -> tuple[dict, list[dict], Stats]:
    players = await setup_players(platform.database_url, platform.gateway_urls[0], 2 * TABLES, "sm")
    stats = Stats()
    records: dict[str, MatchRecord] = {}
    clients = [GatewayClient(url, timeout_s=15.0) for url in platform.gateway_urls]
    client = clients[0]
    try:
        now = time.monotonic()
        schedule = Schedule(stop_at=now + 60, deadline=now + 100)
        drivers = [
            TableDriver(
                i, (players[2 * i], players[2 * i + 1]), clients, stats, 1 / RATE, records
            )  # fmt: skip
            for i in range(TABLES)
        ]
        tasks = [asyncio.create_task(d.run(schedule)) for d in drivers]
        kills = []
        try:
            # Event-driven start: wait for the first acknowledged actions (bounded).
            for _ in range(200):
                if stats.actions_total >= 2 * TABLES:
                    break
                await asyncio.sleep(0.05)
            for victim in ("engine", "ledger", "postgres"):
                kills.append(await kill_and_recover(platform, victim, stats, 30.0))
            schedule.stop_at = time.monotonic()
            schedule.deadline = schedule.stop_at + 50
            await asyncio.wait(tasks, timeout=55)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        by_name = {p.name: p for p in players}
        await wait_settled(records, by_name, client, Stats(), 30.0)
    finally:
        for c in clients:
            await c.aclose()
    checks = await check_invariants(
        platform.database_url, records, {p.name: DEPOSIT_CENTS for p in players}
    )
    return checks, kills, stats


def test_chaos_small_kill_engine_ledger_and_postgres(tmp_path: Path):
    started = time.monotonic()
    # Not under pytest's temp root: PostgreSQL runs as another user when the tests run as
    # root, and a concurrent pytest session may tighten that root's permissions.
    var_dir = Path(tempfile.mkdtemp(prefix="mesa-chaos-small-"))
    var_dir.chmod(0o711)  # ours: passable by the server's own user (as root)
    platform = Platform(var_dir / "var", engines=ENGINES, gateways=GATEWAYS)
    platform.start(timeout_s=90)
    try:
        checks, kills, stats = asyncio.run(_run(platform))
    finally:
        platform.stop()
        shutil.rmtree(var_dir, ignore_errors=True)
    assert [k["victim"] for k in kills] == ["engine", "ledger", "postgres"]
    assert all(k["healthy_again"] for k in kills), kills
    takeover = kills[0]["takeover"]
    assert takeover["matches"] > 0 and takeover["not_taken_over"] == 0, takeover
    assert (
        takeover["by_survivor"] + takeover["by_restarted"] + takeover["finished_meanwhile"]
        == takeover["matches"]
    ), takeover
    assert kills_ok(kills), kills
    assert all(k["actions_acked_again_after_s"] is not None for k in kills), kills
    assert checks["violations"] == [], checks
    assert checks["pots"] >= TABLES and checks["pots_open"] == 0
    assert stats.actions_total > 0
    assert time.monotonic() - started < BUDGET_S
