"""Matchmaking throughput: players seated at tables that fill and start, end to end.

Everything runs on this machine: an embedded PostgreSQL in a temporary folder, the ledger
service and the matchmaking service each in its own uvicorn process (real HTTP on loopback,
service credentials), a stand-in engine inside the matchmaking process (it acknowledges
CreateMatch; the real engine's cost is measured by its own benchmark), and the clients here.
Each client loops on quick joins at paid tiers; every join places a real ledger hold, and
every full table moves its holds into a pot in one ledger call and is handed to the engine.

Reported: seated players per second counting only players at tables that filled and started,
join latency p50/p99, errors. Results: bench/results/matchmaking.json.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import psutil
from litestar import Litestar, post
from litestar.params import JSONBody

from bench.common import percentile, write_result
from services.common.auth import header_value
from services.common.embedded_pg import EmbeddedPostgres, free_port
from services.common.migrate import upgrade
from services.engine.contract import CreateMatch, MatchCreated

SECONDS = float(os.environ.get("BENCH_MATCHMAKING_SECONDS", "5"))
CLIENTS = int(os.environ.get("BENCH_MATCHMAKING_CLIENTS", "48"))
PLAYERS = int(os.environ.get("BENCH_MATCHMAKING_PLAYERS", "20000"))
KINDS = [
    ("apuesta-parejas", "10"),
    ("apuesta-1v1", "20"),
    ("apuesta-trios", "40"),
    ("dominicana-2v2-100", "80"),
    ("cubana-habana", "10"),
    ("casa-duelo", "20"),
]
TARGET_SEATED_PER_S = 500
ROOT = Path(__file__).resolve().parents[1]


def ledger_app() -> Any:
    from services.common.config import load_settings
    from services.common.logging import configure_logging
    from services.ledger.app import create_app

    settings = load_settings()
    configure_logging("ledger", settings.log_format, settings.log_level)
    return create_app(settings, pool_size=20)


def matchmaking_app() -> Any:
    """The matchmaking app with an in-process stand-in engine that acknowledges every match."""
    from services.common.config import load_settings
    from services.common.logging import configure_logging
    from services.matchmaking.app import create_app

    settings = load_settings()
    configure_logging("matchmaking", settings.log_format, settings.log_level)
    engine = Litestar([_create_match])
    return create_app(settings, engine_transport=httpx.ASGITransport(app=engine), pool_size=20)


@post("/internal/matches", status_code=200)
async def _create_match(data: JSONBody[CreateMatch]) -> MatchCreated:
    return MatchCreated(match_id=data.match_id, seq=0, status="live")


async def _fund(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "SELECT ledger.deposit('fund-' || n, '\\x00'::bytea, 'mp' || n, 100000000, 'USD', "
            "'bench') FROM generate_series(0, $1 - 1) n",
            PLAYERS,
        )
        await conn.execute("VACUUM ANALYZE")
    finally:
        await conn.close()


async def _run(base: str, secret: bytes) -> dict[str, Any]:
    auth = header_value(secret, "gateway", ttl_s=600)
    latencies: list[float] = []
    errors: list[str] = []
    next_player = [0]
    limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30) as http:
        await asyncio.gather(*(http.get("/health") for _ in range(CLIENTS)))
        stop_at = time.perf_counter() + SECONDS

        async def client(n: int) -> None:
            i = 0
            while time.perf_counter() < stop_at:
                i += 1
                player = next_player[0] % PLAYERS
                next_player[0] += 1
                kind, tier = KINDS[(n + i) % len(KINDS)]
                body = {
                    "idempotency_key": f"b-{n}-{i}",
                    "player_id": f"mp{player}",
                    "kind": kind,
                    "tier": tier,
                }
                started = time.perf_counter()
                response = await http.post(
                    "/v1/join/quick", json=body, headers={"Authorization": auth}
                )
                latencies.append(time.perf_counter() - started)
                if response.status_code != 200:
                    errors.append(f"{response.status_code} {response.text[:200]}")

        began = time.perf_counter()
        await asyncio.gather(*(client(n) for n in range(CLIENTS)))
        elapsed = time.perf_counter() - began
    latencies.sort()
    return {
        "elapsed_s": elapsed,
        "joins": len(latencies),
        "joins_per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(percentile(latencies, 0.50) * 1000, 2),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
    }


async def _count(url: str) -> dict[str, int]:
    conn = await asyncpg.connect(url)
    try:
        started = await conn.fetchrow(
            "SELECT count(*) AS tables, coalesce(sum(seat_count), 0) AS seats "
            "FROM matchmaking.tables WHERE status = 'playing'"
        )
        pots = await conn.fetchval("SELECT count(*) FROM ledger.pots")
        holds = await conn.fetchval(
            "SELECT count(*) FROM ledger.accounts WHERE kind = 'hold' AND closed_at IS NULL "
            "AND balance > 0"
        )
        seated = await conn.fetchval(
            "SELECT count(*) FROM matchmaking.reservations WHERE status = 'seated'"
        )
    finally:
        await conn.close()
    return {
        "tables_started": int(started["tables"]),
        "players_at_started_tables": int(started["seats"]),
        "pots": int(pots),
        "open_holds": int(holds),
        "seated_waiting": int(seated),
    }


def _serve(app: str, port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable, "-m", "uvicorn", app, "--factory", "--host", "127.0.0.1",
            "--port", str(port), "--no-access-log", "--log-level", "warning",
            "--loop", "uvloop", "--http", "httptools",
        ],
        env=env,
        cwd=str(ROOT),
    )  # fmt: skip


def _cpu_s(proc: subprocess.Popen[bytes]) -> float:
    """User + system CPU seconds of a server process and its children."""
    p = psutil.Process(proc.pid)
    total = sum(p.cpu_times()[:2])
    for child in p.children(recursive=True):
        total += sum(child.cpu_times()[:2])
    return float(total)


def _wait(base: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(base + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{base} did not start")


def main() -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="mesa-bench-mm-"))
    server = EmbeddedPostgres(tmp / "pg", free_port())
    procs: list[subprocess.Popen[bytes]] = []
    try:
        server.start()
        server.create_database("bench")
        url = server.url("bench")
        upgrade(url, ["ledger", "matchmaking"])
        asyncio.run(_fund(url))
        secret = secrets.token_bytes(32)
        ledger_port, mm_port = free_port(), free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("MESA_")} | {
            "MESA_DATABASE_URL": url,
            "MESA_INTERNAL_SECRET": secret.hex(),
            "MESA_LOG_LEVEL": "warning",
            "MESA_ENV": "test",
            "MESA_VAR_DIR": str(tmp / "var"),
            "MESA_LEDGER_URL": f"http://127.0.0.1:{ledger_port}",
        }
        procs.append(_serve("bench.bench_matchmaking:ledger_app", ledger_port, env))
        procs.append(_serve("bench.bench_matchmaking:matchmaking_app", mm_port, env))
        _wait(f"http://127.0.0.1:{ledger_port}")
        base = f"http://127.0.0.1:{mm_port}"
        _wait(base)
        cpu_before = [_cpu_s(p) for p in procs]
        run = asyncio.run(_run(base, secret))
        cpu_used = [round(_cpu_s(p) - b, 2) for p, b in zip(procs, cpu_before, strict=True)]
        counts = asyncio.run(_count(url))
        seated_per_s = counts["players_at_started_tables"] / run.pop("elapsed_s")
        results: dict[str, Any] = {
            "clients": CLIENTS,
            "seconds": SECONDS,
            "kinds": [f"{k}@{t}" for k, t in KINDS],
            **run,
            **counts,
            "seated_at_full_tables_per_s": round(seated_per_s, 1),
            "target_seated_per_s": TARGET_SEATED_PER_S,
            "meets_target": seated_per_s >= TARGET_SEATED_PER_S,
            "cpus": os.cpu_count(),
            "load_average_1m": round(os.getloadavg()[0], 2),
            "cpu_s_ledger": cpu_used[0],
            "cpu_s_matchmaking": cpu_used[1],
            "cpu_ms_per_join_ledger": round(cpu_used[0] * 1000 / max(1, run["joins"]), 2),
            "cpu_ms_per_join_matchmaking": round(cpu_used[1] * 1000 / max(1, run["joins"]), 2),
        }
        write_result("matchmaking", results)
        return results
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    print(main())
