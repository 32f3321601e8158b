"""Ledger throughput, a regression guard: holds and settlements per second through the ledger
service over real HTTP (served as `mesa serve` serves it, called over its Unix sockets as
`mesa up --ledgers 2` wires the services, and over loopback TCP) at 8 and 32 concurrent
clients, with p50/p99 latency, printed next to their baseline measured in the same run: the
same SQL driven by `pgbench` on the same server. No target: the figures are compared with
earlier runs of this benchmark (what users feel is measured by `make load`).

Everything runs on this machine: an embedded PostgreSQL in a temporary folder, the ledger
service's processes, the clients in this one. Results: bench/results/ledger.json.
"""

from __future__ import annotations

import asyncio
import os
import re
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
import msgspec

from bench.common import busy_since, cpu_jiffies, percentile, wait_healthy, write_result
from launcher.embedded_pg import EmbeddedPostgres, bin_dir
from launcher.reaper import Reaper
from ledger import chain
from ledger.batch import GroupCommit
from ledger.ops import Ledger, Seat
from services.common.auth import header_value
from services.common.config import Settings, unix_socket_url
from services.common.http import InternalClient, RemoteError
from services.common.migrate import upgrade
from services.common.ports import free_port, free_ports
from services.ledger.contract import REPLICA_FILL

# The ledger accepts holds from matchmaking and settlements from the engine only: the bench
# calls as the service whose step it drives.
BENCH_CALLER = {"hold": "matchmaking", "settle": "engine"}

SECONDS = float(os.environ.get("BENCH_LEDGER_SECONDS", "3"))
WARMUP_SECONDS = float(os.environ.get("BENCH_LEDGER_WARMUP_SECONDS", "0.5"))
CONCURRENCY = (8, 32)
PLAYERS = 64
# Enough started matches for every settlement cell: the service's runs with their warm-ups and
# the pgbench ceilings: about 116,000 at one run's rates with four clients (computed; the
# batched ceiling at 32 clients alone settles 10,000-15,000 in 3 s). 110,000 ran out once.
MATCHES = int(os.environ.get("BENCH_LEDGER_MATCHES", "160000"))
# The service is called as `mesa up` deploys it, over its Unix socket, by two clients in turn:
# the services' own InternalClient (`internal`) and a minimal keep-alive HTTP/1.1 client in
# Python (`raw`, less CPU per request on the cores the service and PostgreSQL share). `raw-tcp`
# is the Python client over loopback TCP, as a caller on another host would come.
CLIENTS = tuple(os.environ.get("BENCH_LEDGER_CLIENTS", "internal,raw,raw-tcp").split(","))
# Ledger processes, as `mesa up --ledgers 2` runs them: one process runs at most one core of
# Python, and this machine has two. Callers fill one replica before the next (REPLICA_FILL
# requests in flight): at 8 clients every request goes to the first, as with one process; at 32
# the second takes half (docs/decisions/0006-ledger-replicas-filled-in-turn.md).
REPLICAS = int(os.environ.get("BENCH_LEDGER_REPLICAS", "2"))
KNOWN_CLIENTS = ("internal", "raw", "raw-tcp")

HOLD_SQL = (
    "\\set p random(0, 63)\n"
    "SELECT ledger.hold(k, '\\x00'::bytea, 'bp' || :p, k, 1, 'USD', 'bench') "
    "FROM (SELECT gen_random_uuid()::text AS k) s;\n"
)


def _every_one_posted(batch_call: str) -> str:
    """A `post_batch` call that fails (division by zero) unless every operation posted: a
    refusal comes back as a row, and refusals are no ceiling (nor are exhausted matches)."""
    return (
        "SELECT 1 / (count(*) FILTER (WHERE (b).refusal_sqlstate IS NOT NULL) = 0)::int FROM ("
        + batch_call
        + ") r(b);\n"
    )


def hold_batch_sql(size: int) -> str:
    """`size` holds in one `ledger.post_batch` call: what the service's group commit sends."""
    return "\\set p random(0, 63)\n" + _every_one_posted(
        "SELECT ledger.post_batch(array_fill('hold'::text, ARRAY[" + str(size) + "]), "
        "array_agg(json_build_array(k, '00', 'bp' || ((:p + n) % 64), k, 1, 'USD', 'bench')::text "
        "ORDER BY n)) FROM (SELECT gen_random_uuid()::text AS k, n "
        "FROM generate_series(1, " + str(size) + ") n) s"
    )


