"""Event-loop lag and garbage-collector pauses, as Prometheus histograms.

A service process is one event loop: anything that holds it (a CPU-heavy handler, a collector
pass, a burst of frames) delays every request and socket in the process at once. These two
measures say how much of a client-observed tail is the process's own stall rather than the
work of the request.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from typing import Any

from services.common.metrics import GC_PAUSE_SECONDS, LOOP_LAG_SECONDS

# Often enough to catch a stall of a few ms, rare enough to cost nothing (50 wake-ups a second).
LAG_PROBE_INTERVAL_MS = 20

_gc_started_at = 0.0
_gc_hooked = False


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    global _gc_started_at
    if phase == "start":
        _gc_started_at = time.perf_counter()
    else:
        GC_PAUSE_SECONDS.labels(str(info.get("generation", "?"))).observe(
            time.perf_counter() - _gc_started_at
        )


def watch_gc() -> None:
    """Time every collector pass of this process (once per process)."""
    global _gc_hooked
    if not _gc_hooked:
        gc.callbacks.append(_on_gc)
        _gc_hooked = True


async def probe_loop_lag(max_probes: int | None = None) -> None:
    """Sleep a short interval again and again and observe how late each wake-up is.

    Bounded only by cancellation (the process's lifetime) unless `max_probes` is given."""
    loop = asyncio.get_running_loop()
    interval_s = LAG_PROBE_INTERVAL_MS / 1000
    probes = 0
    while max_probes is None or probes < max_probes:
        before = loop.time()
        await asyncio.sleep(interval_s)
        LOOP_LAG_SECONDS.observe(max(0.0, loop.time() - before - interval_s))
        probes += 1


class LoopHealth:
    """The lag probe as a task with the app's lifetime, and the collector hook."""

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None

    async def start(self, _: object = None) -> None:
        watch_gc()
        if self._task is None:
            self._task = asyncio.create_task(probe_loop_lag(), name="loop-lag-probe")

    async def stop(self, _: object = None) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        loop = task.get_loop()
        if loop is not asyncio.get_running_loop():
            # Started on another loop (a test client's portal): cancel it there.
            if not loop.is_closed():
                loop.call_soon_threadsafe(task.cancel)
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
