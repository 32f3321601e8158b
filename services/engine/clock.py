"""The server's clock, injectable: real time in the service, a manual clock in tests.

Actors never sleep on their own: they wait on a wake event until a deadline, and the clock
decides when the deadline has come (real time, or a test calling `advance`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int: ...

    async def wait(self, wake: asyncio.Event, deadline_ms: int | None) -> None:
        """Return when `wake` is set or the clock reaches `deadline_ms` (None: no deadline)."""
        ...


class RealClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    async def wait(self, wake: asyncio.Event, deadline_ms: int | None) -> None:
        if deadline_ms is None:
            await wake.wait()
            return
        delay_s = (deadline_ms - self.now_ms()) / 1000
        if delay_s <= 0:
            return
        # A timer that sets `wake` (the waiter clears it before it waits again): no task and
        # no cancellation per wait, as asyncio.wait_for would cost.
        timer = asyncio.get_running_loop().call_later(delay_s, wake.set)
        try:
            await wake.wait()
        finally:
            timer.cancel()


class ManualClock:
    """Time moves only when a test calls `advance`; waiting actors are woken to recheck."""

    def __init__(self, start_ms: int = 1_800_000_000_000) -> None:
        self._now_ms = start_ms
        self._waiters: dict[asyncio.Event, asyncio.AbstractEventLoop] = {}

    def now_ms(self) -> int:
        return self._now_ms

    def advance(self, delta_ms: int) -> None:
        if delta_ms < 0:
            raise ValueError("the clock never goes back")
        self._now_ms += delta_ms
        for wake, loop in list(self._waiters.items()):
            loop.call_soon_threadsafe(wake.set)  # tests may drive the app from another thread

    async def wait(self, wake: asyncio.Event, deadline_ms: int | None) -> None:
        if deadline_ms is not None and deadline_ms <= self._now_ms:
            return
        self._waiters[wake] = asyncio.get_running_loop()
        try:
            await wake.wait()
        finally:
            self._waiters.pop(wake, None)
