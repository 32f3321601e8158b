"""Engine throughput: actions/s one engine process accepts, persists (group-committed event
log, its NOTIFY in the same commit) and publishes, with many concurrent matches; p50/p99 latency of an action.

Runs the Engine in-process (no HTTP layer) against embedded PostgreSQL, with the real event
log and, as in production, the PostgreSQL transparency log (every deal's commitment and result
are appended to it; BENCH_ENGINE_FAIRNESS=memory keeps them in a list instead).

Besides the action latency it reports where the time goes, for the paced run: the wait for
the event log commit (`persist_ms`), garbage-collector pauses, event-loop lag (how late a 5 ms
timer fires: every stall of the loop delays every match), and, as the baseline measured in the
same run, the floor: one-row commits of the same log table in a row on one connection.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bench.common import percentile, write_result
from fairness.keys import OperatorKey
from services.common.app import freeze_startup_heap
from services.common.errors import ServiceError
from services.common.loop_health import GcTimer, probe_loop_lag
from services.engine import rules as R
from services.engine.clock import RealClock
from services.engine.contract import (
    CreateMatch,
    PlayAction,
    SeatSpec,
    SeedCommitAction,
    SeedRevealAction,
    SubmitAction,
)
from services.engine.ports import MemoryFairnessLog, MemoryLedger, PgFairnessLog
from services.engine.service import Engine
from services.engine.store import Store

MATCHES = int(os.environ.get("BENCH_ENGINE_MATCHES", "200"))
DURATION_S = float(os.environ.get("BENCH_ENGINE_SECONDS", "10"))
# The target load, offered at a steady pace: PACED_MATCHES matches sharing the rate.
PACED_RATE_PER_S = float(os.environ.get("BENCH_ENGINE_RATE", "2000"))
PACED_MATCHES = int(os.environ.get("BENCH_ENGINE_PACED_MATCHES", "400"))
FAIRNESS = os.environ.get("BENCH_ENGINE_FAIRNESS", "pg")
# BENCH_ENGINE_PACED_ONLY=1: only the floor and the paced run (quick before/after checks).
PACED_ONLY = os.environ.get("BENCH_ENGINE_PACED_ONLY", "") == "1"
FLOOR_COMMITS = 1_000
LAG_TICK_S = 0.005


class _TimedStore(Store):
    """The real store, timing each append's wait for its commit."""

    def __init__(self, url: str, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        self.waits_ms: list[float] = []

    async def append(
        self, match_id: str, log_no: int, seq: int, record: bytes, notify: bool = True
    ) -> None:
        t0 = time.perf_counter()
        await super().append(match_id, log_no, seq, record, notify=notify)
        self.waits_ms.append((time.perf_counter() - t0) * 1000)


class _Probes:
    """GC pauses and event-loop lag while recording is on (services.common.loop_health)."""

    def __init__(self) -> None:
        self.gc_ms: list[float] = []
        self.lag_ms: list[float] = []
        self.recording = False
        self._gc = GcTimer(self._on_gc)

    def _on_gc(self, generation: int, seconds: float) -> None:
        if self.recording:
            self.gc_ms.append(seconds * 1000)

    def _on_lag(self, seconds: float) -> None:
        if self.recording:
            self.lag_ms.append(seconds * 1000)

    def __enter__(self) -> _Probes:
        gc.callbacks.append(self._gc)
        self._task = asyncio.get_running_loop().create_task(
            probe_loop_lag(self._on_lag, LAG_TICK_S)
        )
        return self

    def __exit__(self, *_: object) -> None:
        gc.callbacks.remove(self._gc)
        self._task.cancel()


def _dist(values: list[float]) -> dict[str, float]:
    v = sorted(values)
    return {
        "n": len(v),
        "p50_ms": round(percentile(v, 0.50), 2),
        "p99_ms": round(percentile(v, 0.99), 2),
        "max_ms": round(v[-1] if v else 0.0, 2),
        "total_ms": round(sum(v), 1),
    }


async def _floor(url: str) -> dict[str, float]:
    """Commit latency floor: one-row appends to the log table, one after another."""
    import asyncpg

    from services.common.db import APP_ROLE, asyncpg_dsn

    conn = await asyncpg.connect(asyncpg_dsn(url), server_settings={"role": APP_ROLE})
    waits: list[float] = []
    mid = f"floor-{os.getpid()}"
    try:
        await conn.execute(
            "INSERT INTO engine.matches (match_id, spec) VALUES ($1, '{}'::jsonb)"
            " ON CONFLICT DO NOTHING",
            mid,
        )
        # closed at once: the engine's start-up scan must not take it for a live match
        await conn.execute(
            "INSERT INTO engine.match_closed (match_id, status) VALUES ($1, 'void')", mid
        )
        for i in range(FLOOR_COMMITS):
            t0 = time.perf_counter()
            await conn.execute(
                "INSERT INTO engine.match_log (match_id, log_no, seq, record) VALUES ($1, $2, $2,"
                " $3)",
                mid,
                i,
                b"{}",
            )
            waits.append((time.perf_counter() - t0) * 1000)
    finally:
        await conn.close()
    return _dist(waits)


async def _player(
    engine: Engine, mid: str, latencies: list[float], stop: float, interval_s: float | None
) -> int:
    """Plays one match: as fast as acknowledged (interval None) or one action per interval."""
    done = 0
    # Each match starts at a random phase of its interval, so the offered load is steady
    # instead of every match acting in the same instant.
    next_at = time.perf_counter() + (random.uniform(0, interval_s) if interval_s else 0.0)
    while time.perf_counter() < stop:
        if interval_s is not None:
            next_at += interval_s
            delay = next_at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        actor = engine.actors[mid]
        m = actor.match
        if m.over:
            return done
        kind, seats = m.awaiting()
        if not seats:
            await asyncio.sleep(0.001)
            continue
        seat = seats[0]
        if kind in ("seed_commit", "seed_reveal"):
            seed = f"s{seat}"
            act: Any = (
                SeedCommitAction(commitment=hashlib.sha256(seed.encode()).hexdigest())
                if kind == "seed_commit"
                else SeedRevealAction(seed=seed)
            )
            t0 = time.perf_counter()
            try:
                await engine.submit(mid, SubmitAction(seat=seat, seq=m.seq, action=act))
            except ServiceError:
                continue
            latencies.append((time.perf_counter() - t0) * 1000)
            done += 1
            continue
        hand = m.hand
        legal = [a for a in R.legal_actions(hand, seat) if isinstance(a, R.Play)] if hand else []
        if not legal:
            await asyncio.sleep(0.001)
            continue
        a = legal[0]
        end: Literal["left", "right"] = "right" if a.end == R.RIGHT else "left"
        action = PlayAction(tile=R.tile_str(a.tile), end=end)
        body = SubmitAction(seat=seat, seq=m.seq, action=action)
        t0 = time.perf_counter()
        try:
            await engine.submit(mid, body)
        except ServiceError:
            continue
        latencies.append((time.perf_counter() - t0) * 1000)
        done += 1
    return done


async def _run(url: str, matches: int, rate_per_s: float | None) -> dict[str, Any]:
    with _Probes() as probes:
        return await _run_probed(url, matches, rate_per_s, probes)


async def _run_probed(
    url: str, matches: int, rate_per_s: float | None, probes: _Probes
) -> dict[str, Any]:
    store = _TimedStore(url)  # the service's pool size
    await store.start()
    key = OperatorKey(Ed25519PrivateKey.generate())
    fairness: Any = MemoryFairnessLog()
    if FAIRNESS == "pg":
        # on the store's pool, as in the service
        fairness = PgFairnessLog(store.started_pool, key)
        await fairness.start()
    engine = Engine(store, RealClock(), key, fairness, MemoryLedger())
    await engine.start(scan=False)
    freeze_startup_heap()  # as the service does once it has started
    latencies: list[float] = []
    persist_ms: list[float] = []
    total = 0
    # Only the time in which actions are played counts; creating matches does not.
    measured_s = 0.0
    round_no = 0
    while measured_s < DURATION_S:
        round_no += 1
        ids = [f"bench-{round_no}-{i}-{os.getpid()}-{matches}" for i in range(matches)]
        for mid in ids:
            seats = [SeatSpec(seat=0, player_id="a"), SeatSpec(seat=1, player_id="b")]
            seats += [SeatSpec(seat=2, player_id="c"), SeatSpec(seat=3, player_id="d")]
            await engine.create(CreateMatch(match_id=mid, variant="casa", options={}, seats=seats))
        # no seeds given: skip the seed deadline by voiding nothing; open the deal at once
        for mid in ids:
            m = engine.actors[mid].match
            if m.round is not None:
                m.round.commit_deadline_ms = 0
            engine.actors[mid].wake.set()
        await asyncio.sleep(0.2)
        t0 = time.perf_counter()
        stop = t0 + (DURATION_S - measured_s)
        interval = None if rate_per_s is None else matches / rate_per_s
        store.waits_ms.clear()
        probes.recording = True
        counts = await asyncio.gather(
            *(_player(engine, mid, latencies, stop, interval) for mid in ids)
        )
        probes.recording = False
        persist_ms += store.waits_ms
        total += sum(counts)
        measured_s += time.perf_counter() - t0
        if time.perf_counter() - t0 < 0.01:
            break
    elapsed = measured_s
    await engine.stop()
    if isinstance(fairness, PgFairnessLog):
        await fairness.aclose()
    await store.stop()
    gc.unfreeze()  # the next run starts from the same heap
    lat = sorted(latencies)
    return {
        "mode": "saturated" if rate_per_s is None else f"paced at {rate_per_s:.0f} actions/s",
        "matches_concurrent": matches,
        "actions": total,
        "seconds": round(elapsed, 2),
        "actions_per_s": round(total / elapsed, 1),
        "p50_ms": round(percentile(lat, 0.50), 2),
        "p99_ms": round(percentile(lat, 0.99), 2),
        "components": {
            "persist_wait": _dist(persist_ms),
            "gc_pauses": _dist(probes.gc_ms),
            "loop_lag": _dist(probes.lag_ms),
        },
    }


def main() -> dict[str, Any]:
    from launcher.embedded_pg import EmbeddedPostgres
    from services.common.migrate import upgrade
    from services.common.ports import free_port

    url = os.environ.get("BENCH_DATABASE_URL")
    server = None
    if not url:
        data = Path(tempfile.mkdtemp(prefix="mesa-bench-engine-"))
        data.chmod(0o711)  # ours: passable by the server's own user (as root)
        server = EmbeddedPostgres(data / "data", free_port())
        server.start()
        url = server.url("postgres")
    try:
        upgrade(url, ["fairness", "engine"])
        # The service runs under uvicorn, which uses uvloop when installed: measure the same.
        try:
            import uvloop

            runner: Any = uvloop.run
            loop_name = "uvloop"
        except ImportError:
            runner, loop_name = asyncio.run, "asyncio"
        floor = runner(_floor(url))
        print(f"floor (one-row commits in a row): {floor}", flush=True)
        saturated: dict[str, Any] = {"skipped": True}
        if not PACED_ONLY:
            saturated = runner(_run(url, MATCHES, None))
        print(f"saturated: {saturated}", flush=True)
        paced = runner(_run(url, PACED_MATCHES, PACED_RATE_PER_S))
        print(f"paced: {paced}", flush=True)
        result = {
            "event_loop": loop_name,
            "fairness_log": FAIRNESS,
            "saturated": saturated,
            "paced": paced,
            "floor_commit": floor,
            "target": "2000 actions/s at p99 < 20 ms",
            "paced_ratio_to_target_rate": round(paced["actions_per_s"] / 2000, 3),
            "paced_p99_ratio_to_target": round(paced["p99_ms"] / 20, 3),
            "paced_p99_ratio_to_floor_commit_p99": round(
                paced["p99_ms"] / max(floor["p99_ms"], 0.01), 2
            ),
        }
    finally:
        if server is not None:
            server.stop()
    write_result("engine", result)
    return result


if __name__ == "__main__":
    print(main())
