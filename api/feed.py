"""Table-socket wake-ups: one fan-out registry per gateway process, fed by one of two backends.

The engine sends `NOTIFY engine_events, 'match_id:seq'` right after each log write commits, in
commit order (so nothing is announced that is not committed; a notification lost in a crash
is covered by the safety-net fetch and by the seq a restored match announces); the gateway sends `NOTIFY gateway_chat,
'match_id:chat_id'` with every chat line. Every gateway process must hear both, whichever
gateway or engine replica wrote them, and wakes only the sockets subscribed to that match.

- PostgreSQL (the default): each gateway holds one LISTEN connection.
- Redis (`MESA_REDIS_URL`): one gateway per deployment, the holder of a PostgreSQL advisory
  lock, is the relay: it LISTENs and republishes the notifications in batches on one Redis
  channel, to which every gateway subscribes. PostgreSQL then carries one listener however
  many gateways run; the other gateways wait on the lock (one cheap probe a second) and the
  first to get it relays when the relay dies (its lock goes with its connection).

A wake-up is a flag, not a queue: many notifications before a socket runs coalesce into one
fetch, and a notification of an entry the socket already has (an action's answer brought it)
wakes nothing. Sockets also fetch when they hear nothing of their match for `wake_timeout_s`
(a lost notification, e.g. while PostgreSQL or Redis restarts or the relay changes, never
stalls a table), and every socket is woken once after each (re)connect, and whenever a relay
starts relaying.

The feed also carries "session ended" notices (`gateway_sessions`): signing out, a lock or a
self-exclusion closes that user's table sockets on every gateway (`announce_session_ended`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Callable
from typing import Any

import asyncpg
import redis.asyncio as aioredis
from prometheus_client import Counter, Gauge, Histogram
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.common.db import app_server_settings, asyncpg_dsn
from services.common.logging import get_logger
from services.common.metrics import REGISTRY
from services.engine.contract import NOTIFY_CHANNEL

log = get_logger()

ENGINE_CHANNEL = NOTIFY_CHANNEL
CHAT_CHANNEL = "gateway_chat"
# `u:USER` (every session of USER ended: locked, self-excluded) or `t:USER:TOKEN_HASH_HEX`
# (one session signed out): every gateway closes the table sockets opened with it.
SESSION_CHANNEL = "gateway_sessions"
REDIS_CHANNEL = "mesa:table-feed"
MAX_SUBSCRIPTIONS = 50_000  # open table sockets per gateway process
MAX_PAYLOAD_CHARS = 200
WAKE_TIMEOUT_S = 5.0  # fetch anyway after this long without a notification
CHAT_WAKE_TIMEOUT_S = 30.0
CHECK_INTERVAL_S = 10.0  # probe a listening connection when it has been quiet
CONNECT_TIMEOUT_S = 5.0
BACKOFF_MIN_S = 0.2
BACKOFF_MAX_S = 5.0
# The relay: its pending notifications are bounded (beyond, they are dropped and every
# gateway is told to wake all its sockets instead), and one Redis message carries a batch.
RELAY_QUEUE_MAX = 20_000
RELAY_BATCH_MAX = 500
RELAY_STANDBY_POLL_S = 1.0  # a standby gateway asks for the relay lock this often
RELAY_LOCK_KEYS = (0x464545, 0x44)  # "FEE", "D": apart from the engine's match locks
MAX_MESSAGE_CHARS = RELAY_BATCH_MAX * (MAX_PAYLOAD_CHARS + 4) + 64
WAKE_ALL = "*"

BACKENDS = ("postgres", "redis")
FEED_BACKEND = Gauge(
    "mesa_feed_backend_info",
    "The table feed's backend of this gateway process (1 for the one in use)",
    ["backend"],
    registry=REGISTRY,
)
FEED_CONNECTED = Gauge(
    "mesa_feed_connected",
    "1 while the gateway's feed listener is connected (PostgreSQL LISTEN or Redis subscribe)",
    ["backend"],
    registry=REGISTRY,
)
FEED_MESSAGES = Counter(
    "mesa_feed_messages",
    "Notifications received by the gateway's feed listener, by kind (engine, chat, wake_all)",
    ["backend", "kind"],
    registry=REGISTRY,
)
FEED_RECONNECTS = Counter(
    "mesa_feed_reconnects",
    "Feed listener connections made after the first (each one wakes every socket)",
    ["backend"],
    registry=REGISTRY,
)
FEED_LAST_MESSAGE = Gauge(
    "mesa_feed_last_message_timestamp_seconds",
    "Unix time of the last notification the feed listener received",
    registry=REGISTRY,
)
FEED_SUBSCRIPTIONS = Gauge(
    "mesa_feed_subscriptions", "Table sockets subscribed to the feed", registry=REGISTRY
)
FEED_LAG_SECONDS = Histogram(
    "mesa_feed_lag_seconds",
    "Redis backend: time from the relay hearing a notification to a gateway receiving it",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
    registry=REGISTRY,
)
RELAY_LEADER = Gauge(
    "mesa_feed_relay_leader",
    "Redis backend: 1 while this gateway relays PostgreSQL notifications to Redis",
    registry=REGISTRY,
)
RELAY_BACKLOG = Gauge(
    "mesa_feed_relay_backlog",
    "Redis backend: notifications heard by the relay and not yet published",
    registry=REGISTRY,
)
RELAY_PUBLISHED = Counter(
    "mesa_feed_relay_published",
    "Redis backend: notifications the relay published to Redis",
    registry=REGISTRY,
)
RELAY_DROPPED = Counter(
    "mesa_feed_relay_dropped",
    "Redis backend: notifications the relay dropped (backlog full or Redis unreachable)",
    registry=REGISTRY,
)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Subscription:
    """One socket's interest in one match: two wake flags and the newest seq announced."""

    __slots__ = (
        "chat",
        "chat_from",
        "events",
        "fed_at",
        "forced",
        "match_id",
        "notified_seq",
        "seen_seq",
    )

    def __init__(self, match_id: str) -> None:
        self.match_id = match_id
        self.events = asyncio.Event()
        self.chat = asyncio.Event()
        self.notified_seq = -1
        # The seq the socket has already been sent (kept by the socket): a notification of
        # an entry it has (an action's answer brought it) does not wake it.
        self.seen_seq = -1
        # When the match was last heard of (a notification, woken or not) or the socket last
        # fed: the safety-net fetch comes `wake_timeout_s` after this, not after the last wake.
        self.fed_at = time.monotonic()
        self.forced = False  # fetch on the next wake even if `notified_seq` is not newer
        # The first chat line announced since the socket last took this (0: none).
        self.chat_from = 0

    def chat_announced(self, chat_id: int) -> None:
        """Wake the chat pump; its next read starts no later than line `chat_id`."""
        if self.chat_from == 0 or chat_id < self.chat_from:
            self.chat_from = chat_id
        self.chat.set()

    def wake(self) -> None:
        """Wake the socket's event pump to fetch whatever is there (a retry, a reconnect)."""
        self.forced = True
        self.events.set()

    @staticmethod
    async def _wait(flag: asyncio.Event, timeout_s: float) -> bool:
        """True when woken, False after `timeout_s`; clears the flag either way."""
        woken = True
        if not flag.is_set():
            try:
                async with asyncio.timeout(timeout_s):
                    await flag.wait()
            except TimeoutError:
                woken = False
        flag.clear()
        return woken

    async def wait_events(self, timeout_s: float) -> bool:
        return await self._wait(self.events, timeout_s)

    async def wait_chat(self, timeout_s: float) -> bool:
        return await self._wait(self.chat, timeout_s)


