"""What the engine needs from the fairness log and the ledger, with real and in-memory sides."""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from fairness.keys import OperatorKey
from fairness.log_store import LogError, LogStore
from services.common.config import Settings
from services.common.http import InternalClient, RemoteError
from services.common.metrics import CHECKPOINT_AGE_SECONDS, ORPHAN_COMMITMENTS
from services.ledger.contract import SettleMatchRequest, VoidMatchRequest, WinnerShare

CHECKPOINT_INTERVAL_S = 10.0
# A hand still in play has a commitment without a result; only older ones are orphans.
ORPHAN_AGE = timedelta(hours=6)
ORPHAN_SCAN_INTERVAL_S = 60.0


class FairnessLog(Protocol):
    async def append(self, envelope: Mapping[str, Any]) -> None:
        """Append a signed record; a record the log already holds is not an error."""
        ...

    async def checkpoint(self) -> None: ...


class Ledger(Protocol):
    async def settle(self, match_id: str, winners: list[str]) -> None: ...

    async def void(self, match_id: str, reason: str) -> None: ...


class PgFairnessLog:
    def __init__(self, engine: AsyncEngine, key: OperatorKey) -> None:
        self.store = LogStore(engine, key)
        self._orphans_checked_at = float("-inf")

    async def start(self) -> None:
        await self.store.register_key()

    async def append(self, envelope: Mapping[str, Any]) -> None:
        try:
            await self.store.append(envelope)
        except LogError as exc:
            if "already has" not in str(exc):
                raise

    async def checkpoint(self) -> None:
        await self.store.checkpoint_if_due(min_interval_s=CHECKPOINT_INTERVAL_S)
        await self._observe()

    async def _observe(self) -> None:
        """Export the log's health: age of the newest checkpoint while the log has grown past
        it, and commitments older than ORPHAN_AGE without their closing record."""
        now = time.monotonic()
        async with self.store.engine.connect() as conn:
            age = (
                await conn.execute(
                    text(
                        "SELECT CASE WHEN h.tree_size > coalesce(max(c.tree_size), 0)"
                        " THEN extract(epoch FROM now() - coalesce(max(c.signed_at), now()))"
                        " ELSE 0 END"
                        " FROM fairness.head h LEFT JOIN fairness.checkpoints c ON true"
                        " WHERE h.id = 1 GROUP BY h.tree_size"
                    )
                )
            ).scalar_one_or_none()
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
        self.client = InternalClient(settings.url_of("ledger"), settings, "engine")

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
