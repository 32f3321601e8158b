"""Planted abuse for the integrity tests, laid on top of honest histories
(bench.integrity_honest): a chip-dumping ring, a laundering chain, structured deposits, a
bot-timed player, an around-the-clock player and two accounts on one device."""

from __future__ import annotations

import random
from itertools import count

from integrity.models import (
    ActionTiming,
    CashierMove,
    History,
    PotRecord,
    SeatResult,
    SeatSighting,
)

HOUR_MS = 3_600_000
START_MS = 1_796_083_200_000  # 2026-12-01T00:00Z
_ids = count(10_000_000)


def pot(match_id: str, winner: str, loser: str, stake: int, at_ms: int, private: bool) -> PotRecord:
    payout = 2 * stake - 2 * stake // 10
    return PotRecord(
        match_id=match_id,
        tier=str(stake // 100),
        variant="apuesta-1v1",
        currency="USD",
        closed_at_ms=at_ms,
        seats=[SeatResult(winner, stake, payout), SeatResult(loser, stake, 0)],
        private=private,
    )


def move(kind: str, player: str, amount: int, at_ms: int) -> CashierMove:
    return CashierMove(next(_ids), kind, player, amount, "USD", at_ms)  # type: ignore[arg-type]


def dumping_ring(prefix: str = "ring") -> History:
    """Three friends at private $80 tables: a passes to b, b to c, c's winnings come back round
    to a now and then, but each pair's flow is one way (c loses to nobody in the ring)."""
    a, b, c = f"{prefix}_a", f"{prefix}_b", f"{prefix}_c"
    pots = []
    for day in range(10):
        at = START_MS + day * 24 * HOUR_MS + 21 * HOUR_MS
        pots.append(pot(f"{prefix}-ab-{day}", b, a, 8000, at, True))
        pots.append(pot(f"{prefix}-bc-{day}", c, b, 8000, at + 900_000, True))
    moves = [move("deposit", a, 100_000, START_MS), move("deposit", b, 20_000, START_MS)]
    return History(pots=pots, moves=moves)


def laundering_chain(prefix: str = "mule") -> History:
    """x deposits $500, loses it to y in five quick private matches, y withdraws $450."""
    x, y = f"{prefix}_x", f"{prefix}_y"
    t0 = START_MS + 3 * 24 * HOUR_MS
    pots = [pot(f"{prefix}-{i}", y, x, 8000, t0 + HOUR_MS + i * 600_000, True) for i in range(6)]
    moves = [
        move("deposit", x, 50_000, t0),
        move("deposit", y, 8000, t0 - HOUR_MS),
        move("withdrawal", y, 45_000, t0 + 5 * HOUR_MS),
    ]
    return History(pots=pots, moves=moves)


def structured_deposits(player: str = "smurf", threshold: int = 1_000_000) -> History:
    """Four deposits of $9,500-$9,900 over five days, then most of it out after a little play."""
    moves = [
        move("deposit", player, threshold - 10_000 * (i + 1), START_MS + i * 30 * HOUR_MS)
        for i in range(4)
    ]
    moves.append(move("withdrawal", player, 3_500_000, START_MS + 6 * 24 * HOUR_MS))
    pots = [
        pot(f"{player}-p{i}", player, f"{player}_opp", 1000, START_MS + (i + 1) * HOUR_MS, False)
        for i in range(3)
    ]
    return History(pots=pots, moves=moves)


def bot_player(player: str = "robot", actions: int = 120) -> History:
    """Answers every move in 800 ms, give or take 40."""
    rng = random.Random(7)
    timings = [
        ActionTiming(
            f"{player}-m{i // 20}", player, 800 + rng.randint(-40, 40), START_MS + i * 30_000
        )
        for i in range(actions)
    ]
    return History(timings=timings)


def night_and_day(player: str = "owl") -> History:
    """Acts in 22 hours of each of three days."""
    timings = [
        ActionTiming(
            f"{player}-d{d}",
            player,
            2000 + 997 * (h % 7),
            START_MS + d * 24 * HOUR_MS + h * HOUR_MS,
        )
        for d in range(3)
        for h in range(22)
    ]
    return History(timings=timings)


def one_device(match_id: str = "shared-1") -> History:
    sightings = [
        SeatSighting(match_id, p, "80", True, "aa" * 32, "dd" * 32, START_MS)
        for p in ("twin_a", "twin_b")
    ]
    return History(sightings=sightings)


def merged(*histories: History) -> History:
    return History(
        pots=[p for h in histories for p in h.pots],
        moves=[m for h in histories for m in h.moves],
        timings=[t for h in histories for t in h.timings],
        sightings=[s for h in histories for s in h.sightings],
    )
