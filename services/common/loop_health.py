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
import resource
import time
from collections.abc import Callable
from typing import Any

from services.common.metrics import GC_PAUSE_SECONDS, LOOP_LAG_SECONDS

# Often enough to catch a stall of a few ms, rare enough to cost nothing (50 wake-ups a second).
LAG_PROBE_INTERVAL_MS = 20

# A full collector pass walks every live object: about 0.2 s of CPU in an engine or a gateway
# at 800 tables of the load test (0.5 s in a gateway while closed sockets still left reference
# cycles), a stall of every table the process serves. Python starts one by itself each time
# the old generation has grown by a quarter, under load every 30-60 s. The services switch
# that off (`SERVICE_GC_THRESHOLDS`) and run one on this schedule instead; the reference
# cycles a service still makes (a few hundred objects a minute, since those of closed sockets
# and connections are broken) wait at most this long to be freed.
FULL_COLLECTION_INTERVAL_S = 600.0
# A full pass comes early once the process's resident memory has doubled since the last one,
# and grown by at least this much: reference cycles made faster than the schedule assumes (an
# error storm, a code path the load test does not take) cannot grow the heap without bound
# between two passes. Growth alone is not enough: an engine's live matches grow its heap by
# more than 128 MB between 800 and 850 tables of the load test, which is no leak.
EARLY_COLLECTION_GROWTH_BYTES = 256 * 1024 * 1024
MEMORY_CHECK_INTERVAL_S = 10.0

_gc_hooked = False


class GcTimer:
    """A `gc.callbacks` hook: hands each collector pass's generation and duration (seconds)
    to `observe`."""

    def __init__(self, observe: Callable[[int, float], None]) -> None:
        self.observe = observe
        self._started_at = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started_at = time.perf_counter()
        else:
            self.observe(int(info.get("generation", -1)), time.perf_counter() - self._started_at)


def _observe_gc(generation: int, seconds: float) -> None:
    GC_PAUSE_SECONDS.labels(str(generation)).observe(seconds)


def watch_gc() -> None:
    """Time every collector pass of this process into `mesa_gc_pause_seconds` (once)."""
    global _gc_hooked
    if not _gc_hooked:
        gc.callbacks.append(GcTimer(_observe_gc))
        _gc_hooked = True


async def probe_loop_lag(
    observe: Callable[[float], None] = LOOP_LAG_SECONDS.observe,
    interval_s: float = LAG_PROBE_INTERVAL_MS / 1000,
    max_probes: int | None = None,
) -> None:
    """Sleep `interval_s` again and again and hand how late each wake-up is (seconds) to
    `observe`. Bounded only by cancellation (the process's lifetime) unless `max_probes`."""
    probes = 0
    while max_probes is None or probes < max_probes:
        # perf_counter, not loop.time(): uvloop's clock ticks in whole milliseconds
        before = time.perf_counter()
        await asyncio.sleep(interval_s)
        observe(max(0.0, time.perf_counter() - before - interval_s))
        probes += 1


def resident_bytes() -> int:
    """This process's resident memory (Linux /proc; elsewhere its peak, which only grows)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


async def collect_fully_every(
    interval_s: float = FULL_COLLECTION_INTERVAL_S,
    max_passes: int | None = None,
    collect: Callable[[], int] = gc.collect,
    memory: Callable[[], int] = resident_bytes,
    check_interval_s: float = MEMORY_CHECK_INTERVAL_S,
    early_growth_bytes: int = EARLY_COLLECTION_GROWTH_BYTES,
) -> None:
    """A full collector pass every `interval_s`, or sooner once resident memory has doubled
    since the last and grown by at least `early_growth_bytes` (the services switch Python's
    own passes off; see `FULL_COLLECTION_INTERVAL_S`). Bounded only by cancellation unless
    `max_passes`."""
    passes = 0
    while max_passes is None or passes < max_passes:
        baseline = memory()
        limit = max(early_growth_bytes, baseline)
        waited_s = 0.0
        while waited_s < interval_s:
            step_s = min(check_interval_s, interval_s - waited_s)
            await asyncio.sleep(step_s)
            waited_s += step_s
            if memory() - baseline > limit:
                break
        collect()
        passes += 1


class LoopHealth:
    """The lag probe and the scheduled full collections as tasks with the app's lifetime, and
    the collector hook."""

    def __init__(self) -> None:
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self, _: object = None) -> None:
        watch_gc()
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(probe_loop_lag(), name="loop-lag-probe"),
                asyncio.create_task(collect_fully_every(), name="full-collections"),
            ]

    async def stop(self, _: object = None) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            loop = task.get_loop()
            if loop is not asyncio.get_running_loop():
                # Started on another loop (a test client's portal): cancel it there.
                if not loop.is_closed():
                    loop.call_soon_threadsafe(task.cancel)
                continue
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