def settle_batch_sql(size: int) -> str:
    return _every_one_posted(
        "SELECT ledger.post_batch(array_fill('settle'::text, ARRAY[" + str(size) + "]), "
        "array_agg(json_build_array('settle-' || m, '00', 'bm-' || m, "
        "json_build_array('bp' || (m % 64)), json_build_array(1), 1000)::text ORDER BY m)) "
        "FROM (SELECT nextval('bench.next_match') AS m FROM generate_series(1, "
        + str(size)
        + ")) s"
    )


SETTLE_SQL = (
    "SELECT ledger.settle_match('settle-' || m, '\\x00'::bytea, 'bm-' || m, "
    "ARRAY['bp' || (m % 64)], ARRAY[1], 1000) "
    "FROM (SELECT nextval('bench.next_match') AS m) s;\n"
)


def server_app() -> Any:
    """The ledger app from MESA_* settings (a larger database pool than the default)."""
    from services.common.config import load_settings
    from services.common.logging import configure_logging
    from services.ledger.app import create_app

    settings = load_settings()
    configure_logging("ledger", settings.log_format, settings.log_level)
    return create_app(settings, pool_size=40)


def serve(port: int, socket_path: str) -> int:
    """The service process: served as `mesa serve` serves it, on TCP and on its socket."""
    from services.common.serve import run_app

    return run_app(server_app(), "ledger", "127.0.0.1", port, Path(socket_path))


# Matches set up at once, each worker one match at a time (two holds, then the start).
SETUP_WORKERS = 64


async def _start_matches(url: str) -> None:
    """MATCHES two-seat matches, started and waiting for their settlement: match n seats
    players n%64 and (n+1)%64. Through the service's group commit (`ledger.post_batch`, up to
    32 operations a transaction), since every settlement cell of the bench needs matches of its
    own: the whole setup (with the seal and the vacuum) took 159.8 s for 160,000 matches this
    way, against 145.6 s for 110,000 with one function call per operation in chunks of 500
    matches a statement."""
    ledger = await Ledger.connect(url, max_size=8, application_name="bench-setup")
    group = GroupCommit(ledger)
    numbers = iter(range(1, MATCHES + 1))

    async def worker() -> None:
        for n in numbers:
            a, b = f"bp{n % PLAYERS}", f"bp{(n + 1) % PLAYERS}"
            seats = [Seat(0, a, f"bm-{n}-a"), Seat(1, b, f"bm-{n}-b")]
            for seat in seats:
                key = f"bh-{n}-{seat.reservation_id[-1]}"
                args = ledger.hold_args(key, seat.player, seat.reservation_id, 100, "USD", "bench")
                await group.call("hold", *args)
            args = ledger.start_args(f"bs-{n}", f"bm-{n}", "bronze", "dominicana", seats, "USD")
            await group.call("start", *args)

    try:
        await asyncio.gather(*(worker() for _ in range(SETUP_WORKERS)))
    finally:
        await group.close()
        await ledger.pool.close()


