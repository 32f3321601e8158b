"""Live matches: one actor task per match (bounded inbox), restore, ownership, settlement.

Every change to a match goes through its actor: validate, append the record to the log
(awaited: persisted before it is acknowledged), apply, publish. Engine steps (bots, timeouts,
new deals) are records too. Reads also pass through the inbox so they see every step due.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import msgspec

from fairness.flow import open_deal
from fairness.keys import OperatorKey
from services.common.errors import ServiceError, conflict, not_found
from services.common.logging import get_logger
from services.common.metrics import ACTIONS, LIVE_MATCHES, SETTLEMENT_FAILURES, SETTLEMENT_RETRIES
from services.engine import records as L
from services.engine.clock import Clock
from services.engine.contract import (
    MAX_EVENTS_PAGE,
    MAX_WAIT_MS,
    ActionApplied,
    CreateMatch,
    EventPage,
    MatchCreated,
    MatchResult,
    PublicMatchState,
    SeatFeed,
    SeatSnapshot,
    SubmitAction,
)
from services.engine.ports import FairnessLog, Ledger
from services.engine.runtime import Match, restore
from services.engine.store import Store

log = get_logger()
T = TypeVar("T")

INBOX_SIZE = 256
MAX_AUTO_STEPS = 500  # engine steps in a row before the actor looks at its inbox again
MAX_LIVE_MATCHES = 20_000
SCAN_INTERVAL_MS = 1_000
# A finished match stays in memory this long for late readers, then only in PostgreSQL.
EVICT_AFTER_MS = 60_000
SETTLE_BACKOFF_MIN_MS = 200
SETTLE_BACKOFF_MAX_MS = 10_000
MAX_GATEWAYS_PER_MATCH = 16  # beyond: every entry of the match is announced
OUTBOX_RETRY_MS = 1_000  # a fairness record the log refused or missed is offered again

_PURPOSE_CODES = {"deal": "d", "cuban_draw": "draw", "pares_o_nones": "pares"}


def _time(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


class MatchActor:
    def __init__(self, engine: Engine, match: Match, *, created_here: bool = False) -> None:
        self.engine = engine
        self.match = match
        # The gateway processes that have read this match's feeds through this process
        # (`FeedReads.gateway`, `SubmitAction.gateway`), known only for a match created here:
        # after a takeover or a restart a gateway's sockets may listen without having read
        # here, so every entry is announced (None). Too many gateways: None as well.
        self.gateways: set[str] | None = set() if created_here else None
        # While an action's turn runs: its entries go unannounced (`SubmitAction.gateway`).
        self.unannounced = False
        self.inbox: asyncio.Queue[tuple[Callable[[], Awaitable[Any]], asyncio.Future[Any]]] = (
            asyncio.Queue(maxsize=INBOX_SIZE)
        )
        self.wake = asyncio.Event()
        self.changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.settle_task: asyncio.Task[None] | None = None
        self.closed = False
        self.closed_at_ms: int | None = None
        self.failed = False

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"match-{self.match.spec.match_id}")

    async def stop(self) -> None:
        for t in (self.task, self.settle_task):
            if t is not None:
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t

    async def call(self, fn: Callable[[], Awaitable[T]]) -> T:
        if self.failed:
            raise ServiceError(503, "not_owner", "the match is being recovered")
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        try:
            self.inbox.put_nowait((fn, fut))
        except asyncio.QueueFull:
            raise ServiceError(503, "busy", "too many requests for this match") from None
        self.wake.set()
        return await fut

    async def _run(self) -> None:
        clock = self.engine.clock
        try:
            while True:
                self.wake.clear()
                await self._steps()
                while not self.inbox.empty():
                    fn, fut = self.inbox.get_nowait()
                    if fut.done():
                        continue
                    try:
                        fut.set_result(await fn())
                    except ServiceError as exc:
                        fut.set_exception(exc)
                    except Exception as exc:
                        fut.set_exception(ServiceError(503, "not_owner", "match recovering"))
                        raise exc
                    await self._steps()
                if self.inbox.empty():
                    await clock.wait(self.wake, self._wake_at())
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("match_actor_failed", match_id=self.match.spec.match_id)
            self.failed = True
            while not self.inbox.empty():
                _, fut = self.inbox.get_nowait()
                if not fut.done():
                    fut.set_exception(ServiceError(503, "not_owner", "match recovering"))
            asyncio.get_running_loop().call_soon(
                self.engine.recover_later, self.match.spec.match_id
            )

    def _wake_at(self) -> int | None:
        """The match's next engine step, or sooner the next try of fairness records the
        transparency log has not taken yet (nothing else may wake an abandoned match)."""
        at = self.match.next_timer_ms()
        if self.match.outbox:
            retry = self.engine.clock.now_ms() + OUTBOX_RETRY_MS
            at = retry if at is None else min(at, retry)
        return at

    # ------------------------------------------------------------------ writing

    async def persist(self, rec: L.Record) -> None:
        m = self.match
        data = L.encode(rec)
        await self.engine.store.append(
            m.spec.match_id, m.log_no, m.seq + 1, data, notify=not self.unannounced
        )
        m.apply(rec)
        await self._flush_outbox()
        self.changed.set()
        self.changed = asyncio.Event()

    def reader(self, gateway: str | None) -> None:
        """Note a reader of this match's feeds: a gateway process by its name, or None for a
        reader that does not name one (an older gateway, a tool), which may rely on NOTIFY
        as well: from then on every entry of the match is announced."""
        if self.gateways is None or gateway in self.gateways:
            return
        if gateway is None or len(self.gateways) >= MAX_GATEWAYS_PER_MATCH:
            self.gateways = None
        else:
            self.gateways.add(gateway)

    def sole_reader(self, gateway: str | None) -> bool:
        """True when `gateway` is known to be the only gateway process reading this match."""
        return gateway is not None and self.gateways is not None and self.gateways <= {gateway}

    async def _flush_outbox(self) -> None:
        m = self.match
        while m.outbox:
            env = m.outbox[0]
            try:
                await self.engine.fairness.append(env)
            except Exception:
                log.exception("fairness_append_failed", match_id=m.spec.match_id)
                return  # retried after the next record
            m.outbox.pop(0)

    async def _steps(self) -> None:
        m = self.match
        if m.outbox:
            await self._flush_outbox()
            if m.outbox:
                return  # no deadline runs past a commitment that is not yet logged
        for _ in range(MAX_AUTO_STEPS):
            now = self.engine.clock.now_ms()
            rec = m.due_step(now)
            if rec is not None:
                await self.persist(rec)
                continue
            purpose = m.needs_deal()
            if purpose is not None:
                await self._open(purpose, now)
                continue
            break
        if m.over and not self.closed:
            if m.outbox:
                return  # settled and closed only once every fairness record is logged
            paid = m.spec.tier != "free"
            if paid and not m.settled:
                if self.settle_task is None:
                    self.settle_task = asyncio.create_task(self._settle())
                return
            await self.engine.store.close_match(m.spec.match_id, m.status)
            self.closed = True
            self.closed_at_ms = self.engine.clock.now_ms()

    async def _open(self, purpose: str, now: int) -> None:
        m = self.match
        deal_id = f"{m.spec.match_id}/{m.deal_count + 1}.{_PURPOSE_CODES[purpose]}"
        deal = purpose == "deal"
        opened = open_deal(
            self.engine.key,
            deal_id=deal_id,
            table_id=m.spec.table_id or m.spec.match_id,
            variant=m.spec.variant,
            options=m.spec.options,
            tile_set=m.rules.max_pip if deal else 9,
            hand_size=m.rules.hand_size if deal else 0,
            seats=[s.player_id for s in m.seats],
            now=_time(now),
            purpose=purpose,
        )
        # The seed is in the match log first; applying the record queues the signed
        # commitment, which `persist` appends to the transparency log before any seat can
        # send a seed (submit and deadlines wait for the outbox). A crash in between
        # re-offers the same commitment at restore, never a different one.
        await self.persist(
            L.Open(
                at_ms=now,
                purpose=purpose,
                deal_id=deal_id,
                server_seed=opened.server_seed.hex(),
                commitment=opened.commitment,
            )
        )

    async def _settle(self) -> None:
        m = self.match
        result = m.result
        delay_ms = SETTLE_BACKOFF_MIN_MS
        while True:
            try:
                if result is None or result.status == "void":
                    await self.engine.ledger.void(m.spec.match_id, result.reason if result else "")
                else:
                    await self.engine.ledger.settle(m.spec.match_id, result.winners)
                break
            except Exception as exc:
                SETTLEMENT_FAILURES.inc()
                SETTLEMENT_RETRIES.inc()
                log.warning("settlement_retry", match_id=m.spec.match_id, error=str(exc)[:200])
                await asyncio.sleep(delay_ms / 1000)
                delay_ms = min(SETTLE_BACKOFF_MAX_MS, delay_ms * 2)

        async def record() -> None:
            if not m.settled:
                await self.persist(L.Settled(at_ms=self.engine.clock.now_ms()))

        await self.call(record)


class Engine:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        key: OperatorKey,
        fairness: FairnessLog,
        ledger: Ledger,
    ) -> None:
        self.store = store
        self.clock = clock
        self.key = key
        self.fairness = fairness
        self.ledger = ledger
        self.actors: dict[str, MatchActor] = {}
        self._loading: dict[str, asyncio.Lock] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._recover: set[str] = set()

    async def start(self, *, scan: bool = True) -> None:
        await self.scan_once()
        if scan:
            self._tasks.append(asyncio.create_task(self._scanner()))
            self._tasks.append(asyncio.create_task(self._checkpointer()))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        for a in list(self.actors.values()):
            await a.stop()
        for mid in list(self.actors):
            await self.store.unlock(mid)
        self.actors.clear()

    # ------------------------------------------------------------------ ownership

    async def _scanner(self) -> None:
        while True:
            await asyncio.sleep(SCAN_INTERVAL_MS / 1000)
            try:
                if not await self.store.heartbeat():
                    # Every advisory lock went with the connection: stop every match, then
                    # take the live ones over again once PostgreSQL answers (it may have been
                    # restarted; another replica may have taken some over meanwhile).
                    if self.actors:
                        log.error("lock_connection_lost: stopping every match")
                    for a in list(self.actors.values()):
                        await a.stop()
                    self.actors.clear()
                    self._loading.clear()
                    LIVE_MATCHES.set(0)
                    if not await self.store.reconnect_lock():
                        continue
                    log.info("lock_connection_restored")
                await self.scan_once()
                await self.evict_finished()
            except Exception:
                log.exception("scan_failed")

    async def evict_finished(self) -> int:
        """Drop finished matches from memory and release their locks (bounded memory)."""
        now = self.clock.now_ms()
        evicted = 0
        for mid, actor in list(self.actors.items()):
            if actor.closed_at_ms is not None and now - actor.closed_at_ms >= EVICT_AFTER_MS:
                await actor.stop()
                self.actors.pop(mid, None)
                self._loading.pop(mid, None)
                await self.store.unlock(mid)
                evicted += 1
        LIVE_MATCHES.set(len(self.actors))
        return evicted

    async def scan_once(self) -> None:
        """Take over every live match no process holds (after a crash or at start)."""
        recovering = list(self._recover)
        for mid in recovering:
            self._recover.discard(mid)
            actor = self.actors.pop(mid, None)
            if actor is not None:
                await actor.stop()
        # A failed actor's match: this process still holds its lock, so it is not "unowned".
        for mid in recovering:
            if mid not in self.actors:
                with contextlib.suppress(ServiceError):
                    await self._acquire(mid)
        for mid in await self.store.live_matches(unowned=True):
            if mid not in self.actors and len(self.actors) < MAX_LIVE_MATCHES:
                with contextlib.suppress(ServiceError):
                    await self._acquire(mid)

    def recover_later(self, match_id: str) -> None:
        self._recover.add(match_id)

    async def _checkpointer(self) -> None:
        while True:
            await asyncio.sleep(5)
            try:
                await self.fairness.checkpoint()
            except Exception:
                log.exception("checkpoint_failed")

    async def _acquire(self, match_id: str) -> MatchActor:
        """The actor of a match, restoring it from its log when this process can own it."""
        actor = self.actors.get(match_id)
        if actor is not None and not actor.failed:
            return actor
        lock = self._loading.setdefault(match_id, asyncio.Lock())
        async with lock:
            actor = self.actors.get(match_id)
            if actor is not None and not actor.failed:
                return actor
            if actor is not None:
                await actor.stop()
                self.actors.pop(match_id, None)
            # The lock before the log: a match another replica runs costs one lock attempt,
            # not a read of its whole log (every replica's scanner tries every live match it
            # does not run, every second).
            if not await self.store.try_lock(match_id):
                if not await self.store.exists(match_id):
                    raise not_found("unknown_match", f"no match {match_id!r}")
                raise ServiceError(503, "not_owner", "another engine process runs this match")
            try:
                loaded = await self.store.load(match_id)
            except BaseException:
                await self.store.unlock(match_id)
                raise
            if loaded is None:
                await self.store.unlock(match_id)
                raise not_found("unknown_match", f"no match {match_id!r}")
            doc, records, closed = loaded
            spec = msgspec.convert(doc["spec"], CreateMatch)
            try:
                # Every fairness record the match's log implies is offered to the log again:
                # the append is idempotent, so a crash between the match log write and the
                # fairness append can never leave a commitment without its result or void.
                decoded = [L.decode(data) for data in records]
                match = restore(spec, self.key, int(doc["created_ms"]), decoded, keep_outbox=True)
            except Exception:
                log.exception("restore_failed", match_id=match_id)
                match = restore(spec, self.key, int(doc["created_ms"]), [])
                for data in records:
                    try:
                        match.apply(L.decode(data))
                    except Exception:
                        break
                match.log_no = len(records) + 1
                match.outbox.clear()
                broken = MatchActor(self, match)
                broken.closed = closed
                self.actors[match_id] = broken
                broken.start()
                if not match.over:
                    await broken.call(
                        lambda: broken.persist(
                            L.Void(at_ms=self.clock.now_ms(), reason="unrecoverable error")
                        )
                    )
                return broken
            actor = MatchActor(self, match)
            actor.closed = closed
            self.actors[match_id] = actor
            LIVE_MATCHES.set(len(self.actors))
            actor.start()
            # A gateway may have missed the last entries' notifications (its listener was
            # reconnecting): sockets catch up now, not at their safety net.
            self.store.notify(match_id, match.seq)
            return actor

    # ------------------------------------------------------------------ API

    async def create(self, spec: CreateMatch) -> MatchCreated:
        from services.engine.runtime import validate_spec

        validate_spec(spec)
        now = self.clock.now_ms()
        spec_doc = msgspec.to_builtins(spec)
        if spec.match_id not in self.actors:
            # The lock comes before the row: another replica's scanner must never see a new
            # match unlocked and take it over while it is being created here.
            if not await self.store.try_lock(spec.match_id):
                raise ServiceError(503, "not_owner", "another engine process runs this match")
        old = await self.store.insert_match(spec.match_id, spec_doc, now)
        if old is not None:
            if spec.match_id not in self.actors:
                await self.store.unlock(spec.match_id)  # _acquire takes it again, once
            if old.get("spec") != spec_doc:
                raise conflict("match_exists", "a different match has this id")
            actor = await self._acquire(spec.match_id)
            return await actor.call(lambda: self._created(actor))
        match = Match.create(spec, self.key, now)
        actor = MatchActor(self, match, created_here=True)
        self.actors[spec.match_id] = actor
        actor.start()
        return await actor.call(lambda: self._created(actor))

    @staticmethod
    async def _created(actor: MatchActor) -> MatchCreated:
        m = actor.match
        return MatchCreated(match_id=m.spec.match_id, seq=m.seq, status=m.status)

    async def submit(self, match_id: str, body: SubmitAction) -> ActionApplied:
        actor = await self._acquire(match_id)
        # Checked before the action runs: a bad read refuses the whole request, unchanged.
        reads = [(r.seat, r.after) for r in body.reads]
        for seat, _ in reads:
            self._check_seat(actor, seat)

        async def run() -> ActionApplied:
            m = actor.match
            if m.outbox:
                await actor._flush_outbox()
                if m.outbox:
                    # A seed must never be taken before the deal's commitment is in the log.
                    raise ServiceError(503, "log_unavailable", "transparency log unavailable")
            now = self.clock.now_ms()
            rec = m.check_submit(body.seat, body.seq, body.action, body.player_id, now)
            if isinstance(rec, L.Claim):
                m.check_claim_time(body.seat, now)
            if body.gateway is not None:
                actor.reader(body.gateway)
            # The action and the steps it causes reach every socket through this answer when
            # the caller is the match's only gateway and reads for all its sockets.
            actor.unannounced = bool(reads) and actor.sole_reader(body.gateway)
            try:
                await actor.persist(rec)
                ACTIONS.inc()
                await actor._steps()
            finally:
                actor.unannounced = False
            feeds = self._read_feeds(actor, reads, MAX_EVENTS_PAGE) if reads else []
            return ActionApplied(match_id=match_id, seq=m.seq, feeds=feeds)

        return await actor.call(run)

    async def public_state(self, match_id: str) -> PublicMatchState:
        actor = await self._acquire(match_id)

        async def run() -> PublicMatchState:
            return actor.match.public_state()

        return await actor.call(run)

    async def snapshot(self, match_id: str, seat: int) -> SeatSnapshot:
        actor = await self._acquire(match_id)
        self._check_seat(actor, seat)

        async def run() -> SeatSnapshot:
            return actor.match.snapshot(seat)

        return await actor.call(run)

    async def result(self, match_id: str) -> MatchResult:
        actor = await self._acquire(match_id)

        async def run() -> MatchResult:
            if actor.match.result is None:
                raise not_found("not_over", "the match is still being played")
            return actor.match.result

        return await actor.call(run)

    @staticmethod
    def _check_seat(actor: MatchActor, seat: int) -> None:
        if not 0 <= seat < len(actor.match.seats):
            raise ServiceError(400, "bad_seat", f"no seat {seat} at this table")

    async def events(
        self, match_id: str, seat: int, after: int, wait_ms: int = 0, limit: int = MAX_EVENTS_PAGE
    ) -> EventPage:
        actor = await self._acquire(match_id)
        self._check_seat(actor, seat)
        wait_ms = max(0, min(wait_ms, MAX_WAIT_MS))
        limit = max(1, min(limit, MAX_EVENTS_PAGE))

        async def barrier() -> asyncio.Event:
            return actor.changed

        changed = await actor.call(barrier)
        m = actor.match
        if m.seq <= after and wait_ms > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), timeout=wait_ms / 1000)
        events, more = m.events_after(seat, after, limit)
        return EventPage(match_id=match_id, seat=seat, seq=m.seq, events=events, more=more)

    async def feed(
        self, match_id: str, seat: int, after: int, limit: int = MAX_EVENTS_PAGE
    ) -> SeatFeed:
        """`events` (no wait) and, on the last page, `snapshot`, read in one actor turn."""
        return (await self.feeds(match_id, [(seat, after)], limit))[0]

    async def feeds(
        self,
        match_id: str,
        reads: list[tuple[int, int]],
        limit: int = MAX_EVENTS_PAGE,
        gateway: str | None = None,
    ) -> list[SeatFeed]:
        """`feed` for several (seat, after) reads in one actor turn: one consistent moment.
        `gateway`: the reading gateway process (announce this match's entries to it)."""
        actor = await self._acquire(match_id)
        for seat, _ in reads:
            self._check_seat(actor, seat)
        limit = max(1, min(limit, MAX_EVENTS_PAGE))

        async def run() -> list[SeatFeed]:
            actor.reader(gateway)
            return self._read_feeds(actor, reads, limit)

        return await actor.call(run)

    @staticmethod
    def _read_feeds(actor: MatchActor, reads: list[tuple[int, int]], limit: int) -> list[SeatFeed]:
        """Each (seat, after) read's events and, on the last page, that seat's own snapshot;
        called inside the actor's turn, so every read sees the same moment."""
        m = actor.match
        match_id = m.spec.match_id
        out = []
        for seat, after in reads:
            events, more = m.events_after(seat, after, limit)
            page = EventPage(match_id=match_id, seat=seat, seq=m.seq, events=events, more=more)
            out.append(SeatFeed(events=page, snapshot=None if more else m.snapshot(seat)))
        return out
