"""Group commit: concurrent posting operations share one transaction (`ledger.post_batch`).

Why: on a small machine most of a posting's cost is per transaction and per round trip (the
network hop, the snapshot, the commit record, the WAL flush, the driver's work per call), not
the posting itself. While the database is busy with earlier calls, the requests that arrive
wait in a queue; as soon as a call slot frees up, everything waiting (up to `max_batch`) goes
in one call. Under light load a request goes alone, at once, through the plain one-operation
call, so batching never adds latency of its own: nothing waits on a timer.

Each operation stays all or nothing in its own subtransaction (see ledger/sql/post_batch.sql), and its
caller is answered only after the shared commit. An operation refused by a rule (insufficient
funds, a closed pot, ...) gets its refusal; one that hit a transient conflict (a deadlock, a
unique-key race with a concurrent request with the same key) is retried alone through
`Ledger.call_raw`, which has the retry loop; so is every operation of a batch whose call failed
as a whole (a cut connection: the idempotency keys make the retry safe, whatever was
committed).

Deadlocks: every operation locks its accounts in ascending id order. A batch locks the
accounts of all its operations up front, in one ascending-id statement, before any operation
runs (ledger/sql/post_batch.sql), so it keeps the one global order too. What remains is a wait on a
unique key (two batches inserting the same idempotency key or reservation at once, i.e. a
client retrying while its first request is still in flight); PostgreSQL detects such a cycle
and the operation is retried alone, so the caller never sees it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import msgspec

from ledger.errors import LedgerUnavailable
from ledger.ops import _CONNECTION_ERRORS, _OPERATION_CALL, _RETRY_SQLSTATES, Ledger, map_sqlstate

# Must not exceed the limit in ledger/sql/post_batch.sql (the function refuses a longer batch).
MAX_BATCH = 32
# Calls in flight at once, at most; see `_start_calls` for when more than one runs.
MAX_IN_FLIGHT = 4
# Operations waiting for a call slot; beyond this, refuse (503) rather than queue without bound.
MAX_PENDING = 4096

# What `ledger.post_batch` runs: the table's money; cashier work is rare and goes alone.
BATCHED = frozenset({"hold", "release", "start", "settle", "void"})
# One row per operation, in order: its answer, or its refusal (SQLSTATE, code, detail).
_BATCH_SQL = (
    "SELECT answer, refusal_sqlstate, refusal, refusal_detail "
    "FROM ledger.post_batch($1::text[], $2::text[])"
)
_encode = msgspec.json.encode


class _Op:
    __slots__ = ("operation", "args", "future")

    def __init__(self, operation: str, args: tuple[Any, ...], future: asyncio.Future[str]):
        self.operation = operation
        self.args = args
        self.future = future

    def json_args(self) -> str:
        return batch_args(self.args)


def batch_args(args: tuple[Any, ...]) -> str:
    """An operation's arguments as `ledger.post_batch` takes them: a JSON array (hex bytes)."""
    return _encode([a.hex() if isinstance(a, bytes) else a for a in args]).decode()


