"""Table-socket wake-ups: one PostgreSQL LISTEN connection per gateway process.

The engine sends `NOTIFY engine_events, 'match_id:seq'` in the transaction of every log write;
the gateway sends `NOTIFY gateway_chat, 'match_id:chat_id'` with every chat line. Whichever
gateway (or engine replica) wrote it, every gateway process hears it on its one listening
connection and wakes only the sockets subscribed to that match. A wake-up is a flag, not a
queue: many notifications before a socket runs coalesce into one fetch. Sockets also fetch
when they hear nothing for `wake_timeout_s` (a lost notification, e.g. while PostgreSQL
restarts, never stalls a table), and every socket is woken once after each (re)connect.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import asyncpg

from services.common.db import app_server_settings, asyncpg_dsn
from services.common.logging import get_logger
from services.engine.contract import NOTIFY_CHANNEL

log = get_logger()

ENGINE_CHANNEL = NOTIFY_CHANNEL
CHAT_CHANNEL = "gateway_chat"
MAX_SUBSCRIPTIONS = 50_000  # open table sockets per gateway process
MAX_PAYLOAD_CHARS = 200
WAKE_TIMEOUT_S = 5.0  # fetch anyway after this long without a notification
CHAT_WAKE_TIMEOUT_S = 30.0
CHECK_INTERVAL_S = 10.0  # probe the listening connection when it has been quiet
CONNECT_TIMEOUT_S = 5.0
BACKOFF_MIN_S = 0.2
BACKOFF_MAX_S = 5.0


class Subscription:
    """One socket's interest in one match: two wake flags and the newest seq announced."""

    __slots__ = ("chat", "events", "forced", "match_id", "notified_seq")

    def __init__(self, match_id: str) -> None:
        self.match_id = match_id
        self.events = asyncio.Event()
        self.chat = asyncio.Event()
        self.notified_seq = -1
        self.forced = False  # fetch on the next wake even if `notified_seq` is not newer

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


class MatchFeed:
    """The per-process fan-out registry and its listening connection (reconnects with backoff)."""

    def __init__(
        self,
        database_url: str,
        *,
        max_subscriptions: int = MAX_SUBSCRIPTIONS,
        wake_timeout_s: float = WAKE_TIMEOUT_S,
        chat_wake_timeout_s: float = CHAT_WAKE_TIMEOUT_S,
    ) -> None:
        self.dsn = asyncpg_dsn(database_url)
        self.max_subscriptions = max_subscriptions
        self.wake_timeout_s = wake_timeout_s
        self.chat_wake_timeout_s = chat_wake_timeout_s
        self.listening = asyncio.Event()
        self.connects = 0
        self.notifications = 0
        self._topics: dict[str, set[Subscription]] = {}
        self._count = 0
        self._task: asyncio.Task[None] | None = None

    # --- the registry ---------------------------------------------------------------------

    @property
    def subscriptions(self) -> int:
        return self._count

    def subscribe(self, match_id: str) -> Subscription | None:
        """A new subscription, or None when the process holds `max_subscriptions` already."""
        if self._count >= self.max_subscriptions:
            return None
        sub = Subscription(match_id)
        self._topics.setdefault(match_id, set()).add(sub)
        self._count += 1
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        subs = self._topics.get(sub.match_id)
        if subs is None or sub not in subs:
            return
        subs.discard(sub)
        self._count -= 1
        if not subs:
            del self._topics[sub.match_id]

    def wake_all(self) -> None:
        for subs in self._topics.values():
            for sub in subs:
                sub.wake()
                sub.chat.set()

    def _on_engine(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        self.notifications += 1
        parsed = _split(payload)
        if parsed is None:
            return
        for sub in self._topics.get(parsed[0], ()):
            sub.notified_seq = max(sub.notified_seq, parsed[1])
            sub.events.set()

    def _on_chat(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        self.notifications += 1
        parsed = _split(payload)
        if parsed is None:
            return
        for sub in self._topics.get(parsed[0], ()):
            sub.chat.set()

    # --- the listening connection ---------------------------------------------------------

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="match-feed-listener")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.listening.clear()

    async def _run(self) -> None:
        backoff = BACKOFF_MIN_S
        while True:
            conn: Any = None
            try:
                conn = await asyncpg.connect(
                    self.dsn,
                    timeout=CONNECT_TIMEOUT_S,
                    server_settings=app_server_settings("mesa-gateway-listen"),
                )
                lost = asyncio.Event()
                conn.add_termination_listener(lambda _c, ev=lost: ev.set())
                await conn.add_listener(ENGINE_CHANNEL, self._on_engine)
                await conn.add_listener(CHAT_CHANNEL, self._on_chat)
                self.connects += 1
                self.listening.set()
                # Anything published while nobody listened: every socket fetches once.
                self.wake_all()
                backoff = BACKOFF_MIN_S
                log.info("feed_listening", connects=self.connects)
                while not lost.is_set():
                    try:
                        async with asyncio.timeout(CHECK_INTERVAL_S):
                            await lost.wait()
                    except TimeoutError:
                        await conn.fetchval("SELECT 1", timeout=CONNECT_TIMEOUT_S)
                log.warning("feed_connection_lost")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("feed_listen_failed", error=type(exc).__name__, detail=str(exc)[:200])
            finally:
                self.listening.clear()
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.terminate()
            await asyncio.sleep(backoff)
            backoff = min(BACKOFF_MAX_S, backoff * 2)
