"""The real ledger, engine and matchmaking apps in-process, wired to the gateway by ASGI."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import shutil
import socket
import subprocess
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar import Litestar

from api.app import create_app
from fairness.keys import ensure_dev_key
from services.common.http import InternalClient
from services.common.secret_file import ensure_secret
from services.engine.app import create_app as create_engine_app
from services.engine.ports import HttpLedger
from services.ledger.app import create_app as create_ledger_app
from services.matchmaking.app import create_app as create_mm_app
from services.matchmaking.config import MatchmakingConfig
from tests.api.api_helpers import PASSWORD, sign_in
from tests.conftest import make_settings

COMPONENTS = ["ledger", "fairness", "engine", "matchmaking", "gateway", "integrity"]


class Platform:
    def __init__(
        self, gateways: list[Litestar], settings: Any, services: dict[str, Litestar] | None = None
    ) -> None:
        self.gateways = gateways
        self.gateway = gateways[0]
        self.settings = settings
        self.services = services or {}  # the internal services' apps, by name

    @asynccontextmanager
    async def client(self) -> AsyncIterator[httpx.AsyncClient]:
        # Same event loop as the services' lifespans (AsyncTestClient would use another one).
        transport = httpx.ASGITransport(app=self.gateway, client=("127.0.0.1", 50000))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            yield client

    @asynccontextmanager
    async def signed_in(self, *names: str) -> AsyncIterator[list[httpx.AsyncClient]]:
        """A client per user name, each signed in as that (existing) user."""
        async with AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(self.client()) for _ in names]
            for client, name in zip(clients, names, strict=True):
                await sign_in(client, name)
            yield clients


@asynccontextmanager
async def platform(
    database_url: str,
    secret: bytes,
    key_dir: Path,
    gateways: int = 1,
    redis_url: str = "",
    ledger_clock: Callable[[], datetime] | None = None,
    **overrides: object,
) -> AsyncIterator[Platform]:
    """The real services in-process; `gateways` gateway apps share them (and one database).

    `redis_url` puts the gateways' table feed on Redis (see `redis_server`); `overrides` are
    further settings (e.g. `invitation_ttl_s`); `ledger_clock` is the daily close's now.
    """
    key_file = key_dir / "operator_key.pem"
    ensure_dev_key(key_file)
    report_key_file = key_dir / "report_signing_key"
    ensure_secret(report_key_file)
    settings = make_settings(
        database_url,
        secret,
        operator_key_file=key_file,
        report_key_file=report_key_file,
        redis_url=redis_url,
        **overrides,
    )
    ledger_app = create_ledger_app(settings, seal_in_background=False, clock=ledger_clock)
    engine_ledger = HttpLedger(settings)
    await engine_ledger.client.aclose()
    engine_ledger.client = InternalClient(
        "http://ledger",
        settings,
        "engine",
        audience="ledger",
        transport=httpx.ASGITransport(app=ledger_app),
    )
    engine_app = create_engine_app(settings, ledger=engine_ledger, scan=False)
    mm_app = create_mm_app(
        settings,
        config=MatchmakingConfig(sweep_interval_ms=0),
        ledger_transport=httpx.ASGITransport(app=ledger_app),
        engine_transport=httpx.ASGITransport(app=engine_app),
    )
    gateway_apps = [
        create_app(
            settings,
            transports={
                "ledger": httpx.ASGITransport(app=ledger_app),
                "engine": httpx.ASGITransport(app=engine_app),
                "matchmaking": httpx.ASGITransport(app=mm_app),
            },
        )
        for _ in range(gateways)
    ]
    async with AsyncExitStack() as stack:
        for app in (ledger_app, engine_app, mm_app, *gateway_apps):
            await stack.enter_async_context(app.lifespan())
        services = {"ledger": ledger_app, "engine": engine_app, "matchmaking": mm_app}
        yield Platform(gateway_apps, settings, services)


def _discard(stream: Iterator[str]) -> None:
    for _ in stream:
        pass


class RedisServer:
    """A real `redis-server` on a free loopback port, files in its own folder (no persistence)."""

    READY = "Ready to accept connections"

    def __init__(self, folder: Path) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.skip("redis-server is not installed (.ci/run installs it)")
        self.exe = exe
        self.folder = folder
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[str] | None = None

    def start(self, timeout_s: float = 20.0) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        args = [self.exe, "--port", str(self.port), "--bind", "127.0.0.1"]
        args += ["--dir", str(self.folder), "--save", "", "--appendonly", "no"]
        args += ["--daemonize", "no", "--loglevel", "notice"]
        proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
        self.proc = proc
        if proc.stdout is None:
            raise RuntimeError("redis-server has no output pipe")
        # The readiness line is the event; a watchdog bounds the wait.
        timer = threading.Timer(timeout_s, proc.kill)
        timer.start()
        try:
            seen: list[str] = []
            for line in proc.stdout:
                seen.append(line)
                if self.READY in line:
                    break
            else:
                raise RuntimeError(f"redis-server did not start: {''.join(seen[-20:])}")
        finally:
            timer.cancel()
        # Keep reading its output so a full pipe never blocks it.
        threading.Thread(target=_discard, args=(proc.stdout,), daemon=True).start()

    def kill(self) -> None:
        """SIGKILL (a crash, no goodbye to the clients) and reap it."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)


