"""The engine's PostgreSQL side: match logs (group-committed appends and their NOTIFY), ownership.

Appends from every match are batched by a few writer tasks into one statement per batch (an
INSERT over unnest arrays, its own implicit transaction), so one round trip and one commit
carry many actions. The primary key (match_id, log_no) fences a stale writer: two processes
can never both append the same entry of a match.

Each batch's notifications are sent by its own commit: the INSERT's statement calls
`pg_notify` for every entry appended with `notify` (all but those of an action whose gateway is
the match's only reader: `contract.SubmitAction.gateway`), so an entry is announced exactly when it is durable and
one round trip and one commit carry both: a separate notify-only transaction costs a second
round trip and commit per batch (measured at one-entry batches: PostgreSQL ~355 against ~290 us
of CPU a batch; docs/decisions/0012-engine-notify-in-the-log-insert.md). PostgreSQL
serializes the commits of notifying transactions, from pre-commit until the WAL flush, so
under saturation the writers' fsyncs do not overlap and the batches grow instead. A match's notifications stay in
seq order: its next entry is only appended after the previous one committed. A notification
lost (notifier connection of a gateway down, a restart) is covered by the gateways' safety-net
fetch, and a match restored by an engine announces its current seq through the notifier task,
which sends `pg_notify` for such announcements in one statement.

Ownership: a match is run by the process that holds the session advisory lock of its id on
this process's dedicated lock connection. If the process dies the connection drops, the lock
is released and another replica's scanner takes the match over.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from dataclasses import dataclass
from typing import Any

import asyncpg
import msgspec

from services.common.db import APP_ROLE, asyncpg_dsn, create_pool, keep_session
from services.common.logging import get_logger
from services.common.metrics import LOG_BATCH_ENTRIES, LOG_COMMIT_SECONDS
from services.engine.contract import NOTIFY_CHANNEL

log = get_logger()

MAX_RECORD_BYTES = 65_536
MAX_BATCH = 512
MAX_PENDING_APPENDS = 20_000
MAX_PENDING_NOTIFIES = 20_000  # beyond, notifications are dropped (the safety net covers them)
MAX_NOTIFY_BATCH = 1_000
NOTIFY_RETRY_MS = 200
# Two writers: one runs its INSERT while the other commits. (With the NOTIFY in the commit,
# the commits themselves run one at a time; see the module docstring.) Measured with the NOTIFY
# outside the commit (`bench engine`, memory fairness log, load 0.7-1.2, paced 2,000/s p99,
# saturated actions/s): 1 writer 3.9-4.8 ms (13.0k/s), 2 writers 3.7-4.4 ms (13.9-15.0k/s),
# 4 writers 4.9-5.1 ms (13.6k/s), 8 writers 8.8-11.7 ms. Waiting up to 0.2 ms for more
# entries while another batch is in flight gave 4.0-4.3 ms. A minimum interval between commits
# (3 ms, so that more entries share one) cut the commits by only 10-20% at 300 actions/s of
# the load test and delayed each engine step that follows an action by the interval: left out.
WRITERS = 2
LOCK_HEARTBEAT_MS = 1_000


def lock_key(match_id: str) -> int:
    """The match's advisory lock key: the first 8 bytes of SHA-256 of its id, as a signed
    bigint. 64 bits, so two live matches never share a lock (a 32-bit hash would collide
    within tens of thousands of ids)."""
    return int.from_bytes(hashlib.sha256(match_id.encode()).digest()[:8], "big", signed=True)


def lock_held_sql(lock: str, match_id: str) -> str:
    """SQL: the `pg_locks` row `lock` is the advisory lock of the match whose id is the SQL
    expression `match_id`. PostgreSQL computes `lock_key` itself and compares it in the form
    pg_locks shows a one-key bigint lock: high 32 bits in classid, low 32 in objid,
    objsubid 1."""
    key = (
        f"('x' || left(encode(sha256(convert_to({match_id}, 'UTF8')), 'hex'), 16))::bit(64)::bigint"
    )
    return (
        f"{lock}.locktype = 'advisory' AND {lock}.objsubid = 1"
        f" AND {lock}.classid::bigint = ({key} >> 32) & 4294967295"
        f" AND {lock}.objid::bigint = {key} & 4294967295"
    )


class AppendFailed(Exception):
    """The log refused an entry (another process appended it: ownership lost)."""


_APPEND_SQL = (
    "INSERT INTO engine.match_log (match_id, log_no, seq, record)"
    " SELECT * FROM unnest($1::text[], $2::int[], $3::int[], $4::bytea[])"
)
_APPEND_NOTIFY_SQL = (
    f"WITH ins AS ({_APPEND_SQL}) SELECT count(pg_notify($5, n)) FROM unnest($6::text[]) AS n"  # noqa: S608 (composed from this module's constant SQL)
)


@dataclass
class _Pending:
    match_id: str
    log_no: int
    seq: int
    record: bytes
    future: asyncio.Future[None]
    notify: bool


class Store:
    # The engine's only pool: the match log's writers and reads, plus the fairness log's one
    # writer, its checkpoints and the audit reads.
    def __init__(self, database_url: str, *, pool_size: int = 10) -> None:
        self._dsn = asyncpg_dsn(database_url)
        self._pool_size = pool_size
        self.pool: asyncpg.Pool | None = None
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue(maxsize=MAX_PENDING_APPENDS)
        self._writers: list[asyncio.Task[None]] = []
        # Payloads `match_id:seq`, in the order their entries committed.
        self._notify_queue: asyncio.Queue[str] = asyncio.Queue(maxsize=MAX_PENDING_NOTIFIES)
        self._notifier: asyncio.Task[None] | None = None
        self.notifies_dropped = 0
        self._lock_conn: asyncpg.Connection | None = None
        self._lock_mutex = asyncio.Lock()
        self.lock_lost = asyncio.Event()

    async def _connect(self) -> asyncpg.Connection:
        return await asyncpg.connect(
            self._dsn, server_settings={"role": APP_ROLE, "application_name": "mesa-engine-lock"}
        )

    async def start(self) -> None:
        self.pool = await create_pool(
            self._dsn,
            application_name="mesa-engine",
            max_size=self._pool_size,
            # single statements and short transactions only (the fairness checkpoint's lock is
            # transaction-scoped); the session advisory locks live on the lock connection
            reset=keep_session,
        )
        self._lock_conn = await self._connect()
        self._writers = [asyncio.create_task(self._writer()) for _ in range(WRITERS)]
        self._notifier = asyncio.create_task(self._notify_loop())

    async def stop(self) -> None:
        tasks = [*self._writers, *([self._notifier] if self._notifier is not None else [])]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        if self._lock_conn is not None:
            with contextlib.suppress(Exception):
                await self._lock_conn.close()
        if self.pool is not None:
            await self.pool.close()

    def _pool(self) -> asyncpg.Pool:
        if self.pool is None:
            raise RuntimeError("store not started")
        return self.pool

    @property
    def started_pool(self) -> asyncpg.Pool:
        """The pool, once `start` opened it (the engine's fairness log shares it)."""
        return self._pool()

    # ------------------------------------------------------------------ matches

    async def insert_match(
        self, match_id: str, spec: dict[str, Any], created_ms: int
    ) -> dict[str, Any] | None:
        """Insert the match; return None if new, else the stored document."""
        doc = {"spec": spec, "created_ms": created_ms}
        async with self._pool().acquire() as conn:
            row = await conn.fetchrow(
                "INSERT INTO engine.matches (match_id, spec) VALUES ($1, $2::jsonb)"
                " ON CONFLICT (match_id) DO NOTHING RETURNING match_id",
                match_id,
                msgspec.json.encode(doc).decode(),
            )
            if row is not None:
                return None
            old = await conn.fetchval(
                "SELECT spec FROM engine.matches WHERE match_id = $1", match_id
            )
        return dict(msgspec.json.decode(old))

    async def load(self, match_id: str) -> tuple[dict[str, Any], list[bytes], bool] | None:
        """The match's document, its log records as stored (services.engine.records decodes
        them) in order, and whether it is closed; None for an unknown match."""
        async with self._pool().acquire() as conn:
            doc = await conn.fetchval(
                "SELECT spec FROM engine.matches WHERE match_id = $1", match_id
            )
            if doc is None:
                return None
            rows = await conn.fetch(
                "SELECT log_no, record FROM engine.match_log WHERE match_id = $1 ORDER BY log_no",
                match_id,
            )
            closed = await conn.fetchval(
                "SELECT 1 FROM engine.match_closed WHERE match_id = $1", match_id
            )
        records = [bytes(r["record"]) for r in rows]
        return dict(msgspec.json.decode(doc)), records, closed is not None

    async def exists(self, match_id: str) -> bool:
        async with self._pool().acquire() as conn:
            found = await conn.fetchval(
                "SELECT 1 FROM engine.matches WHERE match_id = $1", match_id
            )
        return found is not None

    async def live_matches(self, limit: int = 10_000, *, unowned: bool = False) -> list[str]:
        """Matches not closed, oldest first. With `unowned`, only those whose advisory lock no
        process holds (from `pg_locks`): a scanner then tries only the matches it could take,
        not one lock round trip per match every other replica runs."""
        owned_filter = (
            " AND NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.granted AND "  # noqa: S608 (fixed SQL fragments of this module; values are bound)
            + lock_held_sql("l", "m.match_id")
            + ")"
        )
        query = (
            "SELECT m.match_id FROM engine.matches m WHERE NOT EXISTS"  # noqa: S608 (fixed SQL fragments of this module; values are bound)
            " (SELECT 1 FROM engine.match_closed c WHERE c.match_id = m.match_id)"
            + (owned_filter if unowned else "")
            + " ORDER BY m.created_at LIMIT $1"
        )
        async with self._pool().acquire() as conn:
            rows = await conn.fetch(query, limit)
        return [r["match_id"] for r in rows]

    async def close_match(self, match_id: str, status: str) -> None:
        async with self._pool().acquire() as conn:
            await conn.execute(
                "INSERT INTO engine.match_closed (match_id, status) VALUES ($1, $2)"
                " ON CONFLICT (match_id) DO NOTHING",
                match_id,
                status,
            )

    # ------------------------------------------------------------------ appends

    async def append(
        self, match_id: str, log_no: int, seq: int, record: bytes, notify: bool = True
    ) -> None:
        """Persist one log entry; returns once committed (its NOTIFY, unless `notify` is
        False, is queued by then)."""
        if len(record) > MAX_RECORD_BYTES:
            raise ValueError("log record too large")
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Pending(match_id, log_no, seq, record, fut, notify))
        await fut

    async def _writer(self) -> None:
        while True:
            first = await self._queue.get()
            batch = [first]
            while len(batch) < MAX_BATCH and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                await self._write(batch)
            except asyncpg.UniqueViolationError:
                for p in batch:  # find the entry that clashed; the others go through
                    try:
                        await self._write([p])
                    except Exception as exc:
                        if not p.future.done():
                            p.future.set_exception(AppendFailed(str(exc)))
                continue
            except Exception as exc:
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(exc)

    async def _write(self, batch: list[_Pending]) -> None:
        """Commit `batch` and resolve its callers' futures."""
        LOG_BATCH_ENTRIES.observe(len(batch))
        started = time.perf_counter()
        # One statement, so one round trip and its own transaction (no BEGIN, no COMMIT), and
        # the entries' notifications in it: sent by the commit, in batch order, and only if
        # the INSERT went through (a data-modifying WITH always runs to completion). A batch
        # with nothing to announce takes no part in PostgreSQL's serialization of notifying
        # commits (module docstring).
        notices = [f"{p.match_id}:{p.seq}" for p in batch if p.notify]
        columns = (
            [p.match_id for p in batch],
            [p.log_no for p in batch],
            [p.seq for p in batch],
            [p.record for p in batch],
        )
        async with self._pool().acquire() as conn:
            if notices:
                await conn.execute(_APPEND_NOTIFY_SQL, *columns, NOTIFY_CHANNEL, notices)
            else:
                await conn.execute(_APPEND_SQL, *columns)
        LOG_COMMIT_SECONDS.observe(time.perf_counter() - started)
        for p in batch:
            if not p.future.done():
                p.future.set_result(None)

    def notify(self, match_id: str, seq: int) -> None:
        """Announce that the match's log reached `seq` (sent soon; dropped if far behind)."""
        try:
            self._notify_queue.put_nowait(f"{match_id}:{seq}")
        except asyncio.QueueFull:
            self.notifies_dropped += 1

    async def _notify_loop(self) -> None:
        while True:
            batch = [await self._notify_queue.get()]
            while len(batch) < MAX_NOTIFY_BATCH and not self._notify_queue.empty():
                batch.append(self._notify_queue.get_nowait())
            try:
                async with self._pool().acquire() as conn:
                    await conn.execute(
                        "SELECT pg_notify($1, x) FROM unnest($2::text[]) AS x",
                        NOTIFY_CHANNEL,
                        batch,
                    )
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
                # Lost: the gateways' safety-net fetch picks these entries up. Pause so a
                # PostgreSQL restart does not turn into a busy loop.
                self.notifies_dropped += len(batch)
                log.warning("engine_notify_failed", dropped=len(batch), error=str(exc)[:200])
                await asyncio.sleep(NOTIFY_RETRY_MS / 1000)

    # ------------------------------------------------------------------ ownership

    async def try_lock(self, match_id: str) -> bool:
        async with self._lock_mutex:
            conn = self._lock_conn
            if conn is None or self.lock_lost.is_set():
                return False
            try:
                got = await conn.fetchval(
                    "SELECT pg_try_advisory_lock($1::bigint)", lock_key(match_id)
                )
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
                # The lock connection died (PostgreSQL restarted): no lock can be taken until
                # the scanner has stopped every match and opened a new lock connection.
                self.lock_lost.set()
                return False
            return bool(got)

    async def reconnect_lock(self) -> bool:
        """After a lost lock connection (every lock gone with it): open a new one."""
        async with self._lock_mutex:
            old, self._lock_conn = self._lock_conn, None
            if old is not None:
                with contextlib.suppress(Exception):
                    old.terminate()
            try:
                self._lock_conn = await asyncio.wait_for(self._connect(), timeout=5)
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError):
                return False
            self.lock_lost.clear()
            return True

    async def unlock(self, match_id: str) -> None:
        async with self._lock_mutex:
            conn = self._lock_conn
            if conn is None:
                return
            with contextlib.suppress(Exception):
                await conn.execute("SELECT pg_advisory_unlock($1::bigint)", lock_key(match_id))

    async def heartbeat(self) -> bool:
        """True while the lock connection (and so every lock) is alive."""
        async with self._lock_mutex:
            conn = self._lock_conn
            if conn is None:
                return False
            if self.lock_lost.is_set():
                return False
            try:
                await asyncio.wait_for(conn.fetchval("SELECT 1"), timeout=LOCK_HEARTBEAT_MS / 1000)
            except Exception:
                self.lock_lost.set()
                return False
            return True
