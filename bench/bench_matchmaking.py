"""Matchmaking throughput: players seated at tables that fill and start, end to end.

Everything runs on this machine: an embedded PostgreSQL in a temporary folder, the ledger
service, the matchmaking service and a stand-in engine (it acknowledges CreateMatch; the real
engine's cost is measured by its own benchmark), each in its own uvicorn process (real HTTP on
loopback, service credentials), and the clients here, which call matchmaking the way the
gateway does (`InternalClient`). Each client loops on quick joins at paid tiers; every join
places a real ledger hold, and every full table moves its holds into a pot in one ledger call
and is handed to the engine.

Baseline, measured in the same run just before: the same clients placing ledger holds directly
(`POST /v1/holds`), the one ledger call every paid seat needs; `ratio_to_holds` is seated
players/s over holds/s.

Reported: seated players per second counting only players at tables that filled and started,
join latency p50/p99, errors, CPU per join of each process. Results:
bench/results/matchmaking.json.

`BENCH_MATCHMAKING_PG_PROFILE=1` also loads pg_stat_statements (nested statements and planning
tracked) and `track_functions = all` and reports where PostgreSQL's time went per join: each
function's self/total time and the costliest statements, top level or inside functions, with
their planning time and plannings per call. That profiling
costs CPU itself, so its throughput is not comparable with a plain run.
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
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import msgspec
import psutil
from litestar import Litestar, get, post
from litestar.params import JSONBody

from bench.common import SERVICE_HTTP_PROTOCOL, percentile, wait_healthy, write_result
from launcher.embedded_pg import EmbeddedPostgres
from services.common.config import load_settings
from services.common.http import InternalClient, RemoteError, ServiceUnavailable
from services.common.migrate import upgrade
from services.common.ports import free_port, free_ports
from services.engine.contract import CreateMatch, MatchCreated
from services.ledger.contract import EntryResult, HoldRequest
from services.matchmaking.contract import JoinResult, QuickJoin, Tier

SECONDS = float(os.environ.get("BENCH_MATCHMAKING_SECONDS", "5"))
CLIENTS = int(os.environ.get("BENCH_MATCHMAKING_CLIENTS", "48"))
PLAYERS = int(os.environ.get("BENCH_MATCHMAKING_PLAYERS", "8000"))
BASELINE_SECONDS = float(os.environ.get("BENCH_MATCHMAKING_BASELINE_SECONDS", "3"))
PG_PROFILE = os.environ.get("BENCH_MATCHMAKING_PG_PROFILE", "") not in ("", "0")
PROFILE_TOP = 30
KINDS: list[tuple[str, Tier]] = [
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
    from services.common.config import load_settings
    from services.common.logging import configure_logging
    from services.matchmaking.app import create_app

    settings = load_settings()
    configure_logging("matchmaking", settings.log_format, settings.log_level)
    return create_app(settings, pool_size=20)


def engine_app() -> Any:
    """The stand-in engine: acknowledges every match."""
    return Litestar([_create_match, _health])


@get("/health")
async def _health() -> dict[str, str]:
    return {"status": "ok"}


@post("/internal/matches", status_code=200)
async def _create_match(data: JSONBody[CreateMatch]) -> MatchCreated:
    return MatchCreated(match_id=data.match_id, seq=0, status="live")


async def _fund(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "SELECT ledger.open_wallet('mp' || n, 'USD') FROM generate_series(0, $1 - 1) n",
            PLAYERS,
        )
        await conn.execute(
            "SELECT ledger.deposit('fund-' || n, '\\x00'::bytea, 'mp' || n, 100000000, 'USD', "
            "'bench') FROM generate_series(0, $1 - 1) n",
            PLAYERS,
        )
        await conn.execute("VACUUM ANALYZE")
    finally:
        await conn.close()


def _client(base: str, secret: bytes, caller: str, audience: str) -> InternalClient:
    settings = load_settings({"MESA_INTERNAL_SECRET": secret.hex(), "MESA_VAR_DIR": "var"})
    return InternalClient(base, settings, caller, audience=audience, max_connections=CLIENTS)


async def _drive(
    seconds: float, call: Callable[[int, int], Awaitable[None]]
) -> tuple[float, list[float], list[str]]:
    """CLIENTS loops calling `call(client, i)` for `seconds`: elapsed, latencies, errors."""
    latencies: list[float] = []
    errors: list[str] = []
    stop_at = time.perf_counter() + seconds

    async def client(n: int) -> None:
        i = 0
        while time.perf_counter() < stop_at:
            i += 1
            started = time.perf_counter()
            try:
                await call(n, i)
            except (RemoteError, ServiceUnavailable) as exc:
                errors.append(str(exc)[:200])
            latencies.append(time.perf_counter() - started)

    began = time.perf_counter()
    await asyncio.gather(*(client(n) for n in range(CLIENTS)))
    elapsed = time.perf_counter() - began
    latencies.sort()
    return elapsed, latencies, errors


def _summary(elapsed: float, latencies: list[float], errors: list[str]) -> dict[str, Any]:
    return {
        "elapsed_s": elapsed,
        "operations": len(latencies),
        "per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(percentile(latencies, 0.50) * 1000, 2),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
    }


async def _baseline(ledger_base: str, secret: bytes) -> dict[str, Any]:
    """Ledger holds placed directly by the same clients: one per paid seat, nothing else."""
    ledger = _client(ledger_base, secret, "matchmaking", "ledger")
    # Players from the top of the funded range, so the joins that follow start fresh.
    next_player = [PLAYERS - 1]

    async def hold(n: int, i: int) -> None:
        player = f"mp{next_player[0] % PLAYERS}"
        next_player[0] -= 1
        rid = f"bench-{n}-{i}"
        await ledger.post(
            "/v1/holds",
            HoldRequest(
                idempotency_key=f"bh-{rid}",
                player=player,
                reservation_id=rid,
                amount=1000,
                table_id="bench",
                currency="USD",
            ),
            EntryResult,
        )

    try:
        await asyncio.gather(*(ledger.get("/health", _Health) for _ in range(CLIENTS)))
        return _summary(*await _drive(BASELINE_SECONDS, hold))
    finally:
        await ledger.aclose()


async def _run(base: str, secret: bytes) -> dict[str, Any]:
    mm = _client(base, secret, "gateway", "matchmaking")
    next_player = [0]

    async def join(n: int, i: int) -> None:
        player = next_player[0] % PLAYERS
        next_player[0] += 1
        kind, tier = KINDS[(n + i) % len(KINDS)]
        body = QuickJoin(
            idempotency_key=f"b-{n}-{i}", player_id=f"mp{player}", kind=kind, tier=tier
        )
        await mm.post("/v1/join/quick", body, JoinResult)

    try:
        await asyncio.gather(*(mm.get("/health", _Health) for _ in range(CLIENTS)))
        return _summary(*await _drive(SECONDS, join))
    finally:
        await mm.aclose()


class _Health(msgspec.Struct):
    pass


async def _count(url: str) -> dict[str, int]:
    conn = await asyncpg.connect(url)
    try:
        started = await conn.fetchrow(
            "SELECT count(*) AS tables, coalesce(sum(seat_count), 0) AS seats "
            "FROM matchmaking.tables WHERE status = 'playing'"
        )
        pots = await conn.fetchval("SELECT count(*) FROM ledger.pots")
        # Matchmaking's own holds (reservation ids 'r-...'), not the baseline's.
        holds = await conn.fetchval(
            "SELECT count(*) FROM ledger.accounts WHERE kind = 'hold' AND closed_at IS NULL "
            "AND balance > 0 AND reservation_id LIKE 'r-%'"
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
            "--loop", "uvloop", "--http", SERVICE_HTTP_PROTOCOL,
        ],
        env=env,
        cwd=str(ROOT),
    )  # fmt: skip


def _cpu_s(proc: subprocess.Popen[bytes]) -> float:
    """User + system CPU seconds of a server process and its children."""
    p = psutil.Process(proc.pid)
    total = sum(p.cpu_times()[:2])
    for child in p.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.NoSuchProcess:
            continue  # a worker that exited between the listing and the read
    return float(total)


def _pg_cpu_s(server: EmbeddedPostgres) -> float:
    """User + system CPU seconds of the PostgreSQL server and its backends."""
    if server.process is None:
        return 0.0
    return _cpu_s(server.process)


def _per_join(seconds: float, joins: int) -> float:
    return round(seconds * 1000 / max(1, joins), 2)


async def _updates(url: str) -> dict[str, tuple[int, int]]:
    """(updates, HOT updates) so far of matchmaking's tables (stats flushed first)."""
    conn = await asyncpg.connect(url)
    try:
        await asyncio.sleep(1.1)  # backends flush their table counters at most once a second
        rows = await conn.fetch(
            "SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
            "WHERE schemaname = 'matchmaking'"
        )
    finally:
        await conn.close()
    return {r["relname"]: (int(r["n_tup_upd"]), int(r["n_tup_hot_upd"])) for r in rows}


