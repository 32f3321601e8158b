"""`make chaos`: kill -9 every process in turn while paid tables play, then check the money.

    python -m bench.chaos [--tables 50] [--engines N] [--settle-s 120]

Starts `mesa up` on free loopback ports, seats `--tables` pairs of simulated players at
private $10 apuesta 1v1 tables (public HTTP + WebSocket protocol, clients reconnect and retry
with the seq they acted on), and while they play kills with SIGKILL, one after another, the
engine, matchmaking, ledger and gateway processes (children of `mesa up`, found by their
`serve <name>` command line) and PostgreSQL's postmaster; `mesa up` restarts each. After the
last kill the tables stop starting new matches and finish the ones in play (bounded), then
the checks run (`bench.sim.check_invariants`): every match finished and settled or voided
and refunded, trial balance zero, every pot zero, no hold left, every wallet equal to what
the results say, no settlement applied twice, no commitment without one result or void.

Prints a verdict and exits 1 on any violation. Results: bench/results/chaos.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import write_result
from bench.sim import (
    DEPOSIT_CENTS,
    MatchRecord,
    Platform,
    Player,
    Schedule,
    SimError,
    Stats,
    TableDriver,
    check_invariants,
    setup_players,
    wait_settled,
)

DEFAULT_VICTIMS = ("engine", "matchmaking", "ledger", "gateway", "postgres")


async def _healthy(urls: list[str], timeout_s: float) -> bool:
    """Every URL's /health answers 200 (bounded polling: no event tells us otherwise)."""
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=2.0) as client:
        for _ in range(int(timeout_s * 10) + 1):
            ok = 0
            for url in urls:
                try:
                    ok += (await client.get(url + "/health")).status_code == 200
                except httpx.HTTPError:
                    pass
            if ok == len(urls):
                return True
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.1)
    return False


def service_urls(platform: Platform) -> list[str]:
    env = platform.env
    urls = [f"http://127.0.0.1:{env['MESA_LEDGER_PORT']}"]
    urls += [f"http://127.0.0.1:{env['MESA_MATCHMAKING_PORT']}"]
    base = int(env["MESA_ENGINE_PORT"])
    urls += [f"http://127.0.0.1:{base + 100 * i}" for i in range(platform.engines)]
    return urls + platform.gateway_urls