async def _setup(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("CREATE SCHEMA IF NOT EXISTS bench")
        await conn.execute("CREATE SEQUENCE IF NOT EXISTS bench.next_match")
        await conn.execute("GRANT USAGE ON SCHEMA bench TO mesa_app")
        await conn.execute("GRANT USAGE, SELECT, UPDATE ON SEQUENCE bench.next_match TO mesa_app")
        await conn.execute(
            "SELECT ledger.open_wallet('bp' || n, 'USD') FROM generate_series(0, $1 - 1) n",
            PLAYERS,
        )
        await conn.execute(
            "SELECT ledger.deposit('fund-' || n, '\\x00'::bytea, 'bp' || n, 1000000000000, 'USD', "
            "'bench') FROM generate_series(0, $1 - 1) n",
            PLAYERS,
        )
        await _start_matches(url)
        # Seal the setup's entries now: otherwise the service's sealer spends the first run
        # catching up on them, which no steady state sees.
        while await chain.seal(conn, max_entries=200_000):
            pass
        await conn.execute("VACUUM ANALYZE")
    finally:
        await conn.close()


async def _next_match(url: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval("SELECT nextval('bench.next_match')"))
    finally:
        await conn.close()


class _RawClient:
    """One keep-alive HTTP/1.1 connection (TCP, or the Unix socket at `unix_path`): write a
    request, read status and body."""

    def __init__(self, host: str, port: int, unix_path: str | None = None) -> None:
        self.host = host
        self.port = port
        self.unix_path = unix_path
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes, auth: str) -> tuple[int, bytes]:
        if self.writer is None:
            if self.unix_path is not None:
                self.reader, self.writer = await asyncio.open_unix_connection(self.unix_path)
            else:
                self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        if self.reader is None:
            raise RuntimeError("not connected")
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: {auth}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        self.writer.write(head + body)
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.split(b"\r\n")
        status = int(lines[0].split(b" ")[1])
        length = 0
        for line in lines[1:]:
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        return status, await self.reader.readexactly(length)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class Replicas:
    """The ledger service's processes: each one's TCP port and Unix socket. A client's
    connection `c` goes to `replica_of(c)`: the first replica up to REPLICA_FILL connections,
    then the next (with one request in flight on each, what the callers' fill-first routing
    does; `InternalClient` routes the `internal` client's requests itself)."""

    def __init__(self, ports: list[int], sockets: list[str]) -> None:
        self.ports = ports
        self.sockets = sockets
        self.bases = [f"http://127.0.0.1:{port}" for port in ports]

    def replica_of(self, connection: int) -> int:
        return min(connection // REPLICA_FILL, len(self.ports) - 1)


def _commit_counters(bases: list[str]) -> tuple[float, float]:
    """(database calls, operations) of the replicas' group commits so far, added up."""
    calls = operations = 0.0
    for base in bases:
        text = httpx.get(base + "/metrics", timeout=5).text
        found = dict(
            re.findall(r"^(mesa_ledger_commit_(?:calls|operations))_total ([0-9.e+]+)$", text, re.M)
        )
        calls += float(found.get("mesa_ledger_commit_calls", 0))
        operations += float(found.get("mesa_ledger_commit_operations", 0))
    return calls, operations


async def _http_run(
    replicas: Replicas,
    secret: bytes,
    kind: str,
    clients: int,
    counter: list[int],
    client: str,
) -> dict[str, Any]:
    auth = header_value(secret, BENCH_CALLER[kind], "ledger", ttl_s=600)
    latencies: list[float] = []
    errors: list[str] = []
    encode = msgspec.json.encode
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=replicas.bases[0], limits=limits, timeout=30) as http:
        await asyncio.gather(*(http.get("/health") for _ in range(clients)))  # warm up

        internal = (
            InternalClient.of(
                "ledger",
                Settings(
                    internal_secret=secret,
                    ledger_url=",".join(unix_socket_url(Path(s)) for s in replicas.sockets),
                ),
                BENCH_CALLER[kind],
                timeout_s=30,
            )
            if client == "internal"
            else None
        )

        async def one(c: int, stop_at: float, record: bool) -> None:
            raw = None
            r = replicas.replica_of(c)
            if client == "raw":
                raw = _RawClient("127.0.0.1", replicas.ports[r], replicas.sockets[r])
            elif client == "raw-tcp":
                raw = _RawClient("127.0.0.1", replicas.ports[r])
            i = 0
            try:
                while time.perf_counter() < stop_at:
                    i += 1
                    body: dict[str, Any]
                    if kind == "hold":
                        k = f"h-{client}-{clients}-{c}-{i}-{secrets.token_hex(4)}"
                        path = "/v1/holds"
                        body = {
                            "idempotency_key": k,
                            "player": f"bp{(c * 7 + i) % PLAYERS}",
                            "reservation_id": k,
                            "amount": 1,
                            "table_id": "bench",
                        }
                    else:
                        counter[0] += 1
                        m = counter[0]
                        if m > MATCHES:
                            errors.append("out of started matches: raise BENCH_LEDGER_MATCHES")
                            return
                        path = "/v1/matches/settle"
                        body = {
                            "idempotency_key": f"settle-{m}",
                            "match_id": f"bm-{m}",
                            "winners": [{"player": f"bp{m % 64}"}],
                        }
                    started = time.perf_counter()
                    if raw is not None:
                        status, content = await raw.post(path, encode(body), auth)
                    elif internal is not None:
                        try:
                            await internal.post(path, body, dict)
                            status, content = 200, b""
                        except RemoteError as exc:
                            status, content = exc.status, exc.code.encode()
                    else:
                        response = await http.post(
                            path, content=encode(body), headers={"Authorization": auth}
                        )
                        status, content = response.status_code, response.content
                    if record:
                        latencies.append(time.perf_counter() - started)
                    if status != 200:
                        errors.append(f"{status} {content[:200]!r}")
            finally:
                if raw is not None:
                    await raw.close()

        # Unmeasured first: each database connection plans the posting statements on first
        # use, and the service's pool and the clients' connections open.
        warm_until = time.perf_counter() + WARMUP_SECONDS
        await asyncio.gather(*(one(c, warm_until, False) for c in range(clients)))
        window = _Window(replicas.bases)
        began = time.perf_counter()
        stop_at = began + SECONDS
        await asyncio.gather(*(one(c, stop_at, True) for c in range(clients)))
        elapsed = time.perf_counter() - began
        measured = window.close()
        if internal is not None:
            await internal.aclose()
    latencies.sort()
    return {
        "client": client,
        "clients": clients,
        "operations": len(latencies),
        "per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(percentile(latencies, 0.50) * 1000, 3),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 3),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        **measured,
    }


