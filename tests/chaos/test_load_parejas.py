"""`make load`'s four-seat parejas tables (bench/load.py) on the real platform, small: four
players, each on a socket of their own, at each private apuesta parejas table; every action is
answered on the actor's socket and fanned out to the three others; every match is played to its
end and the money reconciles. And the step search's arguments and verdict."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from bench.load import highest_that_holds, parse_steps, run_size
from bench.sim import (
    DEPOSIT_CENTS,
    PAREJAS_KIND,
    GatewayClient,
    MatchRecord,
    Platform,
    Stats,
    check_invariants,
    setup_players,
    wait_settled,
)

TABLES = 2
RATE = 5.0  # actions per second per table: the matches end within the test's budget
BUDGET_S = 240


def test_steps_are_increasing_bounded_table_counts():
    assert parse_steps("250,500,750,1000") == [250, 500, 750, 1000]
    assert parse_steps("") == [] and parse_steps("0") == []
    for bad in ("500,250", "250,250", "0,10", "10,x", "6000", ",".join(["1"] * 9)):
        with pytest.raises(ValueError):
            parse_steps(bad)
    runs = [{"tables": 250, "holds": True}, {"tables": 500, "holds": True}]
    assert highest_that_holds([*runs, {"tables": 750, "holds": False}]) == 500
    assert highest_that_holds([{"tables": 250, "holds": False}]) == 0
    assert highest_that_holds([]) == 0


async def _run(platform: Platform) -> tuple[dict, dict]:
    players = await setup_players(platform.database_url, platform.gateway_urls[0], 4 * TABLES, "pj")
    records: dict[str, MatchRecord] = {}
    run = await run_size(
        platform, players, TABLES, duration_s=2.0, rate=RATE, drain_s=120.0, records=records,
        kind=PAREJAS_KIND,
    )  # fmt: skip
    client = GatewayClient(platform.gateway_urls[0], timeout_s=15.0)
    try:
        by_name = {p.name: p for p in players}
        await wait_settled(records, by_name, client, Stats(), 30.0)
    finally:
        await client.aclose()
    checks = await check_invariants(
        platform.database_url, records, {p.name: DEPOSIT_CENTS for p in players}
    )
    return run, checks


@pytest.mark.e2e
@pytest.mark.slow
def test_four_seat_parejas_tables_play_with_four_sockets_each():
    started = time.monotonic()
    var_dir = Path(tempfile.mkdtemp(prefix="mesa-load-parejas-"))
    platform = Platform(var_dir / "var")
    platform.start(timeout_s=90)
    try:
        run, checks = asyncio.run(_run(platform))
    finally:
        platform.stop()
        shutil.rmtree(var_dir, ignore_errors=True)
    assert run["kind"] == PAREJAS_KIND and run["seats_per_table"] == 4
    assert run["sockets"] == 4 * TABLES
    assert run["errors"] == 0 and run["reconnects"] == 0, run["error_samples"]
    assert run["matches_started"] >= TABLES and run["matches_over"] == run["matches_started"]
    # Every action reached all four sockets of its table (the actor's ack, three updates).
    assert run["frames_per_action"] >= 4.0, run["frames_per_action"]
    assert checks["violations"] == [], checks
    assert checks["pots"] == run["matches_started"] and checks["wallets_checked"] == 4 * TABLES
    assert time.monotonic() - started < BUDGET_S