@contextmanager
def redis_server(folder: Path) -> Iterator[RedisServer]:
    server = RedisServer(folder)
    server.start()
    try:
        yield server
    finally:
        server.kill()


def seed_for(name: str) -> tuple[str, str]:
    seed = f"{name}-{secrets.token_hex(4)}"
    return seed, hashlib.sha256(seed.encode()).hexdigest()


# How long a test client waits when the gateway answers 429 (its bucket refills at 50 a second).
RATE_LIMIT_PAUSE_S = 0.2


async def play_turns(
    clients: dict[str, httpx.AsyncClient], match_id: str, max_steps: int = 3000
) -> dict[str, Any]:
    """Drive every human seat until the match is over: seeds, choices, first legal play."""
    seeds: dict[tuple[str, str], str] = {}
    for _ in range(max_steps):
        progressed = False
        last: dict[str, Any] = {}
        for name, client in clients.items():
            r = await client.get(f"/api/matches/{match_id}")
            if r.status_code == 429:
                # a long match played back to back outruns the per-credential request rate
                # (api.security.RequestLimits): wait for the bucket like a polite client
                await asyncio.sleep(RATE_LIMIT_PAUSE_S)
                continue
            if r.status_code != 200:
                raise RuntimeError(f"view failed: {r.status_code} {r.text}")
            view = r.json()
            last = view
            state = view["state"]
            if state["status"] in ("finished", "void"):
                return view
            legal = view["legal"]
            if not legal:
                continue
            first = legal[0]
            action: dict[str, Any]
            if first["type"] == "seed_commit":
                seed, commitment = seed_for(name)
                seeds[(name, str(state["deal_id"]))] = seed
                action = {"type": "seed_commit", "commitment": commitment}
            elif first["type"] == "seed_reveal":
                action = {
                    "type": "seed_reveal",
                    "seed": seeds.get((name, str(state["deal_id"])), ""),
                }
            elif first["type"] == "play":
                action = {"type": "play", "tile": first["tile"], "end": first.get("end")}
            elif first["type"] == "choose":
                action = {"type": "choose", "salgo": True}
            else:
                continue
            a = await client.post(
                f"/api/matches/{match_id}/actions", json={"seq": view["seq"], "action": action}
            )
            if a.status_code == 200:
                progressed = True
            elif a.status_code == 429:
                await asyncio.sleep(RATE_LIMIT_PAUSE_S)
            elif a.status_code not in (409,):
                raise RuntimeError(f"action refused: {a.status_code} {a.text}")
        if not progressed:
            await asyncio.sleep(0.05)
        if last.get("state", {}).get("status") in ("finished", "void"):
            return last
    raise RuntimeError("match did not finish")


__all__ = [
    "COMPONENTS",
    "PASSWORD",
    "Platform",
    "RedisServer",
    "platform",
    "play_turns",
    "redis_server",
]