class _Window:
    """What happened on the service's side of one measured run, from its start to `close`."""

    def __init__(self, bases: list[str]) -> None:
        self.bases = bases
        self.commits = _commit_counters(bases)
        self.cpu = cpu_jiffies()

    def close(self) -> dict[str, float]:
        busy = busy_since(self.cpu)  # before the counters' own HTTP call
        calls, ops = _commit_counters(self.bases)
        return {
            # the group commit: operations per database transaction
            "operations_per_commit": round(
                (ops - self.commits[1]) / max(1.0, calls - self.commits[0]), 2
            ),
            # the machine's CPU busy share (2 cores: service, PostgreSQL and client together)
            "cpu_busy": busy,
        }


def _pgbench(server: EmbeddedPostgres, dbname: str, script: str, clients: int) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(script)
        path = f.name
    os.chmod(path, 0o644)
    env = {**server.client_env(), "PGOPTIONS": "-c role=mesa_app"}
    cmd = [
        str(bin_dir() / "pgbench"),
        "-h", server.host, "-p", str(server.port), "-U", "postgres",
        "-n", "-M", "prepared", "-c", str(clients), "-j", str(min(clients, 4)),
        "-T", str(max(1, int(SECONDS))), "-f", path, dbname,
    ]  # fmt: skip
    cpu_before = cpu_jiffies()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    busy = busy_since(cpu_before)
    os.unlink(path)
    tps = re.search(r"tps = ([0-9.]+)", out.stdout)
    lat = re.search(r"latency average = ([0-9.]+) ms", out.stdout)
    failed = re.search(r"number of failed transactions: (\d+)", out.stdout)
    return {
        "clients": clients,
        "per_s": float(tps.group(1)) if tps else 0.0,
        "latency_avg_ms": float(lat.group(1)) if lat else None,
        "failed": int(failed.group(1)) if failed else None,
        "error": None if out.returncode == 0 else out.stderr.strip()[-300:],
        "cpu_busy": busy,
    }