class GroupCommit:
    """Runs `Ledger` operations, several to a transaction when they arrive together."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        max_batch: int = MAX_BATCH,
        max_in_flight: int = MAX_IN_FLIGHT,
        max_pending: int = MAX_PENDING,
    ) -> None:
        if not 1 <= max_batch <= MAX_BATCH:
            raise ValueError(f"max_batch must be 1..{MAX_BATCH}")
        if max_in_flight < 1 or max_pending < 1:
            raise ValueError("max_in_flight and max_pending must be positive")
        self.ledger = ledger
        self.max_batch = max_batch
        self.max_in_flight = max_in_flight
        self.max_pending = max_pending
        # a further call is worth its own transaction once half a batch waits for it
        self.open_slot_at = max(1, max_batch // 2)
        self._pending: list[_Op] = []
        self._in_flight = 0
        self._tasks: set[asyncio.Task[None]] = set()
        # The event loop of the first call, which every later call must share. Kept because
        # `asyncio.get_running_loop()` makes a getpid() system call on this Python (3.1% of
        # the ledger service's samples, py-spy --native, holds at 32 clients).
        self._loop: asyncio.AbstractEventLoop | None = None
        self.calls = 0  # database calls, a batch or one operation alone
        self.operations = 0
        self.most_in_flight = 0

    async def call(self, operation: str, *args: Any) -> str:
        """The operation's result document (JSON text), as `Ledger.call_raw` returns it."""
        if operation not in BATCHED:
            return await self.ledger.call_raw(operation, *args)
        if len(self._pending) >= self.max_pending:
            raise LedgerUnavailable("too many ledger operations waiting; retry")
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        future: asyncio.Future[str] = loop.create_future()
        self._pending.append(_Op(operation, args, future))
        self._start_calls()
        # A caller that goes away cancels only its own future, never the shared call.
        return await future

    async def close(self) -> None:
        """Wait for the calls in flight (new ones may still start from the queue)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _start_calls(self) -> None:
        loop = self._loop
        if loop is None:
            return  # nothing was ever queued
        # One call at a time while the queue is short: the requests that arrive meanwhile form
        # the next batch, and larger batches cost the database less per operation. A further
        # call slot opens only when half a batch is waiting (the database then has work for
        # more than one backend: one call at a time runs on one core).
        while self._pending and (
            self._in_flight == 0
            or (self._in_flight < self.max_in_flight and len(self._pending) >= self.open_slot_at)
        ):
            ops = self._pending[: self.max_batch]
            del self._pending[: self.max_batch]
            self._in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self._in_flight)
            task = loop.create_task(self._run(ops))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, ops: list[_Op]) -> None:
        slot = _Slot(self)
        try:
            self.calls += 1
            self.operations += len(ops)
            if len(ops) == 1:
                await self._alone(ops[0], slot)
            else:
                await self._together(ops, slot)
        except BaseException:
            # cancelled (shutdown) or a bug: no caller may wait forever on its answer
            for op in ops:
                if not op.future.done():
                    op.future.cancel()
            raise
        finally:
            slot.free()

    def _slot_freed(self) -> None:
        self._in_flight -= 1
        self._start_calls()

    async def _alone(self, op: _Op, slot: _Slot | None = None) -> None:
        outcome: str | Exception
        try:
            outcome = await self.ledger.call_raw(op.operation, *op.args)
        except Exception as exc:  # the caller gets it; a cancellation is `_run`'s
            outcome = exc
        if slot is not None:
            slot.free()  # as in `_together`: the next call goes out first
        _answer(op, outcome)

    async def _together(self, ops: list[_Op], slot: _Slot) -> None:
        token = _OPERATION_CALL.set(True)
        try:
            async with self.ledger.pool.acquire() as conn:
                answers = await conn.fetch(
                    _BATCH_SQL, [op.operation for op in ops], [op.json_args() for op in ops]
                )
        except (asyncpg.PostgresError, *_CONNECTION_ERRORS):
            # Outcome unknown or nothing done: each operation again, alone, by its key.
            answers = []
        finally:
            _OPERATION_CALL.reset(token)
        if len(answers) != len(ops):
            await asyncio.gather(*(self._alone(op) for op in ops))
            return
        outcomes: list[str | Exception | None] = []  # None: retried alone, answered there
        retry: list[_Op] = []
        for op, (answer, state, code, detail) in zip(ops, answers, strict=True):
            if state is None:
                outcomes.append(answer)
                continue
            if state in _RETRY_SQLSTATES:
                retry.append(op)
                outcomes.append(None)
            else:
                outcomes.append(map_sqlstate(state, code, detail or code))
        if retry:
            # rare (a deadlock, a key raced by a concurrent request): alone, within this slot
            await asyncio.gather(*(self._alone(op) for op in retry))
        # The database is done with this call: the next one goes out before the callers are
        # answered (answering them is the event loop's work, and the database would idle).
        slot.free()
        for op, outcome in zip(ops, outcomes, strict=True):
            if outcome is not None:
                _answer(op, outcome)


class _Slot:
    """A call slot, freed once: as soon as the database has answered (so that the next call
    starts before this one's callers are answered), or when the call ends however it ends."""

    __slots__ = ("_group", "_held")

    def __init__(self, group: GroupCommit) -> None:
        self._group = group
        self._held = True

    def free(self) -> None:
        if self._held:
            self._held = False
            self._group._slot_freed()


def _answer(op: _Op, outcome: str | Exception) -> None:
    """Resolve the caller's future (unless it went away) with the result or the refusal."""
    if op.future.done():
        return
    if isinstance(outcome, Exception):
        op.future.set_exception(outcome)
    else:
        op.future.set_result(outcome)
