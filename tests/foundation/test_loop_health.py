"""The event-loop lag probe and the collector-pause hook (services/common/loop_health.py)."""

from __future__ import annotations

import asyncio
import gc
import time

from services.common.loop_health import (
    LoopHealth,
    collect_fully_every,
    probe_loop_lag,
    resident_bytes,
    watch_gc,
)
from services.common.metrics import REGISTRY


def _count(name: str, labels: dict[str, str] | None = None) -> float:
    return REGISTRY.get_sample_value(name + "_count", labels or {}) or 0.0


def _at_least(name: str, le: str) -> float:
    """Observations above the bucket `le` (seconds)."""
    total = _count(name)
    below = REGISTRY.get_sample_value(name + "_bucket", {"le": le}) or 0.0
    return total - below


async def test_a_blocked_loop_shows_as_lag() -> None:
    before = _count("mesa_event_loop_lag_seconds")
    slow_before = _at_least("mesa_event_loop_lag_seconds", "0.025")

    async def block_once() -> None:
        await asyncio.sleep(0)
        time.sleep(0.06)  # holds the loop: the probe's wake-up comes at least this late

    blocker = asyncio.create_task(block_once())
    await probe_loop_lag(max_probes=3)
    await blocker
    assert _count("mesa_event_loop_lag_seconds") == before + 3
    assert _at_least("mesa_event_loop_lag_seconds", "0.025") >= slow_before + 1


async def test_loop_health_tasks_start_and_stop() -> None:
    health = LoopHealth()
    await health.start()
    tasks = list(health._tasks)
    await health.start()  # idempotent: one probe, one collection schedule
    assert [t.get_name() for t in tasks] == ["loop-lag-probe", "full-collections"]
    assert health._tasks == tasks and not any(t.done() for t in tasks)
    await health.stop()
    assert all(t.cancelled() for t in tasks) and health._tasks == []
    await health.stop()


async def test_full_collections_run_on_their_schedule() -> None:
    passes: list[int] = []

    def collect() -> int:
        passes.append(len(passes))
        return 0

    await collect_fully_every(interval_s=0.001, max_passes=3, collect=collect)
    assert passes == [0, 1, 2]


async def test_a_growing_heap_brings_the_full_collection_forward() -> None:
    readings = iter([100, 100, 100, 250, 250, 250, 250])  # grows by 150 at the third check
    checks: list[int] = []
    collected_after: list[int] = []

    def memory() -> int:
        value = next(readings)
        checks.append(value)
        return value

    def collect() -> int:
        collected_after.append(len(checks))
        return 0

    # a schedule of 1,000 checks: only the growth can end the first wait early
    await collect_fully_every(
        interval_s=1.0, max_passes=1, collect=collect, memory=memory,
        check_interval_s=0.001, early_growth_bytes=100,
    )  # fmt: skip
    assert collected_after == [4]  # the baseline and three checks, the third over the limit


async def test_growth_must_also_double_the_heap_to_bring_the_collection_forward() -> None:
    readings = iter([1000, 1150, 1150, 1150, 1150, 1150, 1150])  # +150: over 100, not doubled
    calls: list[int] = []

    def memory() -> int:
        calls.append(0)
        return next(readings)

    def collect() -> int:
        calls.append(1)
        return 0

    await collect_fully_every(
        interval_s=0.005, max_passes=1, collect=collect, memory=memory,
        check_interval_s=0.001, early_growth_bytes=100,
    )  # fmt: skip
    assert calls.count(0) >= 5 and calls[-1] == 1  # waited out the whole interval


def test_resident_memory_is_read() -> None:
    assert resident_bytes() > 1024 * 1024


def test_collector_passes_are_timed_by_generation() -> None:
    watch_gc()
    watch_gc()  # hooked once
    before = _count("mesa_gc_pause_seconds", {"generation": "2"})
    gc.collect()
    assert _count("mesa_gc_pause_seconds", {"generation": "2"}) == before + 1


def test_a_started_service_freezes_its_startup_heap_and_sets_its_collector() -> None:
    from services.common.app import SERVICE_GC_THRESHOLDS, freeze_startup_heap

    before = gc.get_threshold()
    try:
        freeze_startup_heap()
        assert gc.get_threshold() == SERVICE_GC_THRESHOLDS
        assert gc.get_freeze_count() > 0
        young, middle, full = SERVICE_GC_THRESHOLDS
        assert young == before[0]
        assert middle < before[1]  # shorter middle passes
        # no automatic full passes: a year of middle passes, several a second, never gets there
        assert full >= 365 * 24 * 3600 * 10 // middle
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