def main() -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="mesa-bench-ledger-"))
    tmp.chmod(0o711)  # ours: passable by the server's own user (as root)
    server = EmbeddedPostgres(tmp / "pg", free_port())
    services: list[subprocess.Popen[bytes]] = []
    reaper = Reaper()
    try:
        server.start()
        server.create_database("bench")
        url = server.url("bench")
        upgrade(url, ["ledger"])
        t0 = time.perf_counter()
        asyncio.run(_setup(url))
        setup_s = time.perf_counter() - t0

        secret = secrets.token_bytes(32)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MESA_")} | {
            "MESA_DATABASE_URL": url,
            "MESA_INTERNAL_SECRET": secret.hex(),
            "MESA_LOG_LEVEL": "warning",
            "MESA_ENV": "production",  # as deployed: e.g. the services freeze their startup heap
            "MESA_VAR_DIR": str(tmp / "var"),
        }
        replicas = Replicas(
            free_ports(REPLICAS),
            [str(tmp / f"ledger-{i}.sock") for i in range(REPLICAS)],
        )
        for port, socket_path in zip(replicas.ports, replicas.sockets, strict=True):
            services.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-c",
                        "import sys; from bench.bench_ledger import serve; "
                        "sys.exit(serve(int(sys.argv[1]), sys.argv[2]))",
                        str(port),
                        socket_path,
                    ],
                    env=env,
                    cwd=str(Path(__file__).resolve().parents[1]),
                    start_new_session=True,
                )  # fmt: skip
            )
            # the service must not outlive the bench, even a killed one
            reaper.guard(services[-1].pid, group=True)
        for base in replicas.bases:
            wait_healthy(base)

        unknown = sorted(set(CLIENTS) - set(KNOWN_CLIENTS))
        if unknown:
            raise ValueError(f"BENCH_LEDGER_CLIENTS: unknown {unknown}; known {KNOWN_CLIENTS}")
        clients_run = CLIENTS
        results: dict[str, Any] = {
            "clients": list(clients_run),
            "replicas": REPLICAS,
            "setup_seconds": round(setup_s, 1),
            "seconds_per_run": SECONDS,
            "load_average_at_start": os.getloadavg()[0],
        }
        counter = [0]
        chain_waits_s: list[float] = []

        def chain_sealed() -> None:
            chain_waits_s.append(asyncio.run(_wait_for_the_chain(url)))

        for kind in ("hold", "settle"):
            for clients in CONCURRENCY:
                row: dict[str, Any] = {}
                for client in clients_run:
                    chain_sealed()
                    if kind == "settle":
                        counter[0] = asyncio.run(_next_match(url))
                    res = asyncio.run(_http_run(replicas, secret, kind, clients, counter, client))
                    if kind == "settle":
                        asyncio.run(_bump(url, counter[0]))
                    row[f"service_{client}"] = res
                chain_sealed()
                pgb = _pgbench(server, "bench", HOLD_SQL if kind == "hold" else SETTLE_SQL, clients)
                row["pgbench"] = pgb
                # The same SQL as the service sends: post_batch calls of its mean batch size,
                # with as many operations in flight as the service's clients had.
                size = max(
                    1,
                    round(max(row[f"service_{cl}"]["operations_per_commit"] for cl in clients_run)),
                )
                script = hold_batch_sql(size) if kind == "hold" else settle_batch_sql(size)
                chain_sealed()
                batched = _pgbench(server, "bench", script, max(1, -(-clients // size)))
                batched["batch_size"] = size
                batched["per_s"] = round(batched["per_s"] * size, 1)  # operations, not calls
                row["pgbench_same_batches"] = batched
                for client in clients_run:
                    res = row[f"service_{client}"]
                    ratio = res["per_s"] / pgb["per_s"] if pgb["per_s"] else 0.0
                    same = res["per_s"] / batched["per_s"] if batched["per_s"] else 0.0
                    row[f"ratio_{client}_to_pgbench"] = round(ratio, 3)
                    row[f"ratio_{client}_to_pgbench_same_batches"] = round(same, 3)
                    print(
                        f"{kind:6} clients={clients:2} {client:8}: service {res['per_s']:8.1f}/s "
                        f"p50 {res['p50_ms']:7.2f} ms p99 {res['p99_ms']:7.2f} ms "
                        f"errors {res['errors']} ops/commit {res['operations_per_commit']} "
                        f"busy {res['cpu_busy']:.0%} | "
                        f"baseline: pgbench one op a call {pgb['per_s']:8.1f}/s (x{ratio:.2f}), "
                        f"batches of {size} {batched['per_s']:8.1f}/s (x{same:.2f}) "
                        f"busy {batched['cpu_busy']:.0%}",
                        flush=True,
                    )
                results[f"{kind}_{clients}"] = row
        results["chain_waits_seconds"] = [round(w, 2) for w in chain_waits_s]
        # A regression guard: no target, the baseline is pgbench in the same run (`pgbench`:
        # one operation a call; `pgbench_same_batches`: the service's own batches).
        results["baseline"] = "pgbench, same server, same run"
        results["cpus"] = os.cpu_count()
        write_result("ledger", results)
        return results
    finally:
        for service in services:
            service.terminate()
        for service in services:
            try:
                service.wait(10)
            except subprocess.TimeoutExpired:
                service.kill()
        server.stop()
        reaper.close()
        shutil.rmtree(tmp, ignore_errors=True)


# The service's sealer links every entry into the hash chain, also those the pgbench ceilings
# write straight into the database (up to ~40,000 in a few seconds, a backlog no deployment
# sees: only the service posts). Each run starts once the chain has caught up, so no run
# measures the sealing of another run's entries.
CHAIN_WAIT_MAX_S = 180.0


async def _wait_for_the_chain(url: str) -> float:
    """Wait until every entry posted so far is sealed; return the seconds waited."""
    started = time.monotonic()
    conn = await asyncpg.connect(url)
    try:
        target = await conn.fetchval("SELECT coalesce(max(id), 0) FROM ledger.entries")
        while await conn.fetchval(
            "SELECT EXISTS (SELECT FROM ledger.entries WHERE id > $1 AND id <= $2)",
            await chain.sealed_to(conn),
            target,
        ):
            if time.monotonic() - started > CHAIN_WAIT_MAX_S:
                raise RuntimeError("the ledger service's sealer did not catch up")
            await asyncio.sleep(0.1)  # the sealer is another process: nothing to await
    finally:
        await conn.close()
    return time.monotonic() - started


async def _bump(url: str, value: int) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("SELECT setval('bench.next_match', $1)", value)
    finally:
        await conn.close()


if __name__ == "__main__":
    main()
