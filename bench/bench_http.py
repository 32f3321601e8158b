"""Internal HTTP client cost: CPU per request in the calling process, requests/s, p50/p99.

A uvicorn server (uvloop, httptools; its own process) serves a tiny `/health`-like GET and a
hold-like POST (msgspec Structs). N concurrent callers in this process (uvloop, as in
production) loop on them for a few seconds through:

- `httpx`: InternalClient on an httpx transport (a `transport=` given);
- `aiohttp`: an aiohttp `ClientSession` (C parser, `TCPConnector(limit=100)`), called directly;
- `internal`: InternalClient as the services run it;
- `http1`: the earlier home-made keep-alive HTTP/1.1 pool (`bench.http1`), requests written as
  InternalClient wrote them: the figures the library is chosen against;
- `raw`: the minimal one-connection-per-caller client of bench/bench_ledger.py, the floor.

CPU per request is `time.process_time()` of this process over the requests made, so it
counts the client only. Results: bench/results/http.json.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from typing import Any

import httpx
import msgspec

from bench.common import SERVICE_HTTP_PROTOCOL, percentile, write_result
from services.common.auth import header_value
from services.common.config import Settings
from services.common.http import InternalClient
from services.common.ports import free_port

SECONDS = float(os.environ.get("BENCH_HTTP_SECONDS", "3"))
CONCURRENCY = tuple(int(c) for c in os.environ.get("BENCH_HTTP_CONCURRENCY", "8,32").split(","))
CLIENTS = tuple(os.environ.get("BENCH_HTTP_CLIENTS", "httpx,aiohttp,internal,http1,raw").split(","))
SECRET = b"b" * 32


class Health(msgspec.Struct):
    service: str
    version: str
    database: str


class Hold(msgspec.Struct):
    idempotency_key: str
    player: str
    reservation_id: str
    amount: int
    table_id: str


class HoldPlaced(msgspec.Struct):
    hold_id: str
    player: str
    amount: int
    available: int


def server_app() -> Any:
    """uvicorn --factory entry point: the two routes, no database, no auth guard."""
    from litestar import Litestar, get, post

    @get("/health")
    async def health() -> Health:
        return Health(service="bench", version="0", database="ok")

    @post("/v1/holds", status_code=200)
    async def hold(data: Hold) -> HoldPlaced:
        return HoldPlaced(hold_id=data.idempotency_key, player=data.player, amount=1, available=9)

    return Litestar([health, hold])


async def _run(url: str, port: int, client: str, callers: int, route: str) -> dict[str, Any]:
    settings = Settings(internal_secret=SECRET)
    internal: InternalClient | None = None
    if client == "httpx":
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
        transport = httpx.AsyncHTTPTransport(limits=limits)
        internal = InternalClient(
            url, settings, "matchmaking", audience="ledger", transport=transport
        )
    elif client == "internal":
        internal = InternalClient(url, settings, "matchmaking", audience="ledger")
    auth = header_value(SECRET, "matchmaking", "ledger", ttl_s=600)
    session: Any = None
    pool: Any = None
    if client == "aiohttp":
        import aiohttp

        session = aiohttp.ClientSession(
            url, connector=aiohttp.TCPConnector(limit=100), headers={"Authorization": auth}
        )
    elif client == "http1":
        from bench.http1 import Http1Pool

        pool = Http1Pool("127.0.0.1", port, max_connections=100)
    latencies: list[float] = []
    errors: list[str] = []

    async def call(c: int, i: int, raw: Any) -> None:
        if session is not None or pool is not None:
            await _library_call(session, pool, port, auth, route, c, i)
            return
        if route == "health":
            if internal is not None:
                await internal.get("/health", Health)
            else:
                status, _ = await raw.get("/health", auth)
                if status != 200:
                    raise RuntimeError(status)
            return
        body = Hold(f"h-{c}-{i}", f"p{c}", f"h-{c}-{i}", 1, "bench")
        if internal is not None:
            await internal.post("/v1/holds", body, HoldPlaced)
        else:
            status, content = await raw.post("/v1/holds", msgspec.json.encode(body), auth)
            if status != 200:
                raise RuntimeError(status)
            msgspec.json.decode(content, type=HoldPlaced)

    async def one(c: int, stop_at: float, record: bool) -> None:
        raw = _Raw("127.0.0.1", port) if client == "raw" else None
        i = 0
        try:
            while time.perf_counter() < stop_at:
                i += 1
                started = time.perf_counter()
                try:
                    await call(c, i, raw)
                except Exception as exc:
                    errors.append(f"{type(exc).__name__}: {exc}"[:200])
                if record:
                    latencies.append(time.perf_counter() - started)
        finally:
            if raw is not None:
                await raw.close()

    try:
        # Warm-up: connections opened, code paths hot.
        await asyncio.gather(*(one(c, time.perf_counter() + 0.3, False) for c in range(callers)))
        errors.clear()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        stop_at = wall0 + SECONDS
        await asyncio.gather(*(one(c, stop_at, True) for c in range(callers)))
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    finally:
        if internal is not None:
            await internal.aclose()
        if session is not None:
            await session.close()
        if pool is not None:
            await pool.aclose()
    latencies.sort()
    n = max(1, len(latencies))
    return {
        "client": client,
        "callers": callers,
        "route": route,
        "requests": len(latencies),
        "per_s": round(len(latencies) / wall, 1),
        "cpu_us_per_request": round(cpu / n * 1e6, 1),
        "p50_ms": round(percentile(latencies, 0.50) * 1000, 3),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 3),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
    }


async def _library_call(
    session: Any, pool: Any, port: int, auth: str, route: str, c: int, i: int
) -> None:
    """One call on aiohttp's session or on the earlier pool, with the headers InternalClient
    sends, the answer decoded into its Struct."""
    request_id = f"r-{c}-{i}"
    body = msgspec.json.encode(Hold(f"h-{c}-{i}", f"p{c}", f"h-{c}-{i}", 1, "bench"))
    kind: type[Any] = Health if route == "health" else HoldPlaced
    if session is not None:
        headers = {"X-Request-ID": request_id, "Content-Type": "application/json"}
        if route == "health":
            answer = session.get("/health", headers=headers)
        else:
            answer = session.post("/v1/holds", data=body, headers=headers)
        async with answer as response:
            content = await response.read()
            status = response.status
    else:
        head = (
            f"{'GET /health' if route == 'health' else 'POST /v1/holds'} HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{port}\r\nAuthorization: {auth}\r\n"
            f"X-Request-ID: {request_id}\r\nContent-Type: application/json\r\n"
        )
        data = (
            f"{head}\r\n".encode()
            if route == "health"
            else f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body
        )
        status, content = await pool.request(data, 10.0)
    if status != 200:
        raise RuntimeError(status)
    msgspec.json.decode(content, type=kind)


class _Raw:
    """bench_ledger's minimal client plus a GET: one keep-alive connection per caller."""

    def __init__(self, host: str, port: int) -> None:
        from bench.bench_ledger import _RawClient

        self.client = _RawClient(host, port)

    async def post(self, path: str, body: bytes, auth: str) -> tuple[int, bytes]:
        return await self.client.post(path, body, auth)

    async def get(self, path: str, auth: str) -> tuple[int, bytes]:
        c = self.client
        if c.writer is None:
            c.reader, c.writer = await asyncio.open_connection(c.host, c.port)
        if c.reader is None:
            raise RuntimeError("not connected")
        c.writer.write(
            f"GET {path} HTTP/1.1\r\nHost: {c.host}\r\nAuthorization: {auth}\r\n\r\n".encode()
        )
        raw = await c.reader.readuntil(b"\r\n\r\n")
        lines = raw.split(b"\r\n")
        length = 0
        for line in lines[1:]:
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        return int(lines[0].split(b" ")[1]), await c.reader.readexactly(length)

    async def close(self) -> None:
        await self.client.close()


def main() -> dict[str, Any]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [
        sys.executable, "-m", "uvicorn", "bench.bench_http:server_app", "--factory",
        "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
        "--no-access-log", "--loop", "uvloop", "--http", SERVICE_HTTP_PROTOCOL,
    ]  # fmt: skip
    server = subprocess.Popen(cmd)
    runs: list[dict[str, Any]] = []
    load_before = os.getloadavg()[0]
    try:
        for _ in range(200):
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        import uvloop

        for route in ("health", "hold"):
            for callers in CONCURRENCY:
                for client in CLIENTS:
                    runs.append(uvloop.run(_run(url, port, client, callers, route)))
    finally:
        server.terminate()
        server.wait(timeout=10)
    result = {
        "seconds": SECONDS,
        "cpus": os.cpu_count(),
        "load_average_1m_before": round(load_before, 2),
        "load_average_1m_after": round(os.getloadavg()[0], 2),
        "runs": runs,
    }
    write_result("http", result)
    return result


if __name__ == "__main__":
    import json

    print(json.dumps(main(), indent=2))