async def _wal_lsn(url: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"))
    finally:
        await conn.close()


def _enable_profile(server: EmbeddedPostgres) -> None:
    """Before the first start: statement and function statistics for `_profile`."""
    server.init()
    with open(server.data_dir / "postgresql.auto.conf", "a") as conf:
        conf.write(
            "shared_preload_libraries = 'pg_stat_statements'\n"
            "pg_stat_statements.track = 'all'\n"
            # Planning counted per statement: a statement planned on every call (a custom plan
            # preferred to the cached generic one) shows plans_per_call 1 (see mm0013).
            "pg_stat_statements.track_planning = on\n"
            "track_functions = 'all'\n"
        )


async def _profile_reset(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        await conn.execute("SELECT pg_stat_statements_reset(), pg_stat_reset()")
    finally:
        await conn.close()


async def _profile(url: str, joins: int) -> dict[str, Any]:
    """Milliseconds of PostgreSQL time per join: per function (self/total) and per statement.

    Read after the services stopped: a backend reports its function counters when it exits."""
    conn = await asyncpg.connect(url)
    try:
        functions = await conn.fetch(
            "SELECT schemaname || '.' || funcname AS name, calls, self_time, total_time "
            "FROM pg_stat_user_functions ORDER BY self_time DESC"
        )
        statements = await conn.fetch(
            "SELECT toplevel, calls, plans, total_exec_time, total_plan_time, rows, "
            "shared_blks_hit + shared_blks_read AS blocks, "
            "regexp_replace(query, '\\s+', ' ', 'g') AS query "
            "FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT $1",
            PROFILE_TOP,
        )
    finally:
        await conn.close()
    per = max(1, joins)
    return {
        "functions_ms_per_join": {
            f["name"]: {
                "calls_per_join": round(f["calls"] / per, 2),
                "self": round(f["self_time"] / per, 3),
                "total": round(f["total_time"] / per, 3),
            }
            for f in functions
        },
        "statements_ms_per_join": [
            {
                "ms": round(s["total_exec_time"] / per, 3),
                "plan_ms": round(s["total_plan_time"] / per, 3),
                "calls_per_join": round(s["calls"] / per, 2),
                "plans_per_call": round(s["plans"] / max(1, s["calls"]), 2),
                "blocks_per_call": round(s["blocks"] / max(1, s["calls"]), 1),
                "top": s["toplevel"],
                "query": s["query"][:160],
            }
            for s in statements
        ],
    }


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is not None:
            continue
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="mesa-bench-mm-"))
    tmp.chmod(0o711)  # ours: passable by the server's own user (as root)
    server = EmbeddedPostgres(tmp / "pg", free_port())
    procs: list[subprocess.Popen[bytes]] = []
    try:
        if PG_PROFILE:
            _enable_profile(server)
        server.start()
        server.create_database("bench")
        url = server.url("bench")
        upgrade(url, ["ledger", "matchmaking"])
        asyncio.run(_fund(url))
        secret = secrets.token_bytes(32)
        ledger_port, mm_port, engine_port = free_ports(3)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MESA_")} | {
            "MESA_DATABASE_URL": url,
            "MESA_INTERNAL_SECRET": secret.hex(),
            "MESA_LOG_LEVEL": "warning",
            "MESA_ENV": "production",  # as deployed: e.g. the services freeze their startup heap
            "MESA_VAR_DIR": str(tmp / "var"),
            "MESA_LEDGER_URL": f"http://127.0.0.1:{ledger_port}",
            "MESA_ENGINE_URL": f"http://127.0.0.1:{engine_port}",
        }
        procs.append(_serve("bench.bench_matchmaking:ledger_app", ledger_port, env))
        procs.append(_serve("bench.bench_matchmaking:matchmaking_app", mm_port, env))
        procs.append(_serve("bench.bench_matchmaking:engine_app", engine_port, env))
        ledger_base = f"http://127.0.0.1:{ledger_port}"
        base = f"http://127.0.0.1:{mm_port}"
        for b in (ledger_base, base, f"http://127.0.0.1:{engine_port}"):
            wait_healthy(b)
        baseline = asyncio.run(_baseline(ledger_base, secret))
        baseline.pop("elapsed_s")
        me = psutil.Process()
        cpu_before = [_cpu_s(p) for p in procs]
        if PG_PROFILE:
            asyncio.run(_profile_reset(url))
        updates_before = asyncio.run(_updates(url))
        wal_before = asyncio.run(_wal_lsn(url))
        pg_before, me_before = _pg_cpu_s(server), sum(me.cpu_times()[:2])
        run = asyncio.run(_run(base, secret))
        cpu_used = [round(_cpu_s(p) - b, 2) for p, b in zip(procs, cpu_before, strict=True)]
        pg_used = round(_pg_cpu_s(server) - pg_before, 2)
        me_used = round(sum(me.cpu_times()[:2]) - me_before, 2)
        load = round(os.getloadavg()[0], 2)
        wal_bytes = asyncio.run(_wal_lsn(url)) - wal_before
        counts = asyncio.run(_count(url))
        updates = {
            name: [
                n - updates_before.get(name, (0, 0))[0],
                hot - updates_before.get(name, (0, 0))[1],
            ]
            for name, (n, hot) in asyncio.run(_updates(url)).items()
        }
        seated_per_s = counts["players_at_started_tables"] / run.pop("elapsed_s")
        joins = run["operations"]
        results: dict[str, Any] = {
            "clients": CLIENTS,
            "seconds": SECONDS,
            "kinds": [f"{k}@{t}" for k, t in KINDS],
            "joins": joins,
            "joins_per_s": run["per_s"],
            "p50_ms": run["p50_ms"],
            "p99_ms": run["p99_ms"],
            "errors": run["errors"],
            "first_error": run["first_error"],
            **counts,
            "seated_at_full_tables_per_s": round(seated_per_s, 1),
            "target_seated_per_s": TARGET_SEATED_PER_S,
            "meets_target": seated_per_s >= TARGET_SEATED_PER_S,
            "baseline_ledger_holds": baseline,
            "ratio_to_holds": round(seated_per_s / max(1e-9, baseline["per_s"]), 3),
            "cpus": os.cpu_count(),
            "load_average_1m": load,
            "cpu_ms_per_join": {
                "matchmaking": _per_join(cpu_used[1], joins),
                "ledger": _per_join(cpu_used[0], joins),
                "engine_stand_in": _per_join(cpu_used[2], joins),
                "postgres": _per_join(pg_used, joins),
                "clients": _per_join(me_used, joins),
            },
            # Independent of the machine's load, unlike the CPU figures: WAL written per join
            # (matchmaking and ledger together).
            "wal_bytes_per_join": round(wal_bytes / max(1, joins)),
            # Row updates during the run per table, [all, HOT]: a HOT one writes no index entry.
            "updates_all_hot": updates,
        }
        if PG_PROFILE:
            _stop(procs)
            results["pg_profile"] = asyncio.run(_profile(url, joins))
        write_result("matchmaking", results)
        return results
    finally:
        _stop(procs)
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    print(main())