async def kill_and_recover(
    platform: Platform, victim: str, stats: Stats, recover_s: float
) -> dict[str, Any]:
    """SIGKILL one process; time until every service is healthy and actions flow again."""
    if victim == "postgres":
        pid = platform.postmaster_pid()
    else:
        pids = platform.service_pids().get(victim, [])
        pid = pids[0] if pids else None
    if pid is None:
        raise SimError(f"no {victim} process found under mesa up")
    acks_before = stats.actions_total
    killed_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    # Let the supervisor notice before asking for health (it polls every 0.25 s).
    await asyncio.sleep(1.0 if victim != "postgres" else 2.0)
    healthy = await _healthy(service_urls(platform), recover_s)
    healthy_at = time.monotonic()
    flowing_at = None
    for _ in range(int(recover_s * 10)):
        # An action sent after the kill was acknowledged.
        if stats.actions_total > acks_before and stats.last_ack_sent_at > killed_at + 0.05:
            flowing_at = stats.last_ack_at
            break
        await asyncio.sleep(0.1)
    return {
        "victim": victim,
        "pid": pid,
        "healthy_again": healthy,
        "healthy_after_s": round(healthy_at - killed_at, 2),
        "actions_acked_again_after_s": (
            round(flowing_at - killed_at, 2) if flowing_at is not None else None
        ),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    var_dir = Path(tempfile.mkdtemp(prefix="mesa-chaos-"))
    platform = Platform(var_dir, engines=args.engines, gateways=args.gateways)
    t_start = time.monotonic()
    platform.start()
    print(f"chaos: platform up in {time.monotonic() - t_start:.1f} s ({var_dir})", flush=True)
    stats = Stats()
    records: dict[str, MatchRecord] = {}
    try:
        players = await setup_players(
            platform.database_url, platform.gateway_urls[0], 2 * args.tables, "ch"
        )
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
        clients = [
            httpx.AsyncClient(base_url=u, timeout=15.0, limits=limits)
            for u in platform.gateway_urls
        ]
        now = time.monotonic()
        # Provisional: the tables stop starting matches once the kills are done.
        schedule = Schedule(stop_at=now + args.max_play_s, deadline=now + args.max_play_s)
        drivers = [
            TableDriver(
                i, (players[2 * i], players[2 * i + 1]), clients, stats, 1.0 / args.rate, records
            )  # fmt: skip
            for i in range(args.tables)
        ]
        tasks = [asyncio.create_task(d.run(schedule)) for d in drivers]
        kills: list[dict[str, Any]] = []
        try:
            await asyncio.sleep(args.warmup_s)
            for victim in args.victims.split(","):
                print(f"chaos: kill -9 {victim}", flush=True)
                outcome = await kill_and_recover(platform, victim, stats, args.recover_s)
                print(f"chaos:   {outcome}", flush=True)
                kills.append(outcome)
                await asyncio.sleep(args.gap_s)
            stop = time.monotonic()
            schedule.stop_at = stop
            schedule.deadline = stop + args.drain_s
            print(f"chaos: kills done; finishing {stats.live_tables} live tables", flush=True)
            await asyncio.wait(tasks, timeout=args.drain_s + 30)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        drained_at = time.monotonic()
        by_name: dict[str, Player] = {p.name: p for p in players}
        settle_s = await wait_settled(records, by_name, clients[0], Stats(), args.settle_s)
        for c in clients:
            await c.aclose()
        checks = await check_invariants(
            platform.database_url, records, {p.name: DEPOSIT_CENTS for p in players}
        )
        restarts = platform.log_path.read_text(errors="replace").count("restarting")
        pg_restarts = platform.log_path.read_text(errors="replace").count(
            "PostgreSQL stopped unexpectedly"
        )
        return {
            "tables": args.tables,
            "engines": args.engines,
            "gateways": args.gateways,
            "kills": kills,
            "service_restarts_seen": restarts,
            "postgres_restarts_seen": pg_restarts,
            "actions_acked": stats.actions_total,
            "client_errors": dict(stats.errors),
            "client_error_samples": stats.error_samples[:8],
            "reconnects": stats.reconnects,
            "http_retries": stats.http_retries,
            "stale_or_overtaken": stats.stale,
            "matches_started": stats.matches_started,
            "drain_s": round(drained_at - schedule.stop_at, 1),
            "settle_wait_s": round(settle_s, 1),
            "total_s": round(time.monotonic() - t_start, 1),
            "checks": checks,
            "verdict": "PASS"
            if checks["ok"] and all(k["healthy_again"] for k in kills)
            else "FAIL",
        }
    finally:
        platform.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    parser.add_argument("--tables", type=int, default=50)
    parser.add_argument("--engines", type=int, default=1)
    parser.add_argument("--gateways", type=int, default=1)
    parser.add_argument("--rate", type=float, default=1.0, help="actions/s per table")
    parser.add_argument("--victims", default=",".join(DEFAULT_VICTIMS))
    parser.add_argument("--warmup-s", type=float, default=8.0)
    parser.add_argument("--gap-s", type=float, default=4.0, help="pause between kills")
    parser.add_argument("--recover-s", type=float, default=60.0)
    parser.add_argument("--max-play-s", type=float, default=600.0)
    parser.add_argument("--drain-s", type=float, default=180.0)
    parser.add_argument("--settle-s", type=float, default=120.0)
    parser.add_argument("--name", default="chaos")
    args = parser.parse_args(argv)
    if not 1 <= args.tables <= 500:
        parser.error("--tables must be within 1..500")
    unknown = set(args.victims.split(",")) - set(DEFAULT_VICTIMS)
    if unknown:
        parser.error(f"unknown victims: {sorted(unknown)}")
    try:
        result = asyncio.run(run(args))
    except SimError as exc:
        print(f"chaos: FAIL: {exc}", file=sys.stderr)
        return 1
    path = write_result(args.name, result)
    checks = result["checks"]
    print(f"chaos: verdict {result['verdict']} ({path})", flush=True)
    for v in checks["violations"]:
        print(f"chaos: violation: {v}", flush=True)
    return 0 if result["verdict"] == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
