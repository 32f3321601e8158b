"""What the engine needs from the fairness log and the ledger, with real and in-memory sides."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncEngine

from fairness.keys import OperatorKey
from fairness.log_store import LogError, LogStore
from services.common.config import Settings
from services.common.http import InternalClient, RemoteError
from services.ledger.contract import SettleMatchRequest, VoidMatchRequest, WinnerShare

CHECKPOINT_INTERVAL_S = 10.0


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
