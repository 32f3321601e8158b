"""Simulated players for the load and crash tests: the real platform, the public protocol.

- `Platform`: `mesa up` as a subprocess on free loopback ports (optionally with engine and
  gateway replicas), its output drained to a log file, its service PIDs found with psutil.
- `setup_players`: player accounts and bearer tokens written through the gateway's own
  account code (the public sign-in is rate limited per address, by design), deposits through
  the public finance route as a finance user.
- `GatewayClient` and `call`: the players' public HTTP calls (keep-alive HTTP/1.1 on
  `bench.http1.Http1Pool`), retried on transport errors, 429 and 5xx until a deadline.
- `TableDriver`: every seat of a private paid table taken by a player (two at an apuesta 1v1
  table, four at an apuesta parejas table), each on its own WebSocket (`/api/matches/{id}/ws`,
  on the `websockets` library's asyncio client), acting from their seat's snapshot at a set
  pace; actions carry the seq they were made against, so a retry never plays twice (409
  stale_seq: re-read the view); a dropped socket reconnects with `?after=seq`. Latency is
  client-observed: action frame sent -> its ack frame received.
- `check_invariants`: the money and fairness checks of issue 9, read straight from PostgreSQL.

The load generator shares the cores with the platform it measures, so its hot path is lean:
frames are received as bytes (no UTF-8 decoding to `str`) and decoded into Structs of the few
fields the players read, the sockets offer no compression and send no keepalive pings, and
the bounded waits are a future plus a `call_later` timer (no Task per wait, as
`asyncio.wait_for` makes in 3.11).

Every loop here is bounded in count and in time; all traffic goes to 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import os
import queue
import secrets
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import asyncpg
import httpx
import msgspec
import psutil
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, WebSocketException
from websockets.protocol import State

from bench.http1 import Http1Pool, TransportError, request_target
from services.common.config import Settings, load_settings
from services.common.ports import free_port, free_ports, port_is_free
from services.matchmaking.kinds import CATALOGUE

READY_LINE = "ready; Ctrl-C stops everything"
KIND = "apuesta-1v1"
PAREJAS_KIND = "apuesta-parejas"  # four seats, partners across (services/matchmaking/kinds.py)
TIER = "10"
STAKE_CENTS = 1000
DEPOSIT_CENTS = 1_000_000
PASSWORD = "load-test-password"
SERVICE_NAMES = ("ledger", "engine", "matchmaking", "gateway")
REPLICA_STRIDE = 100
POLL_MIN_S = 0.05  # a table's status is polled after this long, then twice as long, ...
POLL_MAX_S = 0.4
WS_MAX_SIZE_BYTES = 1 << 20
WS_OPEN_TIMEOUT_S = 10.0
WS_CLOSE_TIMEOUT_S = 2.0
# A socket lives for one match (a few hundred frames); past this its reader closes it.
MAX_FRAMES_PER_SOCKET = 1_000_000
T = TypeVar("T")


class SimError(Exception):
    """The platform or a simulated client could not do what the run needs."""


# --------------------------------------------------------------------------------- platform


def _free_base_port(replicas: int, taken: set[int]) -> int:
    """A free port whose replica ports (base + 100 * i) are free too and none of `taken`
    (bounded attempts)."""
    for _ in range(200):
        base = free_port()
        ports = [base + REPLICA_STRIDE * i for i in range(replicas)]
        if (
            ports[-1] < 65000
            and not taken.intersection(ports)
            and all(port_is_free("127.0.0.1", p) for p in ports)
        ):
            return base
    raise SimError("no free port range found")


class Platform:
    """`python -m services.cli up` on free ports with its own var dir."""

    def __init__(
        self,
        var_dir: Path,
        engines: int = 1,
        gateways: int = 1,
        log_level: str = "warning",
        extra_env: dict[str, str] | None = None,
        ledgers: int = 1,
    ) -> None:
        self.var_dir = var_dir
        self.engines = engines
        self.gateways = gateways
        self.ledgers = ledgers
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("MESA_")}
        # distinct ports: one drawn after another may come back twice
        pg_port, matchmaking_port = free_ports(2)
        taken = {pg_port, matchmaking_port}
        ledger_port = _free_base_port(ledgers, taken)
        taken.update(ledger_port + REPLICA_STRIDE * i for i in range(ledgers))
        gateway_port = _free_base_port(gateways, taken)
        taken.update(gateway_port + REPLICA_STRIDE * i for i in range(gateways))
        engine_port = _free_base_port(engines, taken)
        self.env.update(
            MESA_VAR_DIR=str(var_dir),
            MESA_PG_PORT=str(pg_port),
            MESA_GATEWAY_PORT=str(gateway_port),
            MESA_LEDGER_PORT=str(ledger_port),
            MESA_ENGINE_PORT=str(engine_port),
            MESA_MATCHMAKING_PORT=str(matchmaking_port),
            MESA_LOG_LEVEL=log_level,
            MESA_HOST="127.0.0.1",
        )
        self.env.update(extra_env or {})
        self.proc: subprocess.Popen[str] | None = None
        self.lines: queue.Queue[str] = queue.Queue()
        self.log_path = var_dir / "up.log"
        self._reader: threading.Thread | None = None

    @property
    def settings(self) -> Settings:
        return load_settings({k: v for k, v in self.env.items() if k.startswith("MESA_")})

    @property
    def database_url(self) -> str:
        """The superuser's (the checks read every schema); services log in as mesa_app."""
        return self.settings.migration_database_url

    @property
    def gateway_urls(self) -> list[str]:
        return self.replica_urls("gateway", self.gateways)

    def _drain(self) -> None:
        proc = self.proc
        if proc is None or proc.stdout is None:
            return
        with open(self.log_path, "a") as log:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                self.lines.put(line.rstrip())

    def start(self, timeout_s: float = 180.0) -> None:
        self.var_dir.mkdir(parents=True, exist_ok=True)
        args = [sys.executable, "-m", "services.cli", "up"]
        args += ["--engines", str(self.engines), "--gateways", str(self.gateways)]
        args += ["--ledgers", str(self.ledgers)]
        self.proc = subprocess.Popen(
            args,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            # Several processes share this pipe; a line written by one can split another's
            # multi-byte character. A decoding error must not stop the drain: the pipe would
            # fill and block `mesa up` itself (a chaos run once lost its PostgreSQL restart so).
            encoding="utf-8",
            errors="replace",
            cwd=str(Path(__file__).resolve().parents[1]),
        )
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.05, min(1.0, deadline - time.monotonic())))
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            if READY_LINE in line:
                return
        tail = self.log_path.read_text(errors="replace")[-2000:] if self.log_path.exists() else ""
        self.stop()
        raise SimError(f"mesa up did not become ready in {timeout_s:.0f} s:\n{tail}")

    def wait_line(self, needle: str, timeout_s: float) -> bool:
        """Wait for an output line of `mesa up` containing `needle` (event-driven, bounded)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.05, min(1.0, deadline - time.monotonic())))
            except queue.Empty:
                continue
            if needle in line:
                return True
        return False

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(40)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def _children(self) -> list[psutil.Process]:
        if self.proc is None:
            return []
        try:
            return psutil.Process(self.proc.pid).children(recursive=False)
        except psutil.NoSuchProcess:
            return []

    def service_pids(self) -> dict[str, list[int]]:
        """PIDs of the service processes (`serve <name>`), by service name."""
        found: dict[str, list[int]] = {name: [] for name in SERVICE_NAMES}
        for child in self._children():
            with contextlib.suppress(psutil.Error):
                cmd = child.cmdline()
                if "serve" in cmd:
                    name = cmd[cmd.index("serve") + 1] if cmd.index("serve") + 1 < len(cmd) else ""
                    if name in found:
                        found[name].append(child.pid)
        return found

    def postmaster_pid(self) -> int | None:
        for child in self._children():
            with contextlib.suppress(psutil.Error):
                cmd = child.cmdline()
                if cmd and Path(cmd[0]).name == "postgres":
                    return child.pid
        return None

    def service_urls(self) -> dict[str, str]:
        """Every service process's base URL, by process name (`engine`, `engine-1`, ...)."""
        out: dict[str, str] = {}
        for name, urls in (
            ("engine", self.replica_urls("engine", self.engines)),
            ("gateway", self.gateway_urls),
            ("ledger", self.replica_urls("ledger", self.ledgers)),
        ):
            for i, url in enumerate(urls):
                out[name if i == 0 else f"{name}-{i}"] = url
        out["matchmaking"] = f"http://127.0.0.1:{self.env['MESA_MATCHMAKING_PORT']}"
        return out

    def replica_urls(self, service: str, replicas: int) -> list[str]:
        base = int(self.env[f"MESA_{service.upper()}_PORT"])
        return [f"http://127.0.0.1:{base + REPLICA_STRIDE * i}" for i in range(replicas)]

    def _process_groups(self) -> list[tuple[str, list[psutil.Process]]]:
        """Each service process by name, and PostgreSQL with all its backends."""
        groups: list[tuple[str, list[psutil.Process]]] = []
        for child in self._children():
            with contextlib.suppress(psutil.Error):
                cmd = child.cmdline()
                procs = [child]
                if cmd and Path(cmd[0]).name == "postgres":
                    name = "postgres"
                    procs += child.children(recursive=True)
                elif "serve" in cmd:
                    name = cmd[cmd.index("serve") + 1]
                else:
                    continue
                groups.append((name, procs))
        return groups

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time used so far by each service process and by PostgreSQL (all backends)."""
        out: dict[str, float] = {}
        for name, procs in self._process_groups():
            total = 0.0
            for p in procs:
                with contextlib.suppress(psutil.Error):
                    t = p.cpu_times()
                    total += t.user + t.system
            out[name] = out.get(name, 0.0) + total
        return out

    def run_queue_wait_seconds(self) -> dict[str, float]:
        """Time each process group spent runnable but waiting for a core (Linux schedstat;
        empty elsewhere): how much of a tail is queueing for the CPU, not the work itself."""
        out: dict[str, float] = {}
        for name, procs in self._process_groups():
            waited = [run_queue_wait_s(p.pid) for p in procs]
            out[name] = out.get(name, 0.0) + sum(w for w in waited if w is not None)
        return out


def run_queue_wait_s(pid: int) -> float | None:
    """Seconds the threads of `pid` waited on a run queue so far (/proc/<pid>/task/*/schedstat,
    second field, ns), or None where that is not available."""
    total_ns = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total_ns += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return total_ns / 1e9


# ----------------------------------------------------------------------------------- players


@dataclass
class Player:
    name: str
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


async def setup_players(
    database_url: str, gateway_url: str, count: int, prefix: str, deposit: int = DEPOSIT_CENTS
) -> list[Player]:
    """`count` players with bearer tokens and `deposit` cents each; returns them."""
    from api import accounts, passwords
    from services.common.db import create_engine

    # One hash for every load-test account (the cost is the sign-in's, not the test's).
    hashed = passwords.hash_password(PASSWORD)
    names = [f"{prefix}{i:05d}" for i in range(count)]
    finance_name = f"{prefix}fin"
    # Several finance tokens: the gateway limits requests per credential.
    finance_tokens = 8
    engine = create_engine(database_url, application_name="mesa-load-setup")
    players: list[Player] = []
    try:
        from sqlalchemy import text

        async with engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO gateway.users (id, display_name, password_hash, role) "
                    "SELECT x, x, :h, CASE WHEN x = :fin THEN 'finance' ELSE 'player' END "
                    "FROM unnest(CAST(:names AS text[])) AS x ON CONFLICT (id) DO NOTHING"
                ),
                {"h": hashed, "names": [*names, finance_name], "fin": finance_name},
            )
        sem = asyncio.Semaphore(16)

        async def token_for(name: str) -> str:
            async with sem:
                user = await accounts.get_user(engine, name)
                if user is None:
                    raise SimError(f"user {name} was not created")
                token, _, _ = await accounts.open_session(engine, user, "bearer", "load")
                return token

        everyone = [*names, *[finance_name] * finance_tokens]
        tokens = await asyncio.gather(*(token_for(n) for n in everyone))
    finally:
        await engine.dispose()
    finance = [Player(finance_name, t) for t in tokens[count:]]
    players = [Player(n, t) for n, t in zip(names, tokens[:count], strict=True)]
    async with httpx.AsyncClient(base_url=gateway_url, timeout=30.0) as client:
        sem = asyncio.Semaphore(16)

        async def deposit_for(i: int, p: Player) -> None:
            cashier = finance[i % len(finance)]
            async with sem:
                body = {
                    "player": p.name,
                    "amount": deposit,
                    "reference": "load test deposit",
                    "idempotency_key": f"load-deposit-{p.name}",
                }
                for attempt in range(10):
                    r = await client.post(
                        "/api/finance/deposits", json=body, headers=cashier.headers
                    )
                    if r.status_code == 200:
                        return
                    if r.status_code < 500 and r.status_code != 429:
                        raise SimError(f"deposit for {p.name}: {r.status_code} {r.text[:200]}")
                    await asyncio.sleep(0.2 * (attempt + 1))
                raise SimError(f"deposit for {p.name} kept failing")

        await asyncio.gather(*(deposit_for(i, p) for i, p in enumerate(players)))
    return players


# ------------------------------------------------------------------------------------ stats


@dataclass
class Stats:
    measure_from: float = 0.0
    measure_to: float = float("inf")
    latencies_ms: list[float] = field(default_factory=list)
    # By action type (play, seed_commit, ...): which steps make the tail.
    latencies_by_kind_ms: dict[str, list[float]] = field(default_factory=dict)
    actions: int = 0
    actions_total: int = 0
    # WebSocket frames received by every seat: an action fans out to every seat of its table.
    frames: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    stale: int = 0
    reconnects: int = 0
    http_retries: int = 0
    matches_started: int = 0
    matches_over: int = 0
    lobby_polls: int = 0
    live_tables: int = 0
    error_samples: list[str] = field(default_factory=list)
    last_ack_at: float = 0.0
    last_ack_sent_at: float = 0.0

    def error(self, code: str, detail: str = "") -> None:
        self.errors[code] += 1
        if len(self.error_samples) < 20:
            self.error_samples.append(f"{code}: {detail[:200]}")

    def measuring(self, at: float) -> bool:
        """Whether monotonic time `at` is inside the measured window."""
        return self.measure_from <= at <= self.measure_to

    def acted(self, sent_at: float, latency_ms: float, kind: str = "") -> None:
        self.actions_total += 1
        self.last_ack_at = time.monotonic()
        self.last_ack_sent_at = max(self.last_ack_sent_at, sent_at)
        if self.measuring(sent_at):
            self.actions += 1
            self.latencies_ms.append(latency_ms)
            if kind:
                self.latencies_by_kind_ms.setdefault(kind, []).append(latency_ms)


@dataclass
class MatchRecord:
    match_id: str
    table_id: str
    players: list[str]
    status: str = "live"
    winners: list[str] = field(default_factory=list)
    settled: bool = False


# ------------------------------------------------------------------------------ HTTP helper

_RETRY_STATUSES = {429, 502, 503, 504}
MAX_RESPONSE_BYTES = 4 * 1024 * 1024
_BODYLESS = ("GET", "HEAD", "DELETE", "OPTIONS")


def _header_lines(headers: dict[str, str]) -> list[str]:
    """`name: value` request lines; a line break in either would smuggle a request: refused."""
    lines = []
    for name, value in headers.items():
        if any(c in name + value for c in "\r\n"):
            raise ValueError(f"header {name!r} contains a line break")
        lines.append(f"{name}: {value}")
    return lines


class HttpResponse:
    """What the simulated players read from an answer: its status and body."""

    __slots__ = ("status_code", "content")

    def __init__(self, status_code: int, content: bytes) -> None:
        self.status_code = status_code
        self.content = content

    def json(self) -> Any:
        return msgspec.json.decode(self.content)

    @property
    def text(self) -> str:
        return self.content.decode(errors="replace")


class GatewayClient:
    """Keep-alive HTTP/1.1 to one gateway for the simulated players' public calls.

    On `bench.http1.Http1Pool` (requests written here in one piece, answers parsed by
    httptools): httpx cost the load generator a large share of its CPU for the lobby calls of
    every match, and that CPU is taken from the platform it measures. At most `max_connections`
    sockets; one `timeout_s` bounds each request (pool wait included).
    """

    def __init__(
        self, base_url: str, *, max_connections: int = 32, timeout_s: float = 30.0
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname or parts.path.strip("/"):
            raise ValueError(f"a gateway's base URL is http://host:port, not {base_url!r}")
        if not 0 < timeout_s <= 600:
            raise ValueError("timeout_s must be within (0, 600]")
        self.base_url = f"http://{parts.netloc}"
        self.timeout_s = timeout_s
        self._host = parts.netloc
        self._pool = Http1Pool(
            parts.hostname,
            parts.port or 80,
            max_connections=max_connections,
            max_response_bytes=MAX_RESPONSE_BYTES,
        )

    async def request(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        headers: dict[str, str] | None = None,
    ) -> HttpResponse:
        """One request to a path of this gateway; raises `TransportError` when no complete
        answer came (connection refused or lost, timeout)."""
        lines = [f"{method} {request_target('', url, None)} HTTP/1.1", f"Host: {self._host}"]
        lines += _header_lines(headers or {})
        body = b""
        if json is not None:
            body = msgspec.json.encode(json)
            lines.append("Content-Type: application/json")
        if json is not None or method not in _BODYLESS:
            lines.append(f"Content-Length: {len(body)}")
        lines.append("\r\n")
        data = "\r\n".join(lines).encode() + body
        status, content = await self._pool.request(data, self.timeout_s)
        return HttpResponse(status, content)

    async def get(self, url: str, *, headers: dict[str, str] | None = None) -> HttpResponse:
        return await self.request("GET", url, headers=headers)

    async def post(
        self, url: str, *, json: Any = None, headers: dict[str, str] | None = None
    ) -> HttpResponse:
        return await self.request("POST", url, json=json, headers=headers)

    async def aclose(self) -> None:
        await self._pool.aclose()


async def call(
    client: GatewayClient,
    method: str,
    url: str,
    player: Player,
    stats: Stats,
    deadline: float,
    json_body: Any = None,
) -> HttpResponse:
    """One public HTTP call, retried on connection failures, 429 and 5xx until `deadline`."""
    delay = 0.1
    last = "no attempt"
    for _ in range(1000):
        if time.monotonic() > deadline:
            break
        try:
            r = await client.request(method, url, json=json_body, headers=player.headers)
        except TransportError as exc:
            last = exc.kind
        else:
            if r.status_code not in _RETRY_STATUSES and r.status_code < 500:
                return r
            last = f"{r.status_code} {r.text[:100]}"
        stats.http_retries += 1
        await asyncio.sleep(delay)
        delay = min(2.0, delay * 1.5)
    raise SimError(f"{method} {url} failed until the deadline: {last}")


# ----------------------------------------------------------------------------------- tables

OVER = ("finished", "void")


# The table frames, as far as the simulated players read them (docs/reference/api.md). msgspec
# decodes only these fields and skips the rest of each view (hands, chain, events' data, ...)
# without building it: decoding every 2-5 KB frame into dicts, then freeing them, would be the
# largest share of the load generator's own Python time. Frozen, and out of the collector's reach (no cycles).


class Legal(msgspec.Struct, frozen=True, gc=False):
    type: str
    tile: Any = None
    end: Any = None


class MatchState(msgspec.Struct, frozen=True, gc=False):
    status: str
    deal_id: Any = None
    result: Any = None  # {winners, settled, ...} once over


class View(msgspec.Struct, frozen=True, gc=False):
    seq: int
    state: MatchState
    legal: list[Legal] = []


class Event(msgspec.Struct, frozen=True, gc=False):
    kind: Any = None


class Update(msgspec.Struct, frozen=True, gc=False):
    view: View | None = None
    events: list[Event] = []


class Frame(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """A server frame: `type` says which of the fields it carries."""

    type: str = ""
    ref: Any = ""
    seq: Any = None
    error: Any = None
    detail: Any = None
    view: View | None = None
    update: Update | None = None


_decode_frame = msgspec.json.Decoder(Frame).decode


def _encode_frame(frame: dict[str, Any]) -> bytes:
    return msgspec.json.encode(frame)  # UTF-8, sent as a text frame as is


def _frame_text(frame: Frame) -> str:
    return msgspec.json.encode(frame).decode()


def _action_kind(action: dict[str, Any], ack: Frame) -> str:
    """The action's type, marked when it ended a hand or the match (the engine signs and logs
    the deal's result before it answers)."""
    kinds = {e.kind for e in ack.update.events} if ack.update is not None else set()
    ending = "match_ended" if "match_ended" in kinds else "hand_ended"
    suffix = f"+{ending}" if ending in kinds else ""
    return f"{action.get('type', '')}{suffix}"


class Changed:
    """A flag the seats raise when a view or the connection changed, and its one waiter.

    `asyncio.wait_for(event.wait(), t)` creates a Task per call in Python 3.11; this waits on
    one future with one `call_later` timer for the bound: the same semantics for a fraction of
    the event loop's work, once or twice per action per table.
    """

    __slots__ = ("flag", "_waiter")

    def __init__(self) -> None:
        self.flag = False
        self._waiter: asyncio.Future[None] | None = None

    def set(self) -> None:
        self.flag = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def clear(self) -> None:
        self.flag = False

    async def wait(self, loop: asyncio.AbstractEventLoop, timeout_s: float) -> bool:
        """Wait until set or `timeout_s` passed; returns whether it is set."""
        if self.flag:
            return True
        if self._waiter is not None:
            raise SimError("one waiter at a time on a table's change flag")
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiter = waiter
        try:
            await _bounded(loop, waiter, timeout_s, None)
        finally:
            self._waiter = None
        return self.flag


def _expire(fut: asyncio.Future[Any], value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


async def _bounded(
    loop: asyncio.AbstractEventLoop, fut: asyncio.Future[T], timeout_s: float, expired: T
) -> T:
    """`fut`'s result, or `expired` once `timeout_s` has passed: one `call_later` timer on a
    known loop, no Task (as `asyncio.wait_for` makes in 3.11) and no running-loop lookup (a
    getpid syscall in 3.11, as `asyncio.sleep` makes), once or twice per action per table."""
    timer = loop.call_later(timeout_s, _expire, fut, expired)
    try:
        return await fut
    finally:
        timer.cancel()


async def _sleep(loop: asyncio.AbstractEventLoop, delay_s: float) -> None:
    await _bounded(loop, loop.create_future(), delay_s, None)


# Replies made here (frozen).
_TIMED_OUT = Frame(type="error", error="timeout")
_DISCONNECTED = Frame(type="error", error="disconnected")
_SNAPSHOT_FRAME = b'{"type":"snapshot"}'


class Seat:
    """One player's socket at the table and the latest snapshot of their seat.

    The socket is the `websockets` library's asyncio client; one reader task per socket hands
    each frame to `_on_message` as it arrives, and the socket's end to `_on_closed`.
    """

    def __init__(self, driver: TableDriver, player: Player) -> None:
        self.driver = driver
        self.player = player
        self.ws: ClientConnection | None = None
        self.reader: asyncio.Task[None] | None = None
        self.view: View | None = None
        self.seq = -1
        self.pending: dict[str, asyncio.Future[Frame]] = {}
        self.seeds: dict[str, str] = {}
        self.connected = False
        # Action references: unique per seat, which is all an ack's `ref` is matched against.
        self.refs = itertools.count()

    async def connect(self, match_id: str, deadline: float) -> None:
        delay = 0.2
        for attempt in range(500):
            if time.monotonic() > deadline:
                raise SimError(f"{self.player.name}: could not connect before the deadline")
            url = self.driver.ws_url(match_id, attempt)
            if self.seq >= 0:
                url += f"?after={self.seq}"
            try:
                ws = await ws_connect(
                    url,
                    additional_headers=self.player.headers,
                    max_size=WS_MAX_SIZE_BYTES,
                    open_timeout=WS_OPEN_TIMEOUT_S,
                    close_timeout=WS_CLOSE_TIMEOUT_S,
                    # Loopback only, so no proxy from the environment; no compression and no
                    # keepalive pings (the server pings, the library answers): CPU the load
                    # generator would take from the platform it measures.
                    proxy=None,
                    compression=None,
                    ping_interval=None,
                    user_agent_header=None,
                )
            except (OSError, WebSocketException, TimeoutError):
                self.driver.stats.reconnects += 1
                await asyncio.sleep(delay)
                delay = min(2.0, delay * 1.5)
                continue
            self.ws = ws
            self.connected = True
            # A socket the server closed right after its handshake ends its reader at once,
            # which marks the seat disconnected: the loop reconnects.
            self.reader = asyncio.get_running_loop().create_task(self._read(ws))
            return
        raise SimError(f"{self.player.name}: no connection after many attempts")

    async def _read(self, ws: ClientConnection) -> None:
        """Every frame of `ws` to `_on_message` (as bytes: msgspec decodes UTF-8 itself), until
        it closes (bounded: MAX_FRAMES_PER_SOCKET)."""
        try:
            for _ in range(MAX_FRAMES_PER_SOCKET):
                self._on_message(await ws.recv(decode=False))
        except ConnectionClosed:
            pass
        except (msgspec.DecodeError, SimError) as exc:
            self.driver.stats.error("ws_frame", str(exc))
        finally:
            if self.ws is ws:
                self._on_closed()
            if ws.state is not State.CLOSED:
                # Not by the server: a frame it could not read, or the bound reached.
                await ws.close()

    def _on_message(self, raw: bytes) -> None:
        self.driver.stats.frames += 1
        msg = _decode_frame(raw)
        kind = msg.type
        if kind == "ack":
            self._resolve(msg)
            if msg.update is None:
                return
            # The acting socket's update rides on its ack (docs/reference/api.md).
            view = msg.update.view
        elif kind == "snapshot" or kind == "update":
            view = msg.view
        elif kind == "events":
            self.driver.changed.set()
            return
        elif kind == "error":
            self._resolve(msg)
            return
        else:
            return
        if view is None:
            raise SimError(f"a {kind} frame without a view")
        if view.seq >= self.seq:
            self.view = view
            self.seq = view.seq
        self.driver.changed.set()

    def _on_closed(self) -> None:
        # Called by the current socket's reader only (an earlier socket's reader may end later).
        self.connected = False
        for fut in self.pending.values():
            if not fut.done():
                fut.set_result(_DISCONNECTED)
        self.pending.clear()
        self.driver.changed.set()

    def _resolve(self, msg: Frame) -> None:
        """An `ack` or `error` answers the action with its `ref`."""
        fut = self.pending.pop(str(msg.ref), None)
        if fut is not None and not fut.done():
            fut.set_result(msg)
        elif msg.type == "error":
            self.driver.stats.error("ws_" + str(msg.error), _frame_text(msg))

    async def close(self) -> None:
        ws, reader = self.ws, self.reader
        self.connected = False
        if ws is not None:
            with contextlib.suppress(Exception):
                await ws.close()  # bounded by its close_timeout
        if reader is not None:
            # A closed socket ends its reader; `close` bounded the wait for that.
            if not reader.done():
                reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)

    def next_action(self) -> dict[str, Any] | None:
        view = self.view
        if view is None or view.state.status in OVER or not view.legal:
            return None
        legal = view.legal
        first = next((a for a in legal if a.type == "play"), legal[0])
        deal = str(view.state.deal_id)
        kind = first.type
        if kind == "seed_commit":
            # One seed per deal, also when the commit is sent again (a lost ack after a crash
            # may hide that the first one was recorded): the reveal must match what was logged.
            seed = self.seeds.get(deal)
            if seed is None:
                seed = self.seeds[deal] = f"{self.player.name}-{secrets.token_hex(8)}"
            return {"type": "seed_commit", "commitment": hashlib.sha256(seed.encode()).hexdigest()}
        if kind == "seed_reveal":
            return {"type": "seed_reveal", "seed": self.seeds.get(deal, "")}
        if kind == "play":
            if first.tile is None:
                raise SimError(f"a legal play without a tile: {first}")
            return {"type": "play", "tile": first.tile, "end": first.end}
        if kind == "choose":
            return {"type": "choose", "salgo": True}
        return None

    async def act(self, action: dict[str, Any], timeout_s: float) -> Frame:
        ws = self.ws
        if ws is None or not self.connected:
            return _DISCONNECTED
        ref = str(next(self.refs))
        loop = self.driver.loop
        if loop is None:
            raise SimError("a seat acts only inside its table's play()")
        fut: asyncio.Future[Frame] = loop.create_future()
        frame = {"type": "action", "ref": ref, "seq": self.seq, "action": action}
        # Registered first: the socket's end while sending answers it `disconnected`.
        self.pending[ref] = fut
        try:
            await ws.send(_encode_frame(frame), text=True)
        except ConnectionClosed:
            self.pending.pop(ref, None)
            return _DISCONNECTED
        reply = await _bounded(loop, fut, timeout_s, _TIMED_OUT)
        if reply is _TIMED_OUT:
            self.pending.pop(ref, None)
        return reply

    async def ask_snapshot(self) -> None:
        if self.ws is not None and self.connected:
            with contextlib.suppress(ConnectionClosed):
                await self.ws.send(_SNAPSHOT_FRAME, text=True)


@dataclass
class Schedule:
    """When tables stop starting new matches (`stop_at`) and give up (`deadline`); mutable."""

    stop_at: float
    deadline: float


def seat_count(kind: str) -> int:
    """How many players sit at a table of `kind` (the matchmaking catalogue's)."""
    found = CATALOGUE.get(kind)
    if found is None:
        raise SimError(f"unknown table kind {kind!r}")
    return found.seat_count


class TableDriver:
    """Players in every seat of private paid tables of one kind (two at an apuesta 1v1 table,
    four at an apuesta parejas table), one match after another until told to stop."""

    def __init__(
        self,
        index: int,
        players: tuple[Player, ...],
        clients: list[GatewayClient],
        stats: Stats,
        interval_s: float,
        records: dict[str, MatchRecord],
        kind: str = KIND,
    ) -> None:
        seats = seat_count(kind)
        if len(players) != seats:
            raise SimError(f"a {kind} table seats {seats} players, not {len(players)}")
        self.index = index
        self.players = players
        self.kind = kind
        self.clients = clients
        self.stats = stats
        self.interval_s = interval_s
        self.records = records
        self.changed = Changed()
        # The running loop, known once a match is played: the hot path never looks it up.
        self.loop: asyncio.AbstractEventLoop | None = None
        self.seats: list[Seat] = []
        self.matches = 0

    def client(self, attempt: int = 0) -> GatewayClient:
        return self.clients[(self.index + attempt) % len(self.clients)]

    def ws_url(self, match_id: str, attempt: int) -> str:
        base = self.client(attempt).base_url
        return base.replace("http://", "ws://", 1) + f"/api/matches/{match_id}/ws"

    async def start_match(self, deadline: float) -> MatchRecord:
        """The first player opens a private table, the others sit by its invite code."""
        host, *guests = self.players
        n = self.matches
        client = self.client()
        key = f"load-{host.name}-{n}-{secrets.token_hex(4)}"
        r = await call(
            client, "POST", "/api/lobby/private", host, self.stats, deadline,
            {"kind": self.kind, "tier": TIER, "idempotency_key": key + "-c"},
        )  # fmt: skip
        if r.status_code != 200:
            raise SimError(f"private table: {r.status_code} {r.text[:200]}")
        table = r.json()
        match_id = None
        for i, guest in enumerate(guests):
            r = await call(
                client, "POST", "/api/lobby/join-code", guest, self.stats, deadline,
                {"invite_code": table["invite_code"], "idempotency_key": f"{key}-j{i}"},
            )  # fmt: skip
            if r.status_code != 200:
                raise SimError(f"join by code: {r.status_code} {r.text[:200]}")
            match_id = r.json().get("match_id")
        # No event tells an HTTP client that the table started: poll its status, bounded;
        # backing off, as every poll costs the gateway a signed-in request.
        delay_s = POLL_MIN_S
        for _ in range(600):
            if match_id or time.monotonic() > deadline:
                break
            await asyncio.sleep(delay_s)
            delay_s = min(POLL_MAX_S, delay_s * 2)
            self.stats.lobby_polls += 1
            r = await call(
                client, "GET", f"/api/lobby/tables/{table['table_id']}", host, self.stats, deadline
            )
            if r.status_code == 200:
                match_id = r.json().get("match_id")
        if not match_id:
            raise SimError(f"table {table['table_id']} did not start")
        self.matches += 1
        self.stats.matches_started += 1
        record = MatchRecord(match_id, table["table_id"], [p.name for p in self.players])
        self.records[match_id] = record
        return record

    async def play(self, record: MatchRecord, schedule: Schedule) -> None:
        """Play `record` to its end (or the deadline); after `stop_at`, at the drain pace."""
        self.loop = asyncio.get_running_loop()
        self.seats = [Seat(self, p) for p in self.players]
        self.stats.live_tables += 1
        try:
            await self._play(record, schedule)
        finally:
            self.stats.live_tables -= 1
            for seat in self.seats:
                await seat.close()

    async def _play(self, record: MatchRecord, schedule: Schedule) -> None:
        loop = self.loop
        if loop is None:
            raise SimError("_play runs inside play(), which knows the loop")
        next_at = time.monotonic()
        turn = 0
        for _ in range(100_000):
            now = time.monotonic()
            deadline = schedule.deadline
            if now > deadline:
                return
            for seat in self.seats:
                if not seat.connected:
                    if seat.ws is not None:
                        self.stats.reconnects += 1
                    await seat.connect(record.match_id, deadline)
            over = next(
                (s.view for s in self.seats if s.view and s.view.state.status in OVER), None
            )
            if over is not None:
                self._finish(record, over.state)
                return
            first = turn % len(self.seats)
            order = self.seats[first:] + self.seats[:first]
            choice = next(((s, a) for s in order if (a := s.next_action()) is not None), None)
            if choice is None:
                self.changed.clear()
                if not await self.changed.wait(loop, 5.0):
                    for seat in self.seats:
                        await seat.ask_snapshot()
                continue
            turn += 1
            interval = self.interval_s if now < schedule.stop_at else min(self.interval_s, 0.2)
            if next_at > now:
                await _sleep(loop, next_at - now)
            next_at = max(next_at + interval, time.monotonic() - interval)
            seat, action = choice
            sent = time.monotonic()
            t0 = time.perf_counter()
            reply = await seat.act(action, 10.0)
            latency_ms = (time.perf_counter() - t0) * 1000
            if reply.type == "ack":
                self.stats.acted(sent, latency_ms, _action_kind(action, reply))
                target = int(reply.seq)
                # Wait (event-driven, bounded) for the snapshots the ack implies.
                for _ in range(50):
                    if all(s.seq >= target or not s.connected for s in self.seats):
                        break
                    self.changed.clear()
                    if not await self.changed.wait(loop, 5.0):
                        break
                continue
            code = str(reply.error)
            if code == "stale_seq":
                self.stats.stale += 1
            elif code in ("disconnected", "timeout"):
                self.stats.error(code, record.match_id)
                await seat.close()
                continue
            elif code in ("not_your_turn", "wrong_phase", "match_over"):
                # The engine moved on (a timer, a deal) since this seat's snapshot.
                self.stats.stale += 1
            else:
                self.stats.error(code, _frame_text(reply)[:200])
            seat.view = None
            await seat.ask_snapshot()

    def _finish(self, record: MatchRecord, state: MatchState) -> None:
        result = state.result or {}
        record.status = state.status
        record.winners = list(result.get("winners") or [])
        record.settled = bool(result.get("settled"))
        self.stats.matches_over += 1

    async def run(self, schedule: Schedule, one_match: bool = False) -> None:
        """Matches one after another while before `stop_at`; the last is played to its end."""
        for _ in range(10_000):
            if time.monotonic() >= schedule.stop_at:
                return
            try:
                record = await self.start_match(schedule.deadline)
                await self.play(record, schedule)
            except SimError as exc:
                self.stats.error("table", str(exc))
                await asyncio.sleep(1.0)
            if one_match:
                return


# ------------------------------------------------------------------------------- invariants


async def refresh_results(
    records: dict[str, MatchRecord],
    players: dict[str, Player],
    client: GatewayClient,
    stats: Stats,
    deadline: float,
) -> None:
    """Re-read each match's result from a seated player's view (the public API)."""
    sem = asyncio.Semaphore(16)

    async def one(record: MatchRecord) -> None:
        async with sem:
            try:
                r = await call(
                    client, "GET", f"/api/matches/{record.match_id}",
                    players[record.players[0]], stats, deadline,
                )  # fmt: skip
            except SimError:
                return
            if r.status_code != 200:
                return
            state = r.json()["state"]
            result = state.get("result") or {}
            record.status = state["status"] if state["status"] in OVER else "live"
            record.winners = list(result.get("winners") or [])
            record.settled = bool(result.get("settled"))

    await asyncio.gather(*(one(r) for r in records.values()))


async def wait_settled(
    records: dict[str, MatchRecord],
    players: dict[str, Player],
    client: GatewayClient,
    stats: Stats,
    timeout_s: float,
) -> float:
    """Poll (bounded) until every match is over and settled; returns the seconds waited."""
    start = time.monotonic()
    deadline = start + timeout_s
    for _ in range(10_000):
        await refresh_results(records, players, client, stats, deadline)
        if all(r.status in OVER and r.settled for r in records.values()):
            break
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(1.0)
    return time.monotonic() - start


_ORPHANS_SQL = """
SELECT c.deal_id, c.idx, count(r.idx) AS closing
FROM fairness.leaves c
LEFT JOIN fairness.leaves r ON r.deal_id = c.deal_id
  AND r.type IN ('result', 'void') AND r.idx > c.idx
WHERE c.type = 'commitment'
GROUP BY c.deal_id, c.idx HAVING count(r.idx) <> 1 ORDER BY c.idx
"""


async def check_invariants(
    database_url: str,
    records: dict[str, MatchRecord],
    deposits: dict[str, int],
    rate_bp: int = 1000,
) -> dict[str, Any]:
    """The end-of-run checks; `violations` is empty when everything holds."""
    from ledger import reports
    from ledger.money import split_pot

    violations: list[str] = []
    conn = await asyncpg.connect(database_url)
    try:
        tb = await reports.trial_balance(conn)
        if not tb["balanced"]:
            violations.append(f"trial balance not zero: {tb['totals']}")
        try:
            rec = await reports.reconcile(conn)
        except asyncpg.PostgresError as exc:
            # The ledger's own report could not run (e.g. a newer report than this schema):
            # the checks below cover the money on their own.
            rec = {"ok": None, "error": f"{type(exc).__name__}: {exc}", "discrepancies": []}
        if rec["ok"] is False:
            violations.extend(f"reconcile: {d}" for d in rec["discrepancies"][:20])
        pots = await conn.fetch(
            "SELECT p.match_id, p.status, p.stake_total, a.balance FROM ledger.pots p "
            "JOIN ledger.accounts a ON a.id = p.account_id"
        )
        stakes = await conn.fetch("SELECT match_id, seat, player, amount FROM ledger.stakes")
        doubled = await conn.fetch(
            "SELECT match_id, count(*) AS n FROM ledger.entries WHERE kind IN ('settle', 'void') "
            "AND match_id IS NOT NULL GROUP BY match_id HAVING count(*) > 1"
        )
        holds = await conn.fetch(
            "SELECT code, balance FROM ledger.accounts WHERE kind = 'hold' AND balance <> 0"
        )
        wallets = {
            r["player"]: int(r["balance"])
            for r in await conn.fetch(
                "SELECT player, balance FROM ledger.accounts WHERE kind = 'wallet'"
            )
        }
        unclosed = await conn.fetch(
            "SELECT m.match_id FROM engine.matches m LEFT JOIN engine.match_closed c "
            "USING (match_id) WHERE c.match_id IS NULL"
        )
        orphans = await conn.fetch(_ORPHANS_SQL)
    finally:
        await conn.close()

    by_match: dict[str, list[Any]] = {}
    for s in stakes:
        by_match.setdefault(s["match_id"], []).append(s)
    open_pots = [p["match_id"] for p in pots if p["status"] == "open"]
    if open_pots:
        violations.append(f"{len(open_pots)} pots still open: {open_pots[:5]}")
    nonzero = [p["match_id"] for p in pots if int(p["balance"]) != 0]
    if nonzero:
        violations.append(f"{len(nonzero)} pots not zero: {nonzero[:5]}")
    if doubled:
        violations.append(f"settled or voided twice: {[r['match_id'] for r in doubled][:5]}")
    if holds:
        violations.append(f"{len(holds)} holds not released: {[h['code'] for h in holds][:5]}")
    if unclosed:
        violations.append(
            f"{len(unclosed)} engine matches not closed: {[r['match_id'] for r in unclosed][:5]}"
        )
    if orphans:
        violations.append(f"{len(orphans)} commitments without one result or void")
    expected = dict(deposits)
    for p in pots:
        match_id = p["match_id"]
        record = records.get(match_id)
        seats = by_match.get(match_id, [])
        for s in seats:
            expected[s["player"]] = expected.get(s["player"], 0) - int(s["amount"])
        if record is None:
            violations.append(f"pot {match_id} of a match no client knows")
            continue
        if record.status == "finished":
            if p["status"] != "settled":
                violations.append(f"{match_id} finished but its pot is {p['status']}")
            if not record.settled:
                violations.append(f"{match_id} finished but the engine says not settled")
            winners = [s for s in sorted(seats, key=lambda s: s["seat"]) if s["player"] in
                       record.winners]  # fmt: skip
            if not winners:
                violations.append(f"{match_id} finished without winners")
                continue
            split = split_pot(int(p["stake_total"]), rate_bp, [1] * len(winners))
            for s, payout in zip(winners, split.payouts, strict=True):
                expected[s["player"]] = expected.get(s["player"], 0) + payout
        elif record.status == "void":
            if p["status"] != "voided":
                violations.append(f"{match_id} void but its pot is {p['status']}")
            for s in seats:
                expected[s["player"]] = expected.get(s["player"], 0) + int(s["amount"])
        else:
            violations.append(f"{match_id} is still {record.status}")
    for record in records.values():
        if record.match_id not in {p["match_id"] for p in pots}:
            violations.append(f"{record.match_id}: a paid match without a pot")
    wrong = {
        name: (wallets.get(name), want)
        for name, want in expected.items()
        if wallets.get(name, 0) != want
    }
    if wrong:
        sample = dict(list(wrong.items())[:5])
        violations.append(f"{len(wrong)} wallets differ from the results: {sample}")
    statuses = Counter(r.status for r in records.values())
    return {
        "ok": not violations,
        "violations": violations,
        "trial_balance_zero": bool(tb["balanced"]),
        "reconcile_ok": rec["ok"],
        "reconcile_error": rec.get("error"),
        "pots": len(pots),
        "pots_open": len(open_pots),
        "pots_nonzero": len(nonzero),
        "double_settlements": len(doubled),
        "holds_outstanding": len(holds),
        "engine_unclosed": len(unclosed),
        "orphan_commitments": len(orphans),
        "wallets_checked": len(expected),
        "wallets_wrong": len(wrong),
        "matches": dict(statuses),
    }
