"""`make chaos`: kill -9 every process in turn while paid tables play, then check the money.

    python -m bench.chaos [--tables 50] [--engines 2] [--gateways 2] [--ledgers 1] [--settle-s 120]

Starts `mesa up` on free loopback ports, seats `--tables` pairs of simulated players at
private $10 apuesta 1v1 tables (public HTTP + WebSocket protocol, clients reconnect and retry
with the seq they acted on), and while they play kills with SIGKILL, one after another, the
engine, matchmaking, ledger and gateway processes (children of `mesa up`, found by their
`serve <name>` command line) and PostgreSQL's postmaster; `mesa up` restarts each. After the
last kill the tables stop starting new matches and finish the ones in play (bounded), then
the checks run (`bench.sim.check_invariants`): every match finished and settled or voided
and refunded, trial balance zero, every pot zero, no hold left, every wallet equal to what
the results say, no settlement applied twice, no commitment without one result or void.

With engine replicas (the default is two engines and two gateways) the engine victim is one
replica: the run records which live matches it owned (PostgreSQL advisory locks, matched to
its connections) and measures the time until every one of them is owned again, restored from
its event log by the surviving replica (or by the restarted one, if it came back first).
With ledger replicas (`--ledgers 2`) the ledger victim is the first replica, the one callers
fill first; while it is down, callers skip it for the next (`InternalClient`).

Prints a verdict and exits 1 on any violation. Results: bench/results/chaos.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import psutil

from bench.common import write_result
from bench.sim import (
    DEPOSIT_CENTS,
    GatewayClient,
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
from services.common.db import asyncpg_dsn
from services.common.ports import free_port
from services.engine.store import lock_held_sql

DEFAULT_VICTIMS = ("engine", "matchmaking", "ledger", "gateway", "postgres")
REDIS_READY = "Ready to accept connections"


class RedisProcess:
    """`--redis`: a real redis-server on a free loopback port for the gateways' table feed.

    Nobody supervises it: as a victim it is killed and started again here, on the same port.
    """

    def __init__(self, folder: Path) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            raise SimError("--redis needs redis-server (apt-get install redis-server)")
        self.exe = exe
        self.folder = folder
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 20.0) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        log_path = self.folder / "redis.log"
        seen = log_path.stat().st_size if log_path.exists() else 0  # earlier starts' lines
        proc = subprocess.Popen(
            [self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.folder),
             "--save", "", "--appendonly", "no", "--logfile", str(log_path)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        self.proc = proc
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:  # no event to await: its log file is polled
            if log_path.exists():
                with open(log_path, "rb") as f:
                    f.seek(seen)
                    if REDIS_READY.encode() in f.read():
                        return
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        raise SimError("redis-server did not start")

    def kill(self) -> int | None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return None
        proc.kill()
        proc.wait(10)
        return proc.pid


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


# Every live match with the client port of the PostgreSQL session holding its engine lock
# (NULL: no engine owns it right now).
_OWNERS_SQL = f"""
SELECT m.match_id, a.client_port
FROM engine.matches m
LEFT JOIN pg_locks l ON l.granted AND {lock_held_sql("l", "m.match_id")}
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE NOT EXISTS (SELECT 1 FROM engine.match_closed c WHERE c.match_id = m.match_id)
LIMIT 100000
"""
TAKEOVER_POLL_S = 0.05


async def match_owners(conn: Any) -> dict[str, int | None]:
    rows = await conn.fetch(_OWNERS_SQL)
    return {r["match_id"]: r["client_port"] for r in rows}


def local_ports(pid: int) -> set[int]:
    """The local TCP ports of one process (its PostgreSQL sessions among them)."""
    try:
        return {c.laddr.port for c in psutil.Process(pid).net_connections(kind="tcp")}
    except psutil.Error:
        return set()


async def _takeover(
    conn: Any, owned: set[str], victim_ports: set[int], survivors: list[int], limit_s: float
) -> dict[str, Any]:
    """Poll (bounded) until every live match the victim owned has a new owner."""
    started = time.monotonic()
    owners: dict[str, int | None] = {}
    pending = set(owned)
    for _ in range(int(limit_s / TAKEOVER_POLL_S) + 1):
        owners = await match_owners(conn)
        pending = {
            m for m in owned if m in owners and (owners[m] is None or owners[m] in victim_ports)
        }
        if not pending:
            break
        await asyncio.sleep(TAKEOVER_POLL_S)
    took_s = time.monotonic() - started
    survivor_ports: set[int] = set()
    for pid in survivors:
        survivor_ports |= local_ports(pid)
    reowned = [m for m in owned if owners.get(m) is not None and m not in pending]
    by_survivor = sum(1 for m in reowned if owners[m] in survivor_ports)
    return {
        "matches": len(owned),
        "finished_meanwhile": sum(1 for m in owned if m not in owners),
        "by_survivor": by_survivor,
        "by_restarted": len(reowned) - by_survivor,
        "not_taken_over": len(pending),
        "after_s": round(took_s, 3) if not pending else None,
    }


async def kill_and_recover(
    platform: Platform,
    victim: str,
    stats: Stats,
    recover_s: float,
    redis: RedisProcess | None = None,
) -> dict[str, Any]:
    """SIGKILL one process; time until every service is healthy and actions flow again.

    An engine replica (more than one engine): also the time until its live matches have been
    taken over (`takeover`).
    """
    if victim == "redis":
        if redis is None:
            raise SimError("the redis victim needs --redis")
        acks_before = stats.actions_total
        killed_at = time.monotonic()
        pid = redis.kill()
        redis.start()  # what a Redis operator or a managed Redis would do
        return await _recovered(platform, victim, pid, stats, recover_s, acks_before, killed_at)
    if victim == "postgres":
        pid = platform.postmaster_pid()
    else:
        pids = platform.service_pids().get(victim, [])
        pid = pids[0] if pids else None
        if victim == "ledger" and platform.ledgers > 1:
            # the first replica: the one callers fill first, so the one with work in flight
            first = int(platform.env["MESA_LEDGER_PORT"])
            pid = next((p for p in pids if first in local_ports(p)), pid)
    if pid is None:
        raise SimError(f"no {victim} process found under mesa up")
    replica = victim == "engine" and platform.engines > 1
    takeover: dict[str, Any] | None = None
    conn: Any = None
    owned: set[str] = set()
    victim_ports: set[int] = set()
    survivors: list[int] = []
    if replica:
        conn = await asyncpg.connect(asyncpg_dsn(platform.database_url), timeout=10)
        owners = await match_owners(conn)
        engines = platform.service_pids()["engine"]
        # The replica that owns the most live matches: the takeover has something to do.
        by_pid = {p: {m for m, port in owners.items() if port in local_ports(p)} for p in engines}
        pid = max(engines, key=lambda p: len(by_pid[p]))
        survivors = [p for p in engines if p != pid]
        victim_ports = local_ports(pid)
        owned = by_pid[pid]
    acks_before = stats.actions_total
    killed_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    if replica:
        try:
            takeover = await _takeover(conn, owned, victim_ports, survivors, recover_s)
        finally:
            await conn.close()
    # Let the supervisor notice before asking for health (it polls every 0.25 s).
    await asyncio.sleep(1.0 if victim != "postgres" else 2.0)
    outcome = await _recovered(platform, victim, pid, stats, recover_s, acks_before, killed_at)
    if takeover is not None:
        outcome["takeover"] = takeover
    return outcome


async def _recovered(
    platform: Platform,
    victim: str,
    pid: int | None,
    stats: Stats,
    recover_s: float,
    acks_before: int,
    killed_at: float,
) -> dict[str, Any]:
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


def kills_ok(kills: list[dict[str, Any]]) -> bool:
    """Every service healthy again, and every match of a killed engine replica taken over."""
    return all(
        k["healthy_again"] and k.get("takeover", {}).get("not_taken_over", 0) == 0 for k in kills
    )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    var_dir = Path(tempfile.mkdtemp(prefix="mesa-chaos-"))
    var_dir.chmod(0o711)  # ours: passable by the server's own user (as root)
    redis: RedisProcess | None = None
    extra_env: dict[str, str] = {}
    if args.redis:
        redis = RedisProcess(var_dir / "redis")
        redis.start()
        extra_env["MESA_REDIS_URL"] = redis.url
    platform = Platform(
        var_dir,
        engines=args.engines,
        gateways=args.gateways,
        extra_env=extra_env,
        ledgers=args.ledgers,
    )
    t_start = time.monotonic()
    platform.start()
    print(f"chaos: platform up in {time.monotonic() - t_start:.1f} s ({var_dir})", flush=True)
    stats = Stats()
    records: dict[str, MatchRecord] = {}
    try:
        players = await setup_players(
            platform.database_url, platform.gateway_urls[0], 2 * args.tables, "ch"
        )
        clients = [
            GatewayClient(u, max_connections=200, timeout_s=15.0) for u in platform.gateway_urls
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
                outcome = await kill_and_recover(platform, victim, stats, args.recover_s, redis)
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
            "ledgers": args.ledgers,
            "feed_backend": "redis" if redis is not None else "postgres",
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
            "verdict": "PASS" if checks["ok"] and kills_ok(kills) else "FAIL",
        }
    finally:
        platform.stop()
        if redis is not None:
            redis.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    parser.add_argument("--tables", type=int, default=50)
    parser.add_argument("--engines", type=int, default=2, help="engine replicas (1..4)")
    parser.add_argument("--gateways", type=int, default=2, help="gateway replicas (1..4)")
    parser.add_argument("--ledgers", type=int, default=1, help="ledger replicas (1..4)")
    parser.add_argument("--rate", type=float, default=1.0, help="actions/s per table")
    parser.add_argument(
        "--victims",
        default=None,
        help=f"default {','.join(DEFAULT_VICTIMS)} (and redis with --redis)",
    )
    parser.add_argument(
        "--redis", action="store_true", help="gateways' table feed on a local redis-server"
    )
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
    if not all(1 <= n <= 4 for n in (args.engines, args.gateways, args.ledgers)):
        parser.error("--engines, --gateways and --ledgers must be within 1..4")
    if args.victims is None:
        args.victims = ",".join(DEFAULT_VICTIMS + (("redis",) if args.redis else ()))
    unknown = set(args.victims.split(",")) - set(DEFAULT_VICTIMS) - {"redis"}
    if "redis" in args.victims.split(",") and not args.redis:
        parser.error("the redis victim needs --redis")
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