def _split(payload: str) -> tuple[str, int] | None:
    if len(payload) > MAX_PAYLOAD_CHARS:
        return None
    match_id, sep, number = payload.rpartition(":")
    if not sep or not match_id or not number.isdigit():
        return None
    return match_id, int(number)


def _redis_client(url: str) -> aioredis.Redis:
    # No silent retries inside the client: a broken connection must surface here, so the
    # feed counts the reconnect and wakes every socket (messages sent meanwhile are lost).
    client: aioredis.Redis = aioredis.Redis.from_url(
        url,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        socket_timeout=None,
        retry=Retry(NoBackoff(), 0),
        decode_responses=True,
    )
    return client


class _PgListener:
    """A LISTEN connection on both channels, reconnecting with backoff.

    With `lock`, it first waits for the relay's advisory lock on the same connection, so only
    one process in the deployment listens (the lock is freed when its connection ends).
    """

    def __init__(
        self,
        dsn: str,
        name: str,
        on_engine: Callable[[str], None],
        on_chat: Callable[[str], None],
        on_up: Callable[[], None],
        on_down: Callable[[], None],
        *,
        on_session: Callable[[str], None] | None = None,
        lock: bool = False,
    ) -> None:
        self.dsn = dsn
        self.name = name
        self.on_engine = on_engine
        self.on_chat = on_chat
        self.on_session = on_session
        self.on_up = on_up
        self.on_down = on_down
        self.lock = lock

    def _engine(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        self.on_engine(payload)

    def _chat(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        self.on_chat(payload)

    def _session(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        if self.on_session is not None:
            self.on_session(payload)

    async def run(self) -> None:
        backoff = BACKOFF_MIN_S
        while True:
            conn: Any = None
            up = False
            try:
                conn = await asyncpg.connect(
                    self.dsn,
                    timeout=CONNECT_TIMEOUT_S,
                    server_settings=app_server_settings(self.name),
                )
                if self.lock:
                    while not await conn.fetchval(
                        "SELECT pg_try_advisory_lock($1::int, $2::int)",
                        *RELAY_LOCK_KEYS,
                        timeout=CONNECT_TIMEOUT_S,
                    ):
                        backoff = BACKOFF_MIN_S  # PostgreSQL answers: a later loss starts low
                        await asyncio.sleep(RELAY_STANDBY_POLL_S)
                lost = asyncio.Event()
                conn.add_termination_listener(lambda _c, ev=lost: ev.set())
                await conn.add_listener(ENGINE_CHANNEL, self._engine)
                await conn.add_listener(CHAT_CHANNEL, self._chat)
                await conn.add_listener(SESSION_CHANNEL, self._session)
                up = True
                self.on_up()
                backoff = BACKOFF_MIN_S
                while not lost.is_set():
                    try:
                        async with asyncio.timeout(CHECK_INTERVAL_S):
                            await lost.wait()
                    except TimeoutError:
                        await conn.fetchval("SELECT 1", timeout=CONNECT_TIMEOUT_S)
                log.warning("feed_connection_lost", listener=self.name)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning(
                    "feed_listen_failed",
                    listener=self.name,
                    error=type(exc).__name__,
                    detail=str(exc)[:200],
                )
            finally:
                if up:
                    self.on_down()
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.terminate()
            await asyncio.sleep(backoff)
            backoff = min(BACKOFF_MAX_S, backoff * 2)


class RedisRelay:
    """PostgreSQL notifications to Redis, while this process holds the relay lock.

    Heard notifications wait in a bounded backlog and leave in batches (one PUBLISH each).
    Whatever cannot be delivered (backlog full, Redis unreachable, a relay just taking over)
    becomes one `*` line: every gateway wakes all its sockets, which fetch what they missed.
    """

    def __init__(self, dsn: str, redis_url: str, *, queue_max: int = RELAY_QUEUE_MAX) -> None:
        self.redis_url = redis_url
        self.queue_max = queue_max
        self.pending: collections.deque[tuple[str, int]] = collections.deque()
        self.wake_all_pending = False
        self.ready = asyncio.Event()
        self.leading = asyncio.Event()
        self.published = 0
        self.dropped = 0
        self.listener = _PgListener(
            dsn,
            "mesa-gateway-relay",
            lambda p: self._heard("e", p),
            lambda p: self._heard("c", p),
            self._up,
            self._down,
            on_session=lambda p: self._heard("s", p),
            lock=True,
        )

    def _heard(self, kind: str, payload: str) -> None:
        if len(payload) > MAX_PAYLOAD_CHARS or "\n" in payload:
            return
        if len(self.pending) >= self.queue_max:
            self.dropped += 1
            RELAY_DROPPED.inc()
            self.wake_all_pending = True
        else:
            self.pending.append((f"{kind} {payload}", _now_ms()))
            RELAY_BACKLOG.set(len(self.pending))
        self.ready.set()

    def _up(self) -> None:
        # Notifications sent while no relay listened are lost: every socket fetches once.
        self.leading.set()
        RELAY_LEADER.set(1)
        self.wake_all_pending = True
        self.ready.set()
        log.info("feed_relay_leading")

    def _down(self) -> None:
        self.leading.clear()
        RELAY_LEADER.set(0)

    def _next_message(self) -> tuple[str, int]:
        """The next batch as one message (stamp line, then one line each) and its size."""
        lines: list[str] = [WAKE_ALL] if self.wake_all_pending else []
        stamp = _now_ms()
        taken = 0
        while self.pending and taken < RELAY_BATCH_MAX:
            line, heard_ms = self.pending.popleft()
            if taken == 0:
                stamp = heard_ms  # the oldest: subscribers measure the worst lag in the batch
            lines.append(line)
            taken += 1
        return "\n".join([str(stamp), *lines]), taken

    async def run(self) -> None:
        listener = asyncio.create_task(self.listener.run(), name="match-feed-relay-listen")
        try:
            await self._publish_loop()
        finally:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener
            RELAY_LEADER.set(0)

    async def _publish_loop(self) -> None:
        client: aioredis.Redis | None = None
        backoff = BACKOFF_MIN_S
        try:
            while True:
                await self.ready.wait()
                self.ready.clear()
                try:
                    while self.pending or self.wake_all_pending:
                        if client is None:
                            client = _redis_client(self.redis_url)
                        wake = self.wake_all_pending
                        message, taken = self._next_message()
                        self.wake_all_pending = False
                        try:
                            await client.publish(REDIS_CHANNEL, message)
                        except BaseException:
                            # This batch is lost: the gateways must fetch it themselves.
                            self.wake_all_pending = True
                            self.dropped += taken
                            RELAY_DROPPED.inc(taken)
                            raise
                        self.published += taken
                        RELAY_PUBLISHED.inc(taken)
                        RELAY_BACKLOG.set(len(self.pending))
                        if wake:
                            log.info("feed_relay_woke_all")
                    backoff = BACKOFF_MIN_S
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.warning("feed_relay_publish_failed", error=type(exc).__name__)
                    if client is not None:
                        with contextlib.suppress(Exception):
                            await client.aclose()
                    client = None
                    await asyncio.sleep(backoff)
                    backoff = min(BACKOFF_MAX_S, backoff * 2)
                    self.ready.set()
        finally:
            if client is not None:
                with contextlib.suppress(Exception):
                    await client.aclose()


class SessionWatch:
    """One table socket's session: `ended` is set when it is signed out, locked or
    self-excluded (here or on any other gateway)."""

    __slots__ = ("ended", "token_hash", "user_id")

    def __init__(self, user_id: str, token_hash: bytes) -> None:
        self.user_id = user_id
        self.token_hash = token_hash
        self.ended = asyncio.Event()


def session_payload(user_id: str, token_hash: bytes | None = None) -> str:
    return f"u:{user_id}" if token_hash is None else f"t:{user_id}:{token_hash.hex()}"


class MatchFeed:
    """The per-process fan-out registry and its listener (PostgreSQL or Redis)."""

    def __init__(
        self,
        database_url: str,
        *,
        redis_url: str = "",
        max_subscriptions: int = MAX_SUBSCRIPTIONS,
        wake_timeout_s: float = WAKE_TIMEOUT_S,
        chat_wake_timeout_s: float = CHAT_WAKE_TIMEOUT_S,
    ) -> None:
        self.dsn = asyncpg_dsn(database_url)
        self.redis_url = redis_url
        self.backend = "redis" if redis_url else "postgres"
        self.max_subscriptions = max_subscriptions
        self.wake_timeout_s = wake_timeout_s
        self.chat_wake_timeout_s = chat_wake_timeout_s
        self.listening = asyncio.Event()
        self.connects = 0
        self.notifications = 0
        self.relay = RedisRelay(self.dsn, redis_url) if redis_url else None
        self._topics: dict[str, set[Subscription]] = {}
        self._count = 0
        self._watches: dict[str, set[SessionWatch]] = {}
        self._watch_count = 0
        self._tasks: list[asyncio.Task[None]] = []

    # --- the registry ---------------------------------------------------------------------

    @property
    def subscriptions(self) -> int:
        return self._count

    def match_subscriptions(self, match_id: str) -> int:
        """The sockets of this process subscribed to `match_id`."""
        return len(self._topics.get(match_id, ()))

    def subscribe(self, match_id: str) -> Subscription | None:
        """A new subscription, or None when the process holds `max_subscriptions` already."""
        if self._count >= self.max_subscriptions:
            return None
        sub = Subscription(match_id)
        self._topics.setdefault(match_id, set()).add(sub)
        self._count += 1
        FEED_SUBSCRIPTIONS.inc()
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        subs = self._topics.get(sub.match_id)
        if subs is None or sub not in subs:
            return
        subs.discard(sub)
        self._count -= 1
        FEED_SUBSCRIPTIONS.dec()
        if not subs:
            del self._topics[sub.match_id]

    def watch_session(self, user_id: str, token_hash: bytes) -> SessionWatch | None:
        """Register a table socket's session (None when the process holds too many)."""
        if self._watch_count >= self.max_subscriptions:
            return None
        watch = SessionWatch(user_id, token_hash)
        self._watches.setdefault(user_id, set()).add(watch)
        self._watch_count += 1
        return watch

    def unwatch_session(self, watch: SessionWatch) -> None:
        watches = self._watches.get(watch.user_id)
        if watches is None or watch not in watches:
            return
        watches.discard(watch)
        self._watch_count -= 1
        if not watches:
            del self._watches[watch.user_id]

    def end_sessions(self, user_id: str, token_hash: bytes | None = None) -> int:
        """End the watches of `user_id` (of that one session if `token_hash`); how many."""
        ended = 0
        for watch in self._watches.get(user_id, ()):
            if token_hash is None or watch.token_hash == token_hash:
                watch.ended.set()
                ended += 1
        return ended

    def deliver_session(self, payload: str) -> None:
        self._heard("session")
        if len(payload) > MAX_PAYLOAD_CHARS:
            return
        kind, _, rest = payload.partition(":")
        if kind == "u" and rest:
            self.end_sessions(rest)
        elif kind == "t":
            user_id, _, hex_hash = rest.rpartition(":")
            try:
                token_hash = bytes.fromhex(hex_hash)
            except ValueError:
                return
            if user_id:
                self.end_sessions(user_id, token_hash)

    async def announce_session_ended(
        self, db: AsyncEngine, user_id: str, token_hash: bytes | None = None
    ) -> None:
        """Close the table sockets of a session (or of every session of `user_id`) on this
        gateway now, and on every gateway through the feed. Call after the revocation has
        committed: a socket's periodic check also finds it then, if the notice is lost."""
        self.end_sessions(user_id, token_hash)
        try:
            async with db.begin() as conn:
                await conn.execute(
                    text("SELECT pg_notify(:channel, :payload)"),
                    {"channel": SESSION_CHANNEL, "payload": session_payload(user_id, token_hash)},
                )
        except Exception as exc:
            log.warning("session_notice_failed", error=type(exc).__name__)

    def wake_all(self) -> None:
        for subs in self._topics.values():
            for sub in subs:
                sub.wake()
                sub.chat.set()

    def _heard(self, kind: str) -> None:
        self.notifications += 1
        FEED_MESSAGES.labels(self.backend, kind).inc()
        FEED_LAST_MESSAGE.set(time.time())

    def deliver_engine(self, payload: str) -> None:
        self._heard("engine")
        parsed = _split(payload)
        if parsed is None:
            return
        subs = self._topics.get(parsed[0])
        if not subs:
            return
        now = time.monotonic()
        for sub in subs:
            sub.notified_seq = max(sub.notified_seq, parsed[1])
            sub.fed_at = now
            if parsed[1] > sub.seen_seq:
                sub.events.set()

    def deliver_chat(self, payload: str) -> None:
        self._heard("chat")
        parsed = _split(payload)
        if parsed is None:
            return
        for sub in self._topics.get(parsed[0], ()):
            sub.chat_announced(parsed[1])

    def deliver_batch(self, message: str) -> None:
        """One relay message: a stamp line (ms), then `e match:seq`, `c match:id` or `*`."""
        if len(message) > MAX_MESSAGE_CHARS:
            return
        stamp, _, body = message.partition("\n")
        if stamp.isdigit():
            FEED_LAG_SECONDS.observe(max(0, _now_ms() - int(stamp)) / 1000)
        for line in body.split("\n"):
            if line == WAKE_ALL:
                self._heard("wake_all")
                self.wake_all()
            elif line.startswith("e "):
                self.deliver_engine(line[2:])
            elif line.startswith("c "):
                self.deliver_chat(line[2:])
            elif line.startswith("s "):
                self.deliver_session(line[2:])

    # --- the listener ---------------------------------------------------------------------

    def _up(self) -> None:
        self.connects += 1
        if self.connects > 1:
            FEED_RECONNECTS.labels(self.backend).inc()
        FEED_CONNECTED.labels(self.backend).set(1)
        self.listening.set()
        # Anything published while nobody listened: every socket fetches once.
        self.wake_all()
        log.info("feed_listening", backend=self.backend, connects=self.connects)

    def _down(self) -> None:
        self.listening.clear()
        FEED_CONNECTED.labels(self.backend).set(0)

    async def start(self) -> None:
        if self._tasks:
            return
        for name in BACKENDS:
            FEED_BACKEND.labels(name).set(1 if name == self.backend else 0)
        if self.relay is None:
            listener = _PgListener(
                self.dsn,
                "mesa-gateway-listen",
                self.deliver_engine,
                self.deliver_chat,
                self._up,
                self._down,
                on_session=self.deliver_session,
            )
            self._tasks.append(asyncio.create_task(listener.run(), name="match-feed-listener"))
        else:
            self._tasks.append(asyncio.create_task(self._run_redis(), name="match-feed-redis"))
            self._tasks.append(asyncio.create_task(self.relay.run(), name="match-feed-relay"))

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._down()

    async def _run_redis(self) -> None:
        backoff = BACKOFF_MIN_S
        while True:
            client: aioredis.Redis | None = None
            pubsub: Any = None
            up = False
            try:
                client = _redis_client(self.redis_url)
                pubsub = client.pubsub()
                await pubsub.subscribe(REDIS_CHANNEL)
                up = True
                self._up()
                backoff = BACKOFF_MIN_S
                heard_at = time.monotonic()
                pinged_at: float | None = None
                while True:
                    message = await pubsub.get_message(timeout=CHECK_INTERVAL_S)
                    now = time.monotonic()
                    if message is not None:
                        heard_at, pinged_at = now, None
                        if message.get("type") == "message" and isinstance(message["data"], str):
                            self.deliver_batch(message["data"])
                    elif pinged_at is not None and now - pinged_at >= CHECK_INTERVAL_S:
                        raise ConnectionError("no answer to PING")
                    elif pinged_at is None and now - heard_at >= CHECK_INTERVAL_S:
                        # Quiet for a whole interval: a PING must come back within the next.
                        pinged_at = now
                        await pubsub.ping()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("feed_redis_failed", error=type(exc).__name__, detail=str(exc)[:200])
            finally:
                if up:
                    self._down()
                if pubsub is not None:
                    with contextlib.suppress(Exception):
                        await pubsub.aclose()
                if client is not None:
                    with contextlib.suppress(Exception):
                        await client.aclose()
            await asyncio.sleep(backoff)
            backoff = min(BACKOFF_MAX_S, backoff * 2)
