"""The table: a seat's view, actions with the seq they were made against, the live feed.

WebSocket `/api/matches/{match_id}/ws[?after=SEQ]` (JSON text frames, at most 4 KiB each,
at most 8 per second on average):

    server -> {"type": "hello", "seat": n, "seq": n}
              {"type": "update", "seq": n, "events": [FeedEvent, ...], "view": SeatSnapshot}
              {"type": "events", "seq": n, "events": [...]}  (a page of a long catch-up only)
              {"type": "snapshot", "seq": n, "view": SeatSnapshot}
              {"type": "chat", "id": n, "seat": n, "kind": "phrase"|"reaction", "code": str}
              {"type": "ack", "ref": str, "seq": n} / {"type": "error", "ref": str, ...}
    client -> {"type": "action", "ref": str, "seq": n, "action": {"type": "play", ...}}
              {"type": "chat", "kind": "phrase"|"reaction", "code": str}
              {"type": "snapshot"}   {"type": "ping"}

On connect the server sends the events after `after` (a reconnect resumes there) with the
seat's view in one `update` (a `snapshot` when nothing was missed); after that every change
comes as an `update`: the new events and the seat's view after them, in one frame. Chat is a
fixed list of quick phrases and reactions: there is no free text anywhere.

An action sent on a socket asks the engine, in the same call, for the feeds of every socket
this gateway serves at the match; they go out right after the ack (`_Table.act`). Otherwise the
feed is event-driven (api/feed.py): a socket subscribes to its match on the gateway's one
LISTEN connection and, when woken by a NOTIFY from the engine of an entry it does not have
(or a chat line from any gateway), fetches its seat's new events and view; the sockets of one
match woken together share one engine call (`FeedBatcher`, `.../feeds`). Without news of its
match it fetches anyway every few seconds, so a lost NOTIFY never stalls a table.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

import msgspec
from litestar import Request, WebSocket, get, post, websocket
from litestar.exceptions import WebSocketDisconnect
from litestar.params import FromPath, JSONBody, Parameter
from litestar.types import Message, ReceiveMessage, WebSocketDisconnectEvent
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from api import accounts
from api.backends import Backends, call, get_backends
from api.feed import CHAT_CHANNEL, MatchFeed, SessionWatch, Subscription
from api.guards import (
    CHECKED_AT_CONNECT,
    PUBLIC,
    CurrentUser,
    GuardedController,
    authorize,
    requires_role,
)
from api.integrity import observe_seat
from api.openapi_errors import READ_ERRORS, WRITE_ERRORS
from services.common.errors import ServiceError
from services.common.json_limits import json_depth_exceeds, too_deep_error
from services.common.logging import get_logger
from services.engine.contract import (
    MAX_FEED_READS,
    Action,
    ActionAccepted,
    ActionApplied,
    EventPage,
    FeedRead,
    FeedReads,
    PublicMatchState,
    SeatFeed,
    SeatFeeds,
    SeatSnapshot,
    SubmitAction,
)

log = get_logger()

MatchId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]
MAX_FRAME_CHARS = 4096
FRAMES_PER_SECOND = 8.0
FRAME_BURST = 16.0
CHAT_INTERVAL_S = 1.5
MAX_SOCKETS_PER_USER = 8
LONG_POLL_MS = 20_000
MAX_PAGES_PER_WAKE = 20  # event pages a socket reads per wake-up before it waits again
MAX_CHAT_PAGES_PER_WAKE = 4
RETRY_S = 1.0
CHAT_CONNECT_GRACE_S = 2.0  # a socket's chat starts this long before its connect
MAX_CHAT_ID = 2**62  # "no line announced yet" in the first chat read
FAR_FUTURE = datetime(9999, 1, 1, tzinfo=UTC)  # "by number only" in `read_chat`
MAX_BEHIND_RETRIES = 3
BEHIND_RETRY_S = 0.05  # after the engine or the database failed, try again this much later
ACTION_WAIT_S = 2.0  # a woken socket waits at most this long for an action's answer
# A socket's session is ended by a notice through the feed (sign-out, lock, self-exclusion);
# should a notice be lost, the socket also checks its session this often.
SESSION_RECHECK_S = 30.0
SESSION_ENDED_CLOSE_CODE = 4001

PHRASES: tuple[str, ...] = (
    "hola",
    "buena",
    "bien_jugado",
    "gracias",
    "suerte",
    "dale",
    "piensa",
    "tranque",
    "capicua",
    "otra",
    "adios",
)
REACTIONS: tuple[str, ...] = ("aplauso", "risa", "sorpresa", "fuego", "pulgar", "triste")


class ChatMessage(msgspec.Struct, frozen=True):
    id: int
    seat: int
    kind: str
    code: str


class ChatRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    kind: Literal["phrase", "reaction"]
    code: Annotated[str, msgspec.Meta(pattern=r"^[a-z_]{1,32}$")]


class ActionRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    seq: Annotated[int, msgspec.Meta(ge=0, le=10_000_000)]
    action: Action


class ChatList(msgspec.Struct, frozen=True):
    phrases: list[str]
    reactions: list[str]


# --- WebSocket client frames -----------------------------------------------------------------


class WsAction(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="action"):
    seq: Annotated[int, msgspec.Meta(ge=0, le=10_000_000)]
    action: Action
    ref: Annotated[str, msgspec.Meta(max_length=32)] = ""


class WsChat(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="chat"):
    kind: Literal["phrase", "reaction"]
    code: Annotated[str, msgspec.Meta(pattern=r"^[a-z_]{1,32}$")]


class WsSnapshot(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="snapshot"):
    pass


class WsPing(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag="ping"):
    pass


ClientFrame = WsAction | WsChat | WsSnapshot | WsPing
_frame_decoder = msgspec.json.Decoder(ClientFrame)


async def seat_of(backends: Backends, match_id: str, player: str) -> tuple[int, PublicMatchState]:
    state = await call(
        "engine", backends.engine.get(f"/internal/matches/{match_id}", PublicMatchState)
    )
    for s in state.seats:
        if s.player_id == player:
            return s.seat, state
    # Not seated: as far as this caller knows, there is no such match.
    raise ServiceError(404, "unknown_match", "no such match at which you are seated")


async def snapshot(backends: Backends, match_id: str, seat: int) -> SeatSnapshot:
    return await call(
        "engine",
        backends.engine.get(f"/internal/matches/{match_id}/seats/{seat}/view", SeatSnapshot),
    )


class FeedBatcher:
    """One engine read per match and wake-up for all the sockets this gateway serves at that
    match: a notification wakes every socket of the match in the same loop turn, each asks for
    its seat's feed, and the reads that arrive before the batch leaves go in one call
    (`POST .../feeds`), one actor turn in the engine. Two seats of a 1v1 on one gateway cost
    the engine one request per action instead of two; four seats of a 2v2, one instead of four.
    """

    def __init__(self, backends: Backends, gateway_id: str) -> None:
        self.backends = backends
        # This process as it names itself to the engine: its reads register it as a reader of
        # the match, and its actions may go unannounced while it is the only one (see
        # `SubmitAction.gateway`).
        self.gateway_id = gateway_id
        self._open: dict[str, list[tuple[int, int, asyncio.Future[SeatFeed]]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # The table sockets this process serves, by match: an action sent through one of them
        # asks the engine for all their feeds in the same call (see `_Table.act`).
        self.tables: dict[str, list[_Table]] = {}
        # Actions in flight per match: a socket woken meanwhile waits for the action's answer,
        # which carries its feed, instead of reading the same entries a second time.
        self._acting: dict[str, asyncio.Event] = {}

    def join(self, table: _Table) -> None:
        self.tables.setdefault(table.match_id, []).append(table)

    def leave(self, table: _Table) -> None:
        tables = self.tables.get(table.match_id)
        if tables is not None and table in tables:
            tables.remove(table)
            if not tables:
                del self.tables[table.match_id]

    @contextlib.contextmanager
    def acting(self, match_id: str) -> Iterator[None]:
        done = self._acting.get(match_id)
        if done is None:
            done = self._acting[match_id] = asyncio.Event()
        try:
            yield
        finally:
            if self._acting.get(match_id) is done:
                del self._acting[match_id]
            done.set()

    async def quiet(self, match_id: str, timeout_s: float) -> None:
        """Wait (bounded) until no action sent through this process is in flight at the match."""
        done = self._acting.get(match_id)
        if done is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await done.wait()

    async def read(self, match_id: str, seat: int, after: int) -> SeatFeed:
        fut: asyncio.Future[SeatFeed] = asyncio.get_running_loop().create_future()
        batch = self._open.get(match_id)
        if batch is None or len(batch) >= MAX_FEED_READS:
            batch = []
            self._open[match_id] = batch
            task = asyncio.create_task(self._send(match_id, batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        batch.append((seat, after, fut))
        return await fut

    async def _send(
        self, match_id: str, batch: list[tuple[int, int, asyncio.Future[SeatFeed]]]
    ) -> None:
        # One loop turn: the other sockets woken by the same notification join this batch.
        await asyncio.sleep(0)
        if self._open.get(match_id) is batch:
            del self._open[match_id]
        live = [item for item in batch if not item[2].done()]
        if not live:
            return
        body = FeedReads(
            reads=[FeedRead(seat=seat, after=after) for seat, after, _ in live],
            gateway=self.gateway_id,
        )
        try:
            result = await call(
                "engine",
                self.backends.engine.post(f"/internal/matches/{match_id}/feeds", body, SeatFeeds),
            )
            if len(result.feeds) != len(live):
                raise ServiceError(
                    502, "bad_gateway", "the engine answered a different number of reads"
                )
        except Exception as exc:
            for _, _, fut in live:
                if not fut.done():
                    fut.set_exception(exc)
            return
        for (_, _, fut), feed in zip(live, result.feeds, strict=True):
            if not fut.done():
                fut.set_result(feed)


async def submit(
    backends: Backends,
    match_id: str,
    seat: int,
    player: str,
    seq: int,
    action: Any,
    reads: list[FeedRead] | None = None,
    gateway: str | None = None,
) -> ActionApplied:
    body = SubmitAction(
        seat=seat, seq=seq, action=action, player_id=player, reads=reads or [], gateway=gateway
    )
    return await call(
        "engine",
        backends.engine.post(f"/internal/matches/{match_id}/actions", body, ActionApplied),
    )


def check_chat(kind: str, code: str) -> None:
    allowed = PHRASES if kind == "phrase" else REACTIONS
    if code not in allowed:
        raise ServiceError(400, "unknown_phrase", "chat is a fixed list of phrases and reactions")


async def post_chat(db: AsyncEngine, match_id: str, seat: int, kind: str, code: str) -> int:
    check_chat(kind, code)
    async with db.begin() as conn:
        row = (
            await conn.execute(
                text(
                    "INSERT INTO gateway.chat (match_id, seat, kind, code) "
                    "VALUES (:m, :s, :k, :c) RETURNING id"
                ),
                {"m": match_id, "s": seat, "k": kind, "c": code},
            )
        ).first()
        chat_id = int(row.id) if row is not None else 0
        # Sockets of this match on every gateway are woken when this commits.
        await conn.execute(
            text("SELECT pg_notify(:ch, :p)"), {"ch": CHAT_CHANNEL, "p": f"{match_id}:{chat_id}"}
        )
    return chat_id


async def read_chat(
    db: AsyncEngine,
    match_id: str,
    after: int,
    limit: int = 50,
    since: datetime = FAR_FUTURE,
) -> list[ChatMessage]:
    """The match's chat lines numbered after `after` or created from `since` on (a socket's
    first read: a line whose transaction began before `since` but was announced after is
    found by its number)."""
    async with db.connect() as conn:
        rows = (
            await conn.execute(
                text(
                    "SELECT id, seat, kind, code FROM gateway.chat WHERE match_id = :m "
                    "AND (id > :a OR created_at >= :t) ORDER BY id LIMIT :l"
                ),
                {"m": match_id, "a": after, "t": since, "l": limit},
            )
        ).all()
    return [ChatMessage(id=r.id, seat=r.seat, kind=r.kind, code=r.code) for r in rows]


PLAYERS = frozenset({"player"})


# --- HTTP routes ----------------------------------------------------------------------------


@get("/api/chat/phrases", tags=["table"], responses=READ_ERRORS, opt=PUBLIC)
async def chat_phrases() -> ChatList:
    """The fixed quick phrases and reactions (the page translates the codes)."""
    return ChatList(phrases=list(PHRASES), reactions=list(REACTIONS))


def _check_match_id(match_id: str) -> None:
    import re

    if re.fullmatch(r"[A-Za-z0-9_.:-]{1,128}", match_id) is None:
        raise ServiceError(400, "invalid_request", "bad match id")


# --- WebSocket --------------------------------------------------------------------------------


class _Bucket:
    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.at = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


def _encode(value: Any) -> str:
    return msgspec.json.encode(value).decode()


class _Table:
    """One connected socket: sends engine events and chat when its match is woken, takes actions."""

    def __init__(
        self, socket: WebSocket[Any, Any, Any], backends: Backends, db: AsyncEngine,
        feed: MatchFeed, sub: Subscription, match_id: str, seat: int, player: str,
        reads: FeedBatcher,
    ) -> None:  # fmt: skip
        self.socket = socket
        self.backends = backends
        self.reads = reads
        self.db = db
        self.feed = feed
        self.sub = sub
        self.match_id = match_id
        self.seat = seat
        self.player = player
        self.send_lock = asyncio.Lock()
        self.bucket = _Bucket(FRAMES_PER_SECOND, FRAME_BURST)
        self.last_chat_at = 0.0

    @property
    def seq(self) -> int:
        """The match seq up to which this socket has been sent every event. Kept on its
        subscription, where a notification of an entry the socket has wakes nothing."""
        return self.sub.seen_seq

    @seq.setter
    def seq(self, value: int) -> None:
        self.sub.seen_seq = value

    async def send(self, value: Any) -> None:
        async with self.send_lock:
            await self.socket.send_text(_encode(value))

    async def send_snapshot(self) -> int:
        view = await snapshot(self.backends, self.match_id, self.seat)
        await self.send({"type": "snapshot", "seq": view.seq, "view": view})
        return view.seq

    async def deliver(self, feed: SeatFeed, ack: dict[str, Any] | None = None) -> bool:
        """Send the part of `feed` this socket has not had: its events after `self.seq` and,
        on the last page, the seat's view with them in one `update` frame. Feeds may arrive
        out of order (an action's answer and a woken read): what was sent is never sent again
        and `self.seq` never goes back. With `ack` (the acting socket), the ack goes first and
        carries the update in the same frame: one frame per action for the actor, not two.
        True when `feed` was the last page."""
        page = feed.events
        async with self.send_lock:
            events = page.events
            if events and events[0].seq <= self.seq:
                events = [e for e in events if e.seq > self.seq]
            frame: dict[str, Any] | None = None
            if events:
                view = None if page.more else feed.snapshot
                if view is None:
                    frame = {"type": "events", "seq": events[-1].seq, "events": events}
                else:
                    frame = {"type": "update", "seq": view.seq, "events": events, "view": view}
            if ack is not None:
                if frame is not None and frame["type"] == "update":
                    ack = {**ack, "update": {k: frame[k] for k in ("seq", "events", "view")}}
                    frame = None
                await self.socket.send_text(_encode(ack))
            if frame is not None:
                await self.socket.send_text(_encode(frame))
            if events:
                self.seq = max(self.seq, events[-1].seq)
            if not page.more:
                self.seq = max(self.seq, page.seq)  # every event up to the match's seq is sent
            self.sub.fed_at = time.monotonic()
        return not page.more

    async def catch_up(self) -> None:
        """Send the seat's events after `self.seq` and then its view."""
        for _ in range(MAX_PAGES_PER_WAKE):
            feed = await self.reads.read(self.match_id, self.seat, self.seq)
            if await self.deliver(feed):
                return
        self.sub.wake()  # more pages: read them after the others had their turn

    async def pump_events(self) -> None:
        behind = 0
        while True:
            # The safety net counts from the last news of the match, so a socket kept current
            # by actions' answers and quiet notifications does not also poll the engine.
            quiet_s = self.feed.wake_timeout_s - (time.monotonic() - self.sub.fed_at)
            woken = await self.sub.wait_events(max(0.0, quiet_s))
            if not woken and time.monotonic() - self.sub.fed_at < self.feed.wake_timeout_s:
                continue  # news came meanwhile without a wake: nothing to fetch yet
            if woken and not self.sub.forced:
                # An action sent through this gateway brings this socket's feed with its
                # answer: wait for it rather than read the same entries twice.
                await self.reads.quiet(self.match_id, ACTION_WAIT_S)
                if self.sub.notified_seq <= self.seq:
                    continue  # nothing new for us (an action's answer or our catch-up had it)
            self.sub.forced = False
            try:
                await self.catch_up()
            except ServiceError as exc:
                if exc.status < 500:
                    raise
                await asyncio.sleep(RETRY_S)
                self.sub.wake()
                continue
            # Announced but not yet readable (should not happen: the engine answers after it
            # applied the entry): look again shortly, a few times, then leave it to the net.
            if self.seq < self.sub.notified_seq and behind < MAX_BEHIND_RETRIES:
                behind += 1
                await asyncio.sleep(BEHIND_RETRY_S)
                self.sub.wake()
            else:
                behind = 0

    async def act(self, frame: WsAction) -> None:
        """Submit the action; its answer carries the feeds of every socket this gateway serves
        at the match (this one too), each read for its own seat, which are sent right after
        the ack: no second engine call, and no wait for the notification."""
        served = self.reads.tables.get(self.match_id, [])
        tables = served[:MAX_FEED_READS]
        if self not in tables:
            tables = [self, *tables[: MAX_FEED_READS - 1]]
        reads = [FeedRead(seat=t.seat, after=t.seq) for t in tables]
        # Named only when the answer reaches every socket this process has subscribed to the
        # match (one still between its subscription and `join` is not among `served`): the
        # engine may then leave the entries unannounced (no NOTIFY).
        every_socket = len(served) <= MAX_FEED_READS and self.feed.match_subscriptions(
            self.match_id
        ) == len(served)
        # The sockets sent their feed from the answer; every other one reads for itself at
        # the end (a failed or cancelled call, an unexpected answer): the action may have
        # been applied and, with every socket's feed asked for, left unannounced.
        fed: set[_Table] = set()
        with self.reads.acting(self.match_id):
            try:
                await self._submit_and_deliver(frame, tables, reads, every_socket, fed)
            finally:
                for table in tables:
                    if table not in fed:
                        table.sub.wake()

    async def _submit_and_deliver(
        self,
        frame: WsAction,
        tables: list[_Table],
        reads: list[FeedRead],
        every_socket: bool,
        fed: set[_Table],
    ) -> None:
        try:
            applied = await submit(
                self.backends, self.match_id, self.seat, self.player, frame.seq,
                frame.action, reads, self.reads.gateway_id if every_socket else None,
            )  # fmt: skip
        except ServiceError as exc:
            if exc.status < 500:
                fed.update(tables)  # refused: nothing changed
            await self.send(
                {"type": "error", "ref": frame.ref, "error": exc.code, "detail": exc.detail}
            )
            return
        ack = {"type": "ack", "ref": frame.ref, "seq": applied.seq}
        # A different count is not the answer asked for: every socket reads for itself.
        same = len(applied.feeds) == len(tables)
        feeds = list(zip(tables, applied.feeds, strict=True)) if same else []
        own = next((f for t, f in feeds if t is self and f.events.seat == self.seat), None)
        if own is None:
            await self.send(ack)
        else:
            if await self.deliver(own, ack):
                fed.add(self)
        for table, feed in feeds:
            if table is self or feed.events.seat != table.seat:
                continue  # sent with the ack; never another seat's feed
            try:
                if await table.deliver(feed):
                    fed.add(table)
            except Exception as exc:
                # another socket that is closing: its own loop ends it
                fed.add(table)
                log.debug("table_deliver_failed", error=type(exc).__name__)

    async def pump_chat(self) -> None:
        """Send the chat lines posted since the socket connected.

        No query until the match has chat news: most matches have none, and a query per
        socket connect (where the chat stood) and per safety-net wake-up cost the gateway a
        few % of its CPU under load. The first read, when a line is announced or every socket
        is woken (the listener reconnected), takes the lines created since the connect (less
        `CHAT_CONNECT_GRACE_S`, for clocks) or announced; later reads the lines after the last
        one sent, and only then does the safety-net wake-up read."""
        last: int | None = None
        since = datetime.now(UTC) - timedelta(seconds=CHAT_CONNECT_GRACE_S)
        while True:
            woken = await self.sub.wait_chat(self.feed.chat_wake_timeout_s)
            first, self.sub.chat_from = self.sub.chat_from, 0
            if last is None and not woken:
                continue  # nothing announced since the connect: nothing to read
            try:
                for _ in range(MAX_CHAT_PAGES_PER_WAKE):
                    if last is None:
                        after = first - 1 if first else MAX_CHAT_ID
                        messages = await read_chat(self.db, self.match_id, after, since=since)
                    else:
                        messages = await read_chat(self.db, self.match_id, last)
                    for message in messages:
                        last = message.id
                        await self.send({"type": "chat", **msgspec.structs.asdict(message)})
                    if len(messages) < 50:
                        break
            except (SQLAlchemyError, OSError) as exc:
                log.info("table_chat_retry", error=type(exc).__name__)
                await asyncio.sleep(RETRY_S)
                if first:
                    self.sub.chat_announced(first)
                else:
                    self.sub.chat.set()

    async def handle(self, raw: str) -> None:
        if json_depth_exceeds(raw):
            deep = too_deep_error()
            await self.send({"type": "error", "error": deep.code, "detail": deep.detail})
            return
        try:
            frame = _frame_decoder.decode(raw)
        except msgspec.DecodeError as exc:
            await self.send({"type": "error", "error": "invalid_request", "detail": str(exc)[:200]})
            return
        if isinstance(frame, WsPing):
            await self.send({"type": "pong"})
        elif isinstance(frame, WsSnapshot):
            await self.send_snapshot()
        elif isinstance(frame, WsChat):
            now = time.monotonic()
            if now - self.last_chat_at < CHAT_INTERVAL_S:
                await self.send({"type": "error", "error": "rate_limited", "detail": "slow down"})
                return
            try:
                check_chat(frame.kind, frame.code)
            except ServiceError as exc:
                await self.send({"type": "error", "error": exc.code, "detail": exc.detail})
                return
            self.last_chat_at = now
            await post_chat(self.db, self.match_id, self.seat, frame.kind, frame.code)
        else:
            await self.act(frame)

    async def receive_loop(self) -> None:
        while True:
            raw = await self.socket.receive_text()
            if len(raw) > MAX_FRAME_CHARS:
                await self.socket.close(code=1009, reason="frame too large")
                return
            if not self.bucket.take():
                await self.socket.close(code=1008, reason="too many frames")
                return
            await self.handle(raw)


async def _session_ended(db: AsyncEngine, watch: SessionWatch) -> None:
    """Return once the socket's session has ended (a notice, or found by the periodic check)."""
    while True:
        try:
            async with asyncio.timeout(SESSION_RECHECK_S):
                await watch.ended.wait()
            return
        except TimeoutError:
            with contextlib.suppress(SQLAlchemyError, OSError):
                if not await accounts.session_alive(db, watch.token_hash):
                    return


def _origin_ok(socket: WebSocket[Any, Any, Any]) -> bool:
    origin = socket.headers.get("origin")
    if origin is None:
        return True
    return origin.split("://", 1)[-1] == socket.headers.get("host", "")


async def _closed_receive() -> ReceiveMessage:
    gone: WebSocketDisconnectEvent = {"type": "websocket.disconnect", "code": 1006}
    return gone


async def _closed_send(message: Message) -> None:
    raise WebSocketDisconnect(detail="the socket's handler has finished")


def _release(socket: WebSocket[Any, Any, Any]) -> None:
    """Break Litestar's reference cycle once the handler is done.

    A `WebSocket` keeps its wrapped `receive` and `send`, closures that refer back to it. That
    cycle holds the scope, uvicorn's protocol, the transport and their buffers (about 90
    objects a socket) until a full collector pass, and with tables closing their sockets all
    the time those passes grew to hundreds of ms of CPU on a gateway: a stall of every table
    it serves. Replacing the two closures lets reference counting free it all at once."""
    socket.receive = _closed_receive
    socket.send = _closed_send


@websocket("/api/matches/{match_id:str}/ws", opt=CHECKED_AT_CONNECT)
async def table_socket(socket: WebSocket[Any, Any, Any], match_id: FromPath[str]) -> None:
    """The live table (see the module docstring for the frames)."""
    try:
        await _serve_table(socket, match_id)
    finally:
        _release(socket)


async def _serve_table(socket: WebSocket[Any, Any, Any], match_id: str) -> None:
    await socket.accept()
    try:
        if not _origin_ok(socket):
            await socket.close(code=1008, reason="cross-origin")
            return
        try:
            session = await authorize(socket, PLAYERS)
        except ServiceError:
            await socket.close(code=1008, reason="sign in as a player")
            return
        try:
            _check_match_id(match_id)
            raw_after = socket.query_params.get("after")
            after = int(raw_after) if raw_after and raw_after.isdigit() else None
            if after is not None and after > 10_000_000:
                after = None
            backends = get_backends(socket.app.state)
            seat, state = await seat_of(backends, match_id, session.user.id)
            observe_seat(socket, match_id, session.user.id, state.tier)
        except ServiceError as exc:
            await socket.send_text(
                _encode({"type": "error", "error": exc.code, "detail": exc.detail})
            )
            await socket.close(code=1008, reason=exc.code)
            return
        counts: dict[str, int] = socket.app.state.socket_counts
        user = session.user.id
        if counts.get(user, 0) >= MAX_SOCKETS_PER_USER:
            await socket.close(code=1008, reason="too many connections")
            return
        feed: MatchFeed = socket.app.state.feed
        # Subscribe before the first read, so nothing published after it is missed.
        sub = feed.subscribe(match_id)
        if sub is None:
            await socket.close(code=1013, reason="try again later")
            return
        watch = feed.watch_session(user, session.token_hash)
        if watch is None:
            feed.unsubscribe(sub)
            await socket.close(code=1013, reason="try again later")
            return
        ended = False
        counts[user] = counts.get(user, 0) + 1
        reads: FeedBatcher = socket.app.state.feed_batcher
        table = _Table(
            socket, backends, socket.app.state.db, feed, sub, match_id, seat, user, reads
        )
        # Until `join`, actions through this process are announced (they cannot carry this
        # socket's read: see `_Table.act`); its first read registers this process with the
        # engine as a reader.
        try:
            await table.send({"type": "hello", "seat": seat, "seq": state.seq})
            table.seq = after if after is not None and after < state.seq else state.seq
            first = await reads.read(match_id, seat, table.seq)
            if first.snapshot is None:
                # Too far behind for one page: the view alone, and the feed from there on.
                table.seq = await table.send_snapshot()
            elif first.events.events:
                await table.deliver(first)  # the missed events and the view, one frame
            else:
                table.seq = first.snapshot.seq
                await table.send({"type": "snapshot", "seq": table.seq, "view": first.snapshot})
            reads.join(table)
            session_task = asyncio.create_task(_session_ended(socket.app.state.db, watch))
            tasks = [
                asyncio.create_task(table.pump_events()),
                asyncio.create_task(table.pump_chat()),
                asyncio.create_task(table.receive_loop()),
                session_task,
            ]
            done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            ended = session_task in done and session_task.exception() is None
            for task in pending:
                task.cancel()
            for task in pending:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            for task in done:
                failure = task.exception()
                if failure is not None and not isinstance(failure, WebSocketDisconnect):
                    log.info("table_socket_closed", error=type(failure).__name__)
        finally:
            reads.leave(table)
            feed.unsubscribe(sub)
            feed.unwatch_session(watch)
            counts[user] = counts.get(user, 1) - 1
            if counts[user] <= 0:
                counts.pop(user, None)
    except WebSocketDisconnect:
        return
    with contextlib.suppress(Exception):
        if ended:
            await socket.close(code=SESSION_ENDED_CLOSE_CODE, reason="session ended")
        else:
            await socket.close()


class TableController(GuardedController):
    """A seat's view, actions, events and chat over HTTP: players only."""

    guards = [requires_role("player")]

    @get("/api/matches/{match_id:str}", tags=["table"], responses=READ_ERRORS)
    async def match_view(
        self, user: CurrentUser, request: Request[Any, Any, Any], match_id: FromPath[str]
    ) -> SeatSnapshot:
        """Your seat's view: your tiles, legal actions, the public table; nobody else's tiles."""
        _check_match_id(match_id)
        backends = get_backends(request.app.state)
        seat, _ = await seat_of(backends, match_id, user.id)
        return await snapshot(backends, match_id, seat)

    @post(
        "/api/matches/{match_id:str}/actions",
        status_code=200,
        tags=["table"],
        responses=WRITE_ERRORS,
    )
    async def match_action(
        self,
        user: CurrentUser,
        request: Request[Any, Any, Any],
        match_id: FromPath[str],
        data: JSONBody[ActionRequest],
    ) -> ActionAccepted:
        """Act at your seat; `seq` is the match seq your decision was made against (409 if stale)."""
        _check_match_id(match_id)
        backends = get_backends(request.app.state)
        seat, _ = await seat_of(backends, match_id, user.id)
        applied = await submit(backends, match_id, seat, user.id, data.seq, data.action)
        return ActionAccepted(match_id=applied.match_id, seq=applied.seq)

    @get("/api/matches/{match_id:str}/events", tags=["table"], responses=READ_ERRORS)
    async def match_events(
        self,
        user: CurrentUser,
        request: Request[Any, Any, Any],
        match_id: FromPath[str],
        after: Annotated[int, Parameter(ge=0, le=10_000_000)] = 0,
        wait_ms: Annotated[int, Parameter(ge=0, le=LONG_POLL_MS)] = 0,
    ) -> EventPage:
        """Events after `after` as your seat sees them (long-poll up to `wait_ms`)."""
        _check_match_id(match_id)
        backends = get_backends(request.app.state)
        seat, _ = await seat_of(backends, match_id, user.id)
        return await call(
            "engine",
            backends.engine.get(
                f"/internal/matches/{match_id}/seats/{seat}/events",
                EventPage,
                params={"after": after, "wait_ms": wait_ms},
            ),
        )

    @get("/api/matches/{match_id:str}/chat", tags=["table"], responses=READ_ERRORS)
    async def match_chat(
        self,
        user: CurrentUser,
        request: Request[Any, Any, Any],
        match_id: FromPath[str],
        after: Annotated[int, Parameter(ge=0, le=2**62)] = 0,
    ) -> list[ChatMessage]:
        _check_match_id(match_id)
        await seat_of(get_backends(request.app.state), match_id, user.id)
        return await read_chat(request.app.state.db, match_id, after)

    @post(
        "/api/matches/{match_id:str}/chat", status_code=200, tags=["table"], responses=WRITE_ERRORS
    )
    async def send_chat(
        self,
        user: CurrentUser,
        request: Request[Any, Any, Any],
        match_id: FromPath[str],
        data: JSONBody[ChatRequest],
    ) -> ChatMessage:
        _check_match_id(match_id)
        check_chat(data.kind, data.code)
        seat, _ = await seat_of(get_backends(request.app.state), match_id, user.id)
        limiter = request.app.state.chat_limits
        key = f"{user.id}:{match_id}"
        if limiter.blocked_for(key) > 0:
            raise ServiceError(429, "rate_limited", "slow down")
        limiter.hit(key)
        chat_id = await post_chat(request.app.state.db, match_id, seat, data.kind, data.code)
        return ChatMessage(id=chat_id, seat=seat, kind=data.kind, code=data.code)


ROUTES = [TableController, chat_phrases, table_socket]
