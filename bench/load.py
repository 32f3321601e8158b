"""`make load`: paid tables played over the public HTTP + WebSocket protocol against `mesa up`.

    python -m bench.load [--tables 1000 --duration-s 30] [--parejas 250,500,750,1000]
    python -m bench.load --ramp 800,900,1000,1100 --parejas 0 --duration-s 30

The default is the target: 1,000 two-seat tables at one action per second each for 30 s,
then four-seat parejas tables in steps of 250, 500, 750 and 1,000 (the goal), each step for
30 s, stopping at the first step that does not hold.

A two-seat table is two simulated players at a private $10 apuesta 1v1 table; a four-seat table
is four players at a private $10 apuesta parejas table (2v2, partners across), each player on
a socket of their own, as players really sit: every action is answered on the actor's socket
and fanned out to the three others. Tables play real matches at `--rate` actions per second per
table (a new match as soon as one ends, while the measurement runs); after the measured window
the matches still running are played to their end at a faster pace (bounded by `--drain-s`),
then the ledger is reconciled: trial balance zero, every pot zero, every wallet = deposit -
stakes + payouts (from the match results). Latency is client-observed: action frame sent -> its
ack frame received. The measured window (`--duration-s`) opens once every table has its first
match running: concurrent tables in steady state, not their start-up (`warmup_s`).

A size holds when p99 < 100 ms, no errors and the set pace reached. Ramp mode (`--ramp` for
two-seat tables, `--parejas` for four-seat ones) runs each size in turn on one platform and
reports the highest that holds. Results: bench/results/load.json. Bounded: at most 8 steps of
each kind, every step at most its start-up (stagger + 60 s), `--duration-s` and `--drain-s`;
traffic only to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import sys
import tempfile
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import psutil

from bench import server_side
from bench.common import percentile, write_result
from bench.sim import (
    DEPOSIT_CENTS,
    KIND,
    PAREJAS_KIND,
    GatewayClient,
    MatchRecord,
    Platform,
    Player,
    Schedule,
    SimError,
    Stats,
    TableDriver,
    check_invariants,
    run_queue_wait_s,
    seat_count,
    setup_players,
    wait_settled,
)
from services.common.loop_health import probe_loop_lag, resident_bytes

P99_LIMIT_MS = 100.0
PAREJAS_GOAL_TABLES = 1000
DEFAULT_PAREJAS_STEPS = "250,500,750,1000"
MAX_STEPS = 8
WARMUP_S = 5.0
MAX_SETUP_S = 60.0  # bound on the last table's first match, after its staggered start
# Tables start spread over about one match (an apuesta 1v1 here lasts ~42 actions; a parejas
# match ~85, which ends spread out on its own), so that
# their first matches also end spread out, as in a steady state. Started within 4 s of each
# other, 1,000 tables ended their first matches within ~10 s of each other ~45 s later: a wave
# of settlements and new tables (lobby calls, sockets, deals) at ~3x the steady rate, which
# a 60 s window contained (p50 118 ms, p99 595 ms in its 5 s) and a 30 s window did not.
STAGGER_ACTIONS = 40
SETTLE_S = 3.0  # from the last table's first match to the window (> 2 * SCRAPE_MARGIN_S)
SCRAPE_MARGIN_S = 1.0  # the services' /metrics are read this long before and after the window
HTTP_CONNECTIONS = 32  # per gateway
GC_THRESHOLDS = (50_000, 50, 100)  # the load generator's (defaults 700, 10, 10)


def _own_rss_mb() -> float:
    return resident_bytes() / 2**20


def _own_cpu_s() -> float:
    t = psutil.Process().cpu_times()
    return float(t.user + t.system)


async def run_size(
    platform: Platform,
    players: list[Player],
    tables: int,
    duration_s: float,
    rate: float,
    drain_s: float,
    records: dict[str, MatchRecord],
    kind: str = KIND,
) -> dict[str, Any]:
    """`tables` tables of `kind` for one measured window, each seating as many of `players`
    as the kind has seats."""
    seats = seat_count(kind)
    if len(players) < seats * tables:
        raise SimError(f"{tables} tables of {seats} need {seats * tables} players")
    stats = Stats()
    # A small pool per gateway: the lobby calls that need one are short, and a burst of table
    # starts queues for a connection instead of opening hundreds.
    clients = [
        GatewayClient(url, max_connections=HTTP_CONNECTIONS, timeout_s=30.0)
        for url in platform.gateway_urls
    ]
    try:
        start = time.monotonic()
        stagger_s = STAGGER_ACTIONS / rate
        max_warmup_s = stagger_s + MAX_SETUP_S
        # The measured window opens once every table has its first match running (WARMUP_S
        # at the least, `max_warmup_s` at the most), SETTLE_S later: hundreds of tables starting
        # at once (private tables, joins, sockets, first deals) are a burst no steady state
        # sees, and a window opened during it measured that burst (every action over 30 ms
        # of a 30 s window at 300 tables was in the window's first 1.3 s). Until then the
        # window lies beyond the bound, so nothing is measured.
        stats.measure_from = start + max_warmup_s
        stats.measure_to = stats.measure_from + duration_s
        schedule = Schedule(stats.measure_to, stats.measure_to + drain_s)
        horizon_s = max_warmup_s + duration_s + drain_s + 10
        window_set = asyncio.Event()

        async def open_window() -> None:
            for _ in range(int(max_warmup_s * 10)):  # bounded: max_warmup_s
                if stats.matches_started >= tables:
                    break
                await asyncio.sleep(0.1)
            now = time.monotonic()
            begin = min(start + max_warmup_s, max(start + WARMUP_S, now + SETTLE_S))
            stats.measure_from = begin
            stats.measure_to = schedule.stop_at = begin + duration_s
            schedule.deadline = schedule.stop_at + drain_s
            window_set.set()

        opener = asyncio.create_task(open_window())
        drivers = [
            TableDriver(
                i,
                tuple(players[seats * i : seats * (i + 1)]),
                clients,
                stats,
                1.0 / rate,
                records,
                kind=kind,
            )
            for i in range(tables)
        ]
        cpu_before = platform.cpu_seconds()
        cpu_before["load_generator"] = _own_cpu_s()
        waits_before = _run_queue_waits(platform)
        actions_before = stats.actions_total
        frames_before = stats.frames
        samples: list[int] = []

        async def sample() -> None:
            for _ in range(int(horizon_s * 2)):
                await asyncio.sleep(0.5)
                if stats.measuring(time.monotonic()):
                    samples.append(stats.live_tables)

        sampler = asyncio.create_task(sample())
        lags_ms: list[float] = []

        def on_lag(late_s: float) -> None:
            if stats.measuring(time.monotonic()):
                lags_ms.append(late_s * 1000)

        # How late a 10 ms timer fires in this process: the part of the client-observed
        # latency that is the load generator's own event loop, not the platform.
        lagger = asyncio.create_task(probe_loop_lag(on_lag, 0.01, int(horizon_s * 100)))
        scrapes: list[dict[str, Any]] = []

        async def scrape_window() -> None:
            # The services' own histograms over the measured window (bench/server_side.py),
            # scraped a second before it and a second after it: rendering `/metrics` holds a
            # service's event loop for a while, and scraped at the window's edges it delayed
            # the actions in flight there (measured: every action over 30 ms of a 30 s window
            # at 300 tables was within 0.2 s of its start, where the first scrape was).
            urls = platform.service_urls()
            await window_set.wait()
            for at in (stats.measure_from - SCRAPE_MARGIN_S, stats.measure_to + SCRAPE_MARGIN_S):
                await asyncio.sleep(max(0.0, at - time.monotonic()))
                scrapes.append(await server_side.scrape(urls))

        scraper = asyncio.create_task(scrape_window())
        rss_mb: list[float] = []

        async def no_collector_in_window() -> None:
            # The load generator is the measuring instrument: a collector pass of its own
            # stalls every simulated table at once, and the client-observed latency would
            # charge it to the platform (measured: 2 passes of 40-94 ms in a 25 s window at
            # 300 tables, with its thresholds raised). So collect just before the window, not
            # at all inside it (bounded: `--duration-s`), and again after; the report shows
            # what its memory grew by meanwhile.
            await window_set.wait()
            await asyncio.sleep(
                max(0.0, stats.measure_from - 2 * SCRAPE_MARGIN_S - time.monotonic())
            )
            gc.collect()
            gc.disable()
            rss_mb.append(_own_rss_mb())
            try:
                await asyncio.sleep(max(0.0, stats.measure_to - time.monotonic()))
            finally:
                rss_mb.append(_own_rss_mb())
                gc.enable()

        collector_off = asyncio.create_task(no_collector_in_window())

        # Stagger the starts over about one match (STAGGER_ACTIONS): the tables neither act
        # in the same instant nor end their matches in the same few seconds.
        async def staggered(d: TableDriver) -> None:
            await asyncio.sleep(stagger_s * d.index / max(1, tables))
            await d.run(schedule)

        await asyncio.gather(*(staggered(d) for d in drivers))
        finished_at = time.monotonic()
        collector_off.cancel()  # its `finally` turns the collector back on
        with contextlib.suppress(asyncio.CancelledError):
            await collector_off
        with contextlib.suppress(Exception):
            await asyncio.wait_for(scraper, 30)
        sampler.cancel()
        opener.cancel()
        lagger.cancel()
        lags_ms.sort()
        cpu_after = platform.cpu_seconds()
        cpu_after["load_generator"] = _own_cpu_s()
        waits_after = _run_queue_waits(platform)
        actions_all = max(1, stats.actions_total - actions_before)
        window = stats.measure_to - stats.measure_from
        lat = sorted(stats.latencies_ms)
        errors = sum(stats.errors.values())
        p99 = percentile(lat, 0.99)
        result = {
            "kind": kind,
            "seats_per_table": seats,
            "tables": tables,
            "sockets": seats * tables,
            "rate_per_table": rate,
            "duration_s": duration_s,
            "concurrent_tables": {
                "min": min(samples, default=0),
                "mean": round(sum(samples) / len(samples), 1) if samples else 0,
                "max": max(samples, default=0),
            },
            "actions": stats.actions,
            "actions_per_s": round(stats.actions / window, 1),
            "target_actions_per_s": round(tables * rate, 1),
            "latency_ms": {
                "p50": round(percentile(lat, 0.50), 2),
                "p90": round(percentile(lat, 0.90), 2),
                "p99": round(p99, 2),
                "max": round(lat[-1], 2) if lat else 0.0,
            },
            "latency_by_action_ms": {
                kind: {
                    "actions": len(v),
                    "p50": round(percentile(v, 0.50), 2),
                    "p99": round(percentile(v, 0.99), 2),
                }
                for kind, v in sorted(
                    (kind, sorted(v)) for kind, v in stats.latencies_by_kind_ms.items()
                )
            },
            "load_generator_loop_lag_ms": {
                "p50": round(percentile(lags_ms, 0.50), 2),
                "p99": round(percentile(lags_ms, 0.99), 2),
                "max": round(lags_ms[-1], 2) if lags_ms else 0.0,
            },
            # Its collector is off in the measured window: what its memory grew by there.
            "load_generator_rss_mb": [round(x, 1) for x in rss_mb],
            "server_side": server_side.summarize(*scrapes) if len(scrapes) == 2 else {},
            "errors": errors,
            "error_codes": dict(stats.errors),
            "error_samples": stats.error_samples[:5],
            "stale_or_overtaken": stats.stale,
            "reconnects": stats.reconnects,
            "http_retries": stats.http_retries,
            "matches_started": stats.matches_started,
            "matches_over": stats.matches_over,
            "lobby_polls": stats.lobby_polls,
            "warmup_s": round(stats.measure_from - start, 1),
            "drain_s": round(finished_at - stats.measure_to, 1),
            "cpu_s_during_run": {
                k: round(cpu_after.get(k, 0.0) - cpu_before.get(k, 0.0), 1) for k in cpu_after
            },
            # Time runnable but waiting for a core, per action: CPU contention (the platform's
            # own processes and anything else on the machine), not work.
            "run_queue_wait_ms_per_action": {
                k: round(1000 * (waits_after[k] - waits_before.get(k, 0.0)) / actions_all, 3)
                for k in waits_after
            },
            "actions_all": actions_all,
            # Frames the players' sockets received per action (every seat's update; seats'
            # snapshots on connecting): about the seats per table.
            "frames_per_action": round((stats.frames - frames_before) / actions_all, 2),
            # CPU per acknowledged action over the whole run (warm-up and drain included, so
            # it stays comparable when other work shares the cores): what bounds the table count.
            "cpu_ms_per_action": {
                k: round(1000 * (cpu_after.get(k, 0.0) - cpu_before.get(k, 0.0)) / actions_all, 3)
                for k in cpu_after
            },
        }
        # Holds: the p99 limit, no errors, and at least 90% of the set pace reached.
        result["holds"] = bool(
            lat
            and p99 < P99_LIMIT_MS
            and errors == 0
            and stats.actions / window >= 0.9 * tables * rate * _pace_factor()
        )
        return result
    finally:
        for c in clients:
            await c.aclose()


def _run_queue_waits(platform: Platform) -> dict[str, float]:
    waits = platform.run_queue_wait_seconds()
    own = run_queue_wait_s(os.getpid())
    if own is not None:
        waits["load_generator"] = own
    return waits


def _pace_factor() -> float:
    # A table waits for the engine's own steps (deals after the seeds) between actions.
    return 0.85


def parse_steps(text: str) -> list[int]:
    """Table counts of a step search ("250,500,750,1000"): increasing, each within 1..5000, at
    most MAX_STEPS of them; "" or "0" for none."""
    if text.strip() in ("", "0"):
        return []
    try:
        steps = [int(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"table counts are comma-separated integers, not {text!r}") from None
    if len(steps) > MAX_STEPS:
        raise ValueError(f"at most {MAX_STEPS} steps, not {len(steps)}")
    if any(n < 1 or n > 5000 for n in steps):
        raise ValueError("table counts must be within 1..5000")
    if any(b <= a for a, b in zip(steps, steps[1:], strict=False)):
        raise ValueError(f"steps must increase: {text!r}")
    return steps


def highest_that_holds(runs: list[dict[str, Any]]) -> int:
    """The largest table count among the runs that held (0: none did)."""
    return max((r["tables"] for r in runs if r["holds"]), default=0)


async def _steps(
    platform: Platform,
    players: list[Player],
    sizes: list[int],
    args: argparse.Namespace,
    records: dict[str, MatchRecord],
    kind: str,
    stop_at_failure: bool,
) -> list[dict[str, Any]]:
    """Each size in turn (bounded: MAX_STEPS sizes, each bounded in time by `run_size`);
    with `stop_at_failure`, none after the first that does not hold."""
    runs: list[dict[str, Any]] = []
    for size in sizes[:MAX_STEPS]:
        sockets = seat_count(kind) * size
        print(f"load: {size} {kind} tables ({sockets} sockets) for {args.duration_s} s ...",
              flush=True)  # fmt: skip
        run = await run_size(
            platform, players, size, args.duration_s, args.rate, args.drain_s, records, kind
        )
        print(
            f"load: {size} {kind} tables: {run['actions_per_s']} actions/s, "
            f"p50 {run['latency_ms']['p50']} ms, p99 {run['latency_ms']['p99']} ms, "
            f"errors {run['errors']}, holds={run['holds']}",
            flush=True,
        )
        runs.append(run)
        if stop_at_failure and not run["holds"]:
            break
    return runs


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    two_seat = parse_steps(args.ramp) if args.ramp else ([args.tables] if args.tables else [])
    parejas = parse_steps(args.parejas)
    if not two_seat and not parejas:
        raise SimError("nothing to run: give --tables (or --ramp) or --parejas")
    var_dir = Path(tempfile.mkdtemp(prefix="mesa-load-"))
    var_dir.chmod(0o711)  # ours: passable by the server's own user (as root)
    platform = Platform(var_dir, engines=args.engines, gateways=args.gateways)
    started = time.monotonic()
    platform.start()
    print(f"load: platform up in {time.monotonic() - started:.1f} s ({var_dir})", flush=True)
    try:
        t0 = time.monotonic()
        # The runs follow one another (each plays its matches to their end), so the same
        # players sit at the two-seat tables and then at the four-seat ones.
        count = max(
            seat_count(KIND) * max(two_seat, default=0),
            seat_count(PAREJAS_KIND) * max(parejas, default=0),
        )
        players = await setup_players(platform.database_url, platform.gateway_urls[0], count, "ld")
        print(f"load: {len(players)} players ready in {time.monotonic() - t0:.1f} s", flush=True)
        # Everything alive now (players, clients, modules) lives for the whole run: out of the
        # collector's reach. And rarer collections: each full pass stalls every simulated table
        # at once (measured: pauses up to ~250 ms at 250 tables with the default thresholds),
        # which the client-observed latency would charge to the platform.
        gc.collect()
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        records: dict[str, MatchRecord] = {}
        runs = await _steps(
            platform, players, two_seat, args, records, KIND, stop_at_failure=bool(args.ramp)
        )
        parejas_runs = await _steps(
            platform, players, parejas, args, records, PAREJAS_KIND, stop_at_failure=True
        )
        client = GatewayClient(platform.gateway_urls[0], timeout_s=30.0)
        try:
            by_name = {p.name: p for p in players}
            settle_s = await wait_settled(records, by_name, client, Stats(), args.settle_s)
        finally:
            await client.aclose()
        deposits = {p.name: DEPOSIT_CENTS for p in players}
        checks = await check_invariants(platform.database_url, records, deposits)
        checks["settle_wait_s"] = round(settle_s, 1)
        return {
            "engines": args.engines,
            "gateways": args.gateways,
            "cpus": _cpus(),
            "p99_limit_ms": P99_LIMIT_MS,
            "kind": KIND,
            "runs": runs,
            "highest_tables_that_hold": highest_that_holds(runs),
            "parejas": {
                "kind": PAREJAS_KIND,
                "seats_per_table": seat_count(PAREJAS_KIND),
                "steps": parejas,
                "goal_tables": PAREJAS_GOAL_TABLES,
                "runs": parejas_runs,
                "highest_tables_that_hold": highest_that_holds(parejas_runs),
            },
            "reconciliation": checks,
        }
    finally:
        platform.stop()


def _run_loop(main: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
    """The load generator on uvloop, as the services run: it shares the cores with the platform
    it measures, so every millisecond of its own per action is one the platform cannot have."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def _cpus() -> int:
    return os.cpu_count() or 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__)
    parser.add_argument(
        "--tables", type=int, default=1000, help="concurrent two-seat tables (0: none)"
    )
    parser.add_argument("--duration-s", type=float, default=30.0, help="measured seconds")
    parser.add_argument("--rate", type=float, default=1.0, help="actions/s per table")
    parser.add_argument(
        "--ramp", default="", help="two-seat table counts in turn, e.g. 50,100,200 (for --tables)"
    )
    parser.add_argument(
        "--parejas",
        default=DEFAULT_PAREJAS_STEPS,
        help="four-seat parejas table counts in turn, up to the first that does not hold "
        f"(default {DEFAULT_PAREJAS_STEPS}; 0: none)",
    )
    parser.add_argument("--engines", type=int, default=1)
    parser.add_argument("--gateways", type=int, default=1)
    parser.add_argument("--drain-s", type=float, default=240.0, help="bound on finishing")
    parser.add_argument("--settle-s", type=float, default=60.0, help="bound on settling")
    parser.add_argument("--name", default="load", help="result file name under bench/results")
    args = parser.parse_args(argv)
    if not 0.05 <= args.rate <= 5 or not 1 <= args.duration_s <= 3600:
        parser.error("--rate must be within 0.05..5 and --duration-s within 1..3600")
    if not 0 <= args.tables <= 5000:
        parser.error("--tables must be within 0..5000")
    try:
        parse_steps(args.ramp)
        parse_steps(args.parejas)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        result = _run_loop(main_async(args))
    except SimError as exc:
        print(f"load: {exc}", file=sys.stderr)
        return 1
    path = write_result(args.name, result)
    rec = result["reconciliation"]
    parejas = result["parejas"]
    print(
        f"load: highest that holds (p99 < {P99_LIMIT_MS:.0f} ms): "
        f"{result['highest_tables_that_hold']} two-seat tables; "
        f"{parejas['highest_tables_that_hold']} four-seat parejas tables of the goal "
        f"{parejas['goal_tables']} (steps {parejas['steps']}); "
        f"reconciliation ok={rec['ok']} {rec['violations'][:3]}; written to {path}",
        flush=True,
    )
    return 0 if rec["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
