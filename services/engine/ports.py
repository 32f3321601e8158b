"""What the engine needs from the fairness log and the ledger, with real and in-memory sides."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import asyncpg

from fairness.commitments import DEFAULT_ORIGIN
from fairness.keys import OperatorKey
from fairness.log_store import DuplicateRecord, LogError, LogStore
from fairness.witness_push import WitnessEndpoint, WitnessPusher
from services.common.config import Settings
from services.common.http import InternalClient, RemoteError
from services.common.metrics import CHECKPOINT_AGE_SECONDS, ORPHAN_COMMITMENTS
from services.ledger.contract import SettleMatchRequest, VoidMatchRequest, WinnerShare

CHECKPOINT_INTERVAL_S = 10.0
# A hand still in play has a commitment without a result; only older ones are orphans.
ORPHAN_AGE = timedelta(hours=6)
ORPHAN_SCAN_INTERVAL_S = 60.0
# Appends of every match share one writer: the log serializes appends on its head row, so one
# transaction carrying many records (one head update, one commit) beats many in a queue.
MAX_FAIRNESS_BATCH = 64
MAX_PENDING_FAIRNESS = 10_000


class FairnessLog(Protocol):
    async def append(self, envelope: Mapping[str, Any]) -> None:
        """Append a signed record; a record the log already holds is not an error."""
        ...

    async def checkpoint(self) -> None: ...


class Ledger(Protocol):
    async def settle(self, match_id: str, winners: list[str]) -> None: ...

    async def void(self, match_id: str, reason: str) -> None: ...


_Pending = tuple[Mapping[str, Any], "asyncio.Future[None]"]


class PgFairnessLog:
    def __init__(
        self,
        pool: asyncpg.Pool,
        key: OperatorKey,
        origin: str = DEFAULT_ORIGIN,
        witnesses: Sequence[WitnessEndpoint] = (),
    ) -> None:
        self.store = LogStore(pool, key, origin)
        self.witnesses = WitnessPusher(self.store, witnesses)
        self._orphans_checked_at = float("-inf")
        self._queue: asyncio.Queue[_Pending] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> bool:
        """Publish the key; False when no key_rotation announced it (verifiers refuse it)."""
        return await self.store.register_key()

    async def aclose(self) -> None:
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._writer
        self._writer = None
        await self.store.aclose()

    async def append(self, envelope: Mapping[str, Any]) -> None:
        """Returns once the record is committed to the log (or the log already holds it)."""
        loop = asyncio.get_running_loop()
        queue = self._queue
        if queue is None or self._loop is not loop or self._writer is None or self._writer.done():
            self._loop = loop
            queue = self._queue = asyncio.Queue(maxsize=MAX_PENDING_FAIRNESS)
            self._writer = loop.create_task(self._write_batches(queue))
        fut: asyncio.Future[None] = loop.create_future()
        try:
            queue.put_nowait((envelope, fut))
        except asyncio.QueueFull:
            raise LogError("transparency log writer overloaded") from None
        await fut

    async def _write_batches(self, queue: asyncio.Queue[_Pending]) -> None:
        while True:
            batch = [await queue.get()]
            while len(batch) < MAX_FAIRNESS_BATCH and not queue.empty():
                batch.append(queue.get_nowait())
            live = [(env, fut) for env, fut in batch if not fut.done()]
            try:
                await self.store.append_many([env for env, _ in live])
            except Exception:
                # One record refused (most often one the log already holds, re-sent after a
                # restart) fails the whole transaction: append them one by one instead.
                for env, fut in live:
                    try:
                        await self._append_one(env)
                    except Exception as exc:
                        if not fut.done():
                            fut.set_exception(exc)
                    else:
                        if not fut.done():
                            fut.set_result(None)
                continue
            for _, fut in live:
                if not fut.done():
                    fut.set_result(None)

    async def _append_one(self, envelope: Mapping[str, Any]) -> None:
        try:
            await self.store.append(envelope)
        except DuplicateRecord:
            pass  # the log already holds it (re-sent after a restart): done

    async def checkpoint(self) -> None:
        await self.store.checkpoint_if_due(min_interval_s=CHECKPOINT_INTERVAL_S)
        # also a checkpoint signed on demand (a proof's) since: the latest gets cosigned
        await self.witnesses.push_latest()
        await self._observe()

    async def _observe(self) -> None:
        """Export the log's health: age of the newest checkpoint while the log has grown past
        it, and commitments older than ORPHAN_AGE without their closing record."""
        now = time.monotonic()
        age = await self.store.pool.fetchval(
            "SELECT CASE WHEN h.tree_size > coalesce(max(c.tree_size), 0)"
            " THEN extract(epoch FROM now() - coalesce(max(c.signed_at), now()))"
            " ELSE 0 END"
            " FROM fairness.head h LEFT JOIN fairness.checkpoints c ON true"
            " WHERE h.id = 1 GROUP BY h.tree_size"
        )
        CHECKPOINT_AGE_SECONDS.set(float(age or 0))
        if now - self._orphans_checked_at >= ORPHAN_SCAN_INTERVAL_S:
            self._orphans_checked_at = now
            cutoff = datetime.now(UTC) - ORPHAN_AGE
            ORPHAN_COMMITMENTS.set(len(await self.store.orphans(older_than=cutoff)))


class MemoryFairnessLog:
    """Tests and benchmarks without the fairness schema: keeps the records in a list."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.checkpoints = 0

    async def append(self, envelope: Mapping[str, Any]) -> None:
        self.records.append(dict(envelope))

    async def checkpoint(self) -> None:
        self.checkpoints += 1


class HttpLedger:
    def __init__(self, settings: Settings) -> None:
        self.client = InternalClient.of("ledger", settings, "engine")

    async def settle(self, match_id: str, winners: list[str]) -> None:
        body = SettleMatchRequest(
            idempotency_key=f"engine-settle-{match_id}",
            match_id=match_id,
            winners=[WinnerShare(player=p) for p in winners],
        )
        await self._post("/v1/matches/settle", body, done_code="match_already_settled")

    async def void(self, match_id: str, reason: str) -> None:
        body = VoidMatchRequest(
            idempotency_key=f"engine-void-{match_id}", match_id=match_id, reason=reason[:200]
        )
        await self._post("/v1/matches/void", body, done_code="match_already_voided")

    async def _post(self, path: str, body: Any, done_code: str) -> None:
        """A retry with the same key returns the first result; a pot already closed the
        same way (settled for a settlement, voided for a void) is acknowledged too."""
        try:
            await self.client.post(path, body, dict)
        except RemoteError as exc:
            if exc.code == done_code:
                return
            raise

    async def aclose(self) -> None:
        await self.client.aclose()


class MemoryLedger:
    def __init__(self, fail_times: int = 0) -> None:
        self.settled: dict[str, list[str]] = {}
        self.voided: dict[str, str] = {}
        self.calls = 0
        self._fail = fail_times

    async def settle(self, match_id: str, winners: list[str]) -> None:
        self.calls += 1
        if self._fail > 0:
            self._fail -= 1
            raise ConnectionError("ledger down")
        self.settled[match_id] = list(winners)

    async def void(self, match_id: str, reason: str) -> None:
        self.calls += 1
        if self._fail > 0:
            self._fail -= 1
            raise ConnectionError("ledger down")
        self.voided[match_id] = reason
