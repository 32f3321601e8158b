"""Honest play histories for measuring the integrity detectors' false-positive rate.

A seeded model of an honest player base, built straight as `integrity.models.History` (no
platform): each player has a home hour and plays sessions of one to three hours on some days,
at public 1v1 tables against whoever else is online at his tier, with a small skill edge
either way; a match is won by a coin weighted by the two skills; 10% house commission. Players
deposit a round amount, deposit again (or stop) when broke, and now and then withdraw after a
session that left them well ahead. A few pairs of friends also play private tables together
a few times a week, evenly matched. Response times are log-normal around each player's own
median, as people's are. Bots, rings and launderers are what the tests plant on top.

Run `python -m bench.integrity_honest` to print the rate for a few seeds.
"""

from __future__ import annotations

import random
import sys
from collections import Counter
from dataclasses import dataclass, field

from integrity.config import IntegrityConfig
from integrity.detectors import detect
from integrity.models import ActionTiming, CashierMove, History, PotRecord, SeatResult

HOUR_MS = 3_600_000
SLOT_MS = 12 * 60_000  # one match
START_MS = 1_796_083_200_000  # 2026-12-01T00:00Z
STAKES = (1000, 2000, 4000, 8000)
DEPOSITS = (2000, 5000, 10_000, 20_000, 50_000)
COMMISSION_BP = 1000
TIMINGS_PER_SEAT = 6  # sampled actions per seat per match (a 1v1 match has a few dozen)


@dataclass
class _Player:
    name: str
    skill: float
    home_hour: int
    play_days: float
    stake: int
    median_ms: float
    sigma: float
    balance: int = 0
    deposited_since: int = 0
    sessions: dict[int, tuple[int, int]] = field(default_factory=dict)  # day -> (from, to) h


def honest_history(seed: int, players: int = 300, days: int = 14) -> History:
    rng = random.Random(seed)
    people = [
        _Player(
            name=f"h{seed}_{i}",
            skill=rng.gauss(0, 0.08),
            home_hour=rng.randrange(24),
            play_days=rng.choice((0.2, 0.4, 0.6, 0.8)),
            stake=rng.choice(STAKES),
            median_ms=rng.uniform(1200, 6000),
            sigma=rng.uniform(0.45, 0.9),
        )
        for i in range(players)
    ]
    pots: list[PotRecord] = []
    moves: list[CashierMove] = []
    timings: list[ActionTiming] = []
    entry = iter(range(1, 10**9))
    match_no = iter(range(1, 10**9))

    def move(p: _Player, kind: str, amount: int, at_ms: int) -> None:
        moves.append(CashierMove(next(entry), kind, p.name, amount, "USD", at_ms))  # type: ignore[arg-type]

    def deposit(p: _Player, at_ms: int) -> None:
        amount = max(rng.choice(DEPOSITS), p.stake)
        p.balance += amount
        p.deposited_since += amount
        move(p, "deposit", amount, at_ms)

    def play(a: _Player, b: _Player, stake: int, at_ms: int, private: bool) -> None:
        p_a = min(0.8, max(0.2, 0.5 + a.skill - b.skill))
        winner, loser = (a, b) if rng.random() < p_a else (b, a)
        pot = 2 * stake
        payout = pot - pot * COMMISSION_BP // 10_000
        winner.balance += payout - stake
        loser.balance -= stake
        match_id = f"m{seed}-{next(match_no)}"
        pots.append(
            PotRecord(
                match_id=match_id,
                tier=str(stake // 100),
                variant="apuesta-1v1",
                currency="USD",
                closed_at_ms=at_ms + SLOT_MS,
                seats=[
                    SeatResult(winner.name, stake, payout),
                    SeatResult(loser.name, stake, 0),
                ],
                private=private,
            )
        )
        for p in (a, b):
            for k in range(TIMINGS_PER_SEAT):
                delta = int(rng.lognormvariate(0, p.sigma) * p.median_ms)
                timings.append(
                    ActionTiming(match_id, p.name, delta, at_ms + (k + 1) * SLOT_MS // 8)
                )

    friends = [(people[i], people[i + 1]) for i in range(0, players // 10, 2)]
    for p in people:
        deposit(p, START_MS + p.home_hour * HOUR_MS - 600_000)
    for day in range(days):
        for p in people:
            if rng.random() < p.play_days:
                first = (p.home_hour + rng.randint(-2, 2)) % 24
                p.sessions[day] = (first, first + rng.randint(1, 3))
        for hour in range(24):
            for slot in range(HOUR_MS // SLOT_MS):
                at = START_MS + day * 24 * HOUR_MS + hour * HOUR_MS + slot * SLOT_MS
                online = [
                    p
                    for p in people
                    if day in p.sessions and p.sessions[day][0] <= hour < p.sessions[day][1]
                ]
                rng.shuffle(online)
                for stake in STAKES:
                    seated = [p for p in online if p.stake == stake and p.balance >= stake]
                    for a, b in zip(seated[::2], seated[1::2], strict=False):
                        play(a, b, stake, at, private=False)
            for p in people:  # end of a session: broke players may deposit, winners cash out
                if day in p.sessions and p.sessions[day][1] == hour + 1:
                    at = START_MS + day * 24 * HOUR_MS + (hour + 1) * HOUR_MS
                    if p.balance < p.stake and rng.random() < 0.5:
                        deposit(p, at)
                    elif p.balance > 3 * p.deposited_since and rng.random() < 0.3:
                        amount = p.balance - p.stake
                        p.balance -= amount
                        p.deposited_since = 0
                        move(p, "withdrawal", amount, at + rng.randint(60_000, 6 * HOUR_MS))
        for a, b in friends:  # friends meet at a private table a few evenings a week
            if rng.random() < 0.4:
                at = START_MS + day * 24 * HOUR_MS + 20 * HOUR_MS
                for k in range(rng.randint(1, 4)):
                    stake = min(a.stake, b.stake)
                    if a.balance >= stake and b.balance >= stake:
                        play(a, b, stake, at + k * SLOT_MS, private=True)
    return History(pots=pots, moves=moves, timings=timings)


def false_positive_rate(
    seed: int, cfg: IntegrityConfig | None = None, players: int = 300, days: int = 14
) -> tuple[float, Counter[str], int]:
    """(share of honest players named in at least one alert, alerts by kind, matches)."""
    history = honest_history(seed, players, days)
    alerts = detect(history, cfg or IntegrityConfig())
    flagged = {a.player for a in alerts} | {a.counterpart for a in alerts if a.counterpart}
    return len(flagged) / players, Counter(a.kind for a in alerts), len(history.pots)


def main(argv: list[str]) -> int:
    seeds = [int(s) for s in argv] or [1, 2, 3]
    for seed in seeds:
        rate, kinds, matches = false_positive_rate(seed)
        print(f"seed {seed}: {matches} matches, {rate:.2%} of players flagged, {dict(kinds)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
