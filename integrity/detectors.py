"""The detectors: pure functions from a `History` to the alerts it warrants.

Each detector reads only its inputs and the thresholds (`IntegrityConfig`), and names every
alert by a dedup key that stays the same when the same history is scanned again, so a rescan
updates an open alert instead of adding one. Each alert carries the figures that triggered it
next to the thresholds they crossed, and references to its evidence (matches, ledger entries,
pair flows, seat observations).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from integrity.config import IntegrityConfig
from integrity.models import (
    ActionTiming,
    CashierMove,
    EvidenceRef,
    History,
    NewAlert,
    PotRecord,
    SeatSighting,
)

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
MAX_MATCH_EVIDENCE = 40

KINDS = (
    "pair_flow",
    "repeated_losing",
    "chain",
    "little_play",
    "rapid_in_out",
    "structuring",
    "steady_timing",
    "around_clock",
    "shared_device",
    "shared_address",
)


def _month(at_ms: int) -> str:
    return datetime.fromtimestamp(at_ms / 1000, UTC).strftime("%Y-%m")


def _iso(at_ms: int) -> str:
    return datetime.fromtimestamp(at_ms / 1000, UTC).isoformat(timespec="seconds")


def flows_of(pot: PotRecord) -> list[tuple[str, str, int]]:
    """(from, to, cents) of one settled pot: what each winner won from each loser. A winner's
    gain is shared among the losers in proportion to their losses (integer cents, floor)."""
    gains = {s.player: s.payout - s.stake for s in pot.seats if s.payout > s.stake}
    losses = {s.player: s.stake - s.payout for s in pot.seats if s.payout < s.stake}
    total_loss = sum(losses.values())
    if not gains or total_loss <= 0:
        return []
    out = []
    for winner, gain in gains.items():
        for loser, loss in losses.items():
            amount = gain * loss // total_loss
            if amount > 0:
                out.append((loser, winner, amount))
    return out


def _match_ref(pot: PotRecord, **extra: int | str | bool | None) -> EvidenceRef:
    return EvidenceRef(
        kind="match",
        ref=pot.match_id,
        detail={"tier": pot.tier, "private": pot.private, "at": _iso(pot.closed_at_ms), **extra},
    )


def _entry_ref(move: CashierMove) -> EvidenceRef:
    return EvidenceRef(
        kind="entry",
        ref=str(move.entry_id),
        detail={
            "kind": move.kind,
            "player": move.player,
            "amount": move.amount,
            "currency": move.currency,
            "at": _iso(move.at_ms),
        },
    )


def _flow_ref(giver: str, taker: str, currency: str, net_cents: int, matches: int) -> EvidenceRef:
    # the alert route (api.routes_integrity) splits the pair and currency back out of the ref
    return EvidenceRef(
        kind="flow",
        ref=f"{giver}>{taker}:{currency}",
        detail={"net_cents": net_cents, "matches": matches},
    )


@dataclass
class _Pair:
    flow: dict[str, int] = field(default_factory=dict)  # from-player -> cents
    pots: list[tuple[PotRecord, str, int]] = field(default_factory=list)  # pot, from, cents
    matches: set[str] = field(default_factory=set)
    private: set[str] = field(default_factory=set)


def pair_flow(history: History, cfg: IntegrityConfig) -> list[NewAlert]:
    """A pair whose net flow (one's winnings from the other, minus the reverse) over the window
    passes `pair_flow_cents` in one currency, over at least `pair_min_matches` matches."""
    pairs: dict[tuple[str, str, str], _Pair] = defaultdict(_Pair)
    for pot in history.pots:
        for loser, winner, cents in flows_of(pot):
            a, b = sorted((loser, winner))
            pair = pairs[(pot.currency, a, b)]
            pair.flow[loser] = pair.flow.get(loser, 0) + cents
            pair.pots.append((pot, loser, cents))
            pair.matches.add(pot.match_id)
            if pot.private:
                pair.private.add(pot.match_id)
    alerts = []
    for (currency, a, b), pair in sorted(pairs.items()):
        net = pair.flow.get(a, 0) - pair.flow.get(b, 0)  # > 0: money went a -> b
        giver, taker = (a, b) if net > 0 else (b, a)
        net = abs(net)
        gross = pair.flow.get(giver, 0)
        back = pair.flow.get(taker, 0)
        mostly_private = 2 * len(pair.private) >= len(pair.matches)
        needed = cfg.pair_flow_cents * (1 if mostly_private else cfg.pair_public_multiplier)
        if (
            net < needed
            or len(pair.matches) < cfg.pair_min_matches
            or back > cfg.pair_back_share_max * gross
        ):
            continue
        latest = max(p.closed_at_ms for p, _, _ in pair.pots)
        recent = sorted(pair.pots, key=lambda x: x[0].closed_at_ms)[-MAX_MATCH_EVIDENCE:]
        alerts.append(
            NewAlert(
                kind="pair_flow",
                player=taker,
                counterpart=giver,
                dedup_key=f"pair_flow:{currency}:{a}:{b}:{_month(latest)}",
                score=round(net / cfg.pair_flow_cents, 3),
                figures={
                    "currency": currency,
                    "net_cents": net,
                    "from": giver,
                    "to": taker,
                    "gross_from_cents": pair.flow.get(giver, 0),
                    "gross_back_cents": pair.flow.get(taker, 0),
                    "matches": len(pair.matches),
                    "private_matches": len(pair.private),
                    "threshold_cents": needed,
                    "min_matches": cfg.pair_min_matches,
                    "back_share_max": cfg.pair_back_share_max,
                },
                evidence=[
                    _flow_ref(giver, taker, currency, net, len(pair.matches)),
                    *(_match_ref(p, giver=f, cents=c) for p, f, c in recent),
                ],
            )
        )
    return alerts


def repeated_losing(history: History, cfg: IntegrityConfig) -> list[NewAlert]:
    """A player with at least `loss_count_min` losses to one opponent, making at least
    `loss_share_min` of all his losses (counted by match)."""
    losses: dict[tuple[str, str], list[PotRecord]] = defaultdict(list)  # (cur, loser)
    to_whom: dict[tuple[str, str, str], list[PotRecord]] = defaultdict(list)
    met: dict[tuple[str, str, str], int] = defaultdict(int)  # (cur, a, b) sorted: matches
    for pot in history.pots:
        players = sorted({s.player for s in pot.seats})
        for i, a in enumerate(players):
            for b in players[i + 1 :]:
                met[(pot.currency, a, b)] += 1
        seen: set[tuple[str, str]] = set()
        for loser, winner, _ in flows_of(pot):
            if (loser, winner) in seen:
                continue
            seen.add((loser, winner))
            to_whom[(pot.currency, loser, winner)].append(pot)
        for loser in {lo for lo, _, _ in flows_of(pot)}:
            losses[(pot.currency, loser)].append(pot)
    alerts = []
    for (currency, loser, winner), pots in sorted(to_whom.items()):
        total = len(losses[(currency, loser)])
        share = len(pots) / total
        first, second = sorted((loser, winner))
        together = met[(currency, first, second)]
        rate = len(pots) / together
        private = sum(1 for p in pots if p.private)
        count_min = cfg.loss_count_min * (1 if 2 * private >= len(pots) else 2)
        if len(pots) < count_min or share < cfg.loss_share_min or rate < cfg.loss_rate_min:
            continue
        latest = max(p.closed_at_ms for p in pots)
        alerts.append(
            NewAlert(
                kind="repeated_losing",
                player=loser,
                counterpart=winner,
                dedup_key=f"repeated_losing:{currency}:{loser}:{winner}:{_month(latest)}",
                score=round(share / cfg.loss_share_min, 3),
                figures={
                    "currency": currency,
                    "losses_to_opponent": len(pots),
                    "losses": total,
                    "share": round(share, 3),
                    "matches_together": together,
                    "loss_rate": round(rate, 3),
                    "private_matches": private,
                    "count_min": count_min,
                    "share_min": cfg.loss_share_min,
                    "loss_rate_min": cfg.loss_rate_min,
                },
                evidence=[_match_ref(p) for p in pots[-MAX_MATCH_EVIDENCE:]],
            )
        )
    return alerts


def _by_player(moves: Iterable[CashierMove]) -> dict[str, list[CashierMove]]:
    out: dict[str, list[CashierMove]] = defaultdict(list)
    for move in sorted(moves, key=lambda m: (m.at_ms, m.entry_id)):
        out[move.player].append(move)
    return out


def chain(history: History, cfg: IntegrityConfig) -> list[NewAlert]:
    """A deposits, loses at least `chain_min_cents` to B, and B withdraws, each step within
    `chain_window_h` of the one before."""
    window = cfg.chain_window_h * HOUR_MS
    moves = _by_player(history.moves)
    incoming: dict[str, list[tuple[int, str, str, int, PotRecord]]] = defaultdict(list)
    outgoing: dict[str, list[tuple[int, str, int]]] = defaultdict(list)  # loser: (at, cur, cents)
    for pot in history.pots:
        for loser, winner, cents in flows_of(pot):
            incoming[winner].append((pot.closed_at_ms, loser, pot.currency, cents, pot))
            outgoing[loser].append((pot.closed_at_ms, pot.currency, cents))
    alerts = []
    for taker, its_moves in sorted(moves.items()):
        for withdrawal in (m for m in its_moves if m.kind == "withdrawal"):
            by_giver: dict[str, list[tuple[int, int, PotRecord]]] = defaultdict(list)
            for at, giver, currency, cents, pot in incoming.get(taker, []):
                if (
                    currency == withdrawal.currency
                    and withdrawal.at_ms - window <= at <= withdrawal.at_ms
                ):
                    by_giver[giver].append((at, cents, pot))
            for giver, flows in sorted(by_giver.items()):
                first = min(at for at, _, _ in flows)
                deposits = [
                    m
                    for m in moves.get(giver, [])
                    if m.kind == "deposit"
                    and m.currency == withdrawal.currency
                    and first - window <= m.at_ms <= first
                ]
                passed = sum(c for _, c, _ in flows)
                deposited = sum(d.amount for d in deposits)
                if (
                    not deposits
                    or passed < cfg.chain_min_cents
                    or passed < cfg.chain_share_min * deposited
                    or passed < cfg.chain_share_min * withdrawal.amount
                ):
                    continue
                lost = sum(
                    c
                    for at, cur, c in outgoing[giver]
                    if cur == withdrawal.currency and deposits[0].at_ms <= at <= withdrawal.at_ms
                )
                private = sum(1 for _, _, p in flows if p.private)
                concentration = passed / lost if lost else 1.0
                if 2 * private < len(flows) and concentration < cfg.chain_concentration_min:
                    continue
                alerts.append(
                    NewAlert(
                        kind="chain",
                        player=taker,
                        counterpart=giver,
                        dedup_key=f"chain:{giver}:{taker}:{withdrawal.entry_id}",
                        score=round(passed / cfg.chain_min_cents, 3),
                        figures={
                            "currency": withdrawal.currency,
                            "deposited_cents": deposited,
                            "passed_cents": passed,
                            "withdrawn_cents": withdrawal.amount,
                            "hours_deposit_to_withdrawal": round(
                                (withdrawal.at_ms - deposits[0].at_ms) / HOUR_MS, 2
                            ),
                            "matches": len(flows),
                            "private_matches": private,
                            "share_of_giver_losses": round(concentration, 3),
                            "window_h": cfg.chain_window_h,
                            "min_cents": cfg.chain_min_cents,
                            "share_min": cfg.chain_share_min,
                        },
                        evidence=[
                            *(_entry_ref(d) for d in deposits[-10:]),
                            *(_match_ref(p, cents=c) for _, c, p in flows[-MAX_MATCH_EVIDENCE:]),
                            _entry_ref(withdrawal),
                            _flow_ref(giver, taker, withdrawal.currency, passed, len(flows)),
                        ],
                    )
                )
    return alerts


def _stakes(history: History) -> dict[str, list[tuple[int, int]]]:
    out: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for pot in history.pots:
        for seat in pot.seats:
            out[seat.player].append((pot.closed_at_ms, seat.stake))
    return out


def little_play(history: History, cfg: IntegrityConfig) -> list[NewAlert]:
    """A withdrawal after deposits (since the previous withdrawal) of at least
    `little_play_min_cents` were staked less than `turnover_ratio_max` times over."""
    stakes = _stakes(history)
    alerts = []
    for player, moves in sorted(_by_player(history.moves).items()):
        since = None
        for move in moves:
            if move.kind == "deposit":
                continue
            deposits = [
                m
                for m in moves
                if m.kind == "deposit"
                and m.currency == move.currency
                and m.at_ms <= move.at_ms
                and (since is None or m.at_ms > since)
            ]
            since = move.at_ms
            deposited = sum(d.amount for d in deposits)
            if deposited < cfg.little_play_min_cents:
                continue
            staked = sum(
                s for at, s in stakes.get(player, []) if deposits[0].at_ms <= at <= move.at_ms
            )
            ratio = staked / deposited
            if ratio >= cfg.turnover_ratio_max:
                continue
            alerts.append(
                NewAlert(
                    kind="little_play",
                    player=player,
                    dedup_key=f"little_play:{player}:{move.entry_id}",
                    score=round(move.amount / deposited, 3),
                    figures={
                        "currency": move.currency,
                        "deposited_cents": deposited,
                        "staked_cents": staked,
                        "withdrawn_cents": move.amount,
                        "turnover_ratio": round(ratio, 3),
                        "turnover_ratio_max": cfg.turnover_ratio_max,
                    },
                    evidence=[*(_entry_ref(d) for d in deposits[-20:]), _entry_ref(move)],
                )
            )
    return alerts


def rapid_in_out(history: History, cfg: IntegrityConfig) -> list[NewAlert]:
    """A withdrawal within `rapid_minutes` of a deposit of at least `rapid_min_cents`."""
    limit_ms = cfg.rapid_minutes * 60_000
    alerts = []
    for player, moves in sorted(_by_player(history.moves).items()):
        for move in moves:
            if move.kind != "withdrawal":
                continue
            recent = [
                m
                for m in moves
                if m.kind == "deposit"
                and m.currency == move.currency
                and m.amount >= cfg.rapid_min_cents
                and 0 <= move.at_ms - m.at_ms <= limit_ms
            ]
            if not recent:
                continue
            deposit = recent[-1]
            minutes = round((move.at_ms - deposit.at_ms) / 60_000, 1)
            alerts.append(
                NewAlert(
                    kind="rapid_in_out",
                    player=player,
                    dedup_key=f"rapid_in_out:{player}:{move.entry_id}",
                    score=round(cfg.rapid_minutes / max(minutes, 1.0), 3),
                    figures={
                        "currency": move.currency,
                        "deposit_cents": deposit.amount,
                        "withdrawn_cents": move.amount,
                        "minutes": minutes,
                        "rapid_minutes": cfg.rapid_minutes,
                        "min_cents": cfg.rapid_min_cents,
                    },
                    evidence=[_entry_ref(deposit), _entry_ref(move)],
                )
            )
    return alerts


def structuring(history: History, cfg: IntegrityConfig) -> list[NewAlert]:
    """At least `structuring_count` deposits within `structuring_window_h`, each just under the
    reporting threshold T (between (1 - margin) * T and T)."""
    top = cfg.reporting_threshold_cents
    low = top * (1 - cfg.structuring_margin)
    window = cfg.structuring_window_h * HOUR_MS
    alerts = []
    for player, moves in sorted(_by_player(history.moves).items()):
        near = [m for m in moves if m.kind == "deposit" and low <= m.amount < top]
        start = 0
        for end in range(len(near)):
            while near[end].at_ms - near[start].at_ms > window:
                start += 1
            group = near[start : end + 1]
            if len(group) < cfg.structuring_count:
                continue
            # the longest run from this start is reported once, under its first deposit
            if end + 1 < len(near) and near[end + 1].at_ms - near[start].at_ms <= window:
                continue
            alerts.append(
                NewAlert(
                    kind="structuring",
                    player=player,
                    dedup_key=f"structuring:{player}:{group[0].entry_id}",
                    score=round(len(group) / cfg.structuring_count, 3),
                    figures={
                        "currency": group[0].currency,
                        "deposits": len(group),
                        "total_cents": sum(m.amount for m in group),
                        "hours": round((group[-1].at_ms - group[0].at_ms) / HOUR_MS, 2),
                        "reporting_threshold_cents": top,
                        "margin": cfg.structuring_margin,
                        "count_min": cfg.structuring_count,
                        "window_h": cfg.structuring_window_h,
                    },
                    evidence=[_entry_ref(m) for m in group[-50:]],
                )
            )
            start = end + 1
    return alerts


def steady_timing(history: History, cfg: IntegrityConfig) -> list[NewAlert]:
    """A player whose response times vary too little to be a person's: the coefficient of
    variation (standard deviation over mean) under `steady_cv_max` over at least
    `steady_min_actions` actions."""
    by_player: dict[str, list[ActionTiming]] = defaultdict(list)
    for timing in history.timings:
        by_player[timing.player].append(timing)
    alerts = []
    for player, timings in sorted(by_player.items()):
        if len(timings) < cfg.steady_min_actions:
            continue
        deltas = [t.delta_ms for t in timings]
        mean = statistics.fmean(deltas)
        if mean <= 0:
            continue
        cv = statistics.pstdev(deltas) / mean
        if cv >= cfg.steady_cv_max:
            continue
        matches = sorted({t.match_id for t in timings})
        latest = max(t.at_ms for t in timings)
        alerts.append(
            NewAlert(
                kind="steady_timing",
                player=player,
                dedup_key=f"steady_timing:{player}:{_month(latest)}",
                score=round(cfg.steady_cv_max / max(cv, 0.001), 3),
                figures={
                    "actions": len(deltas),
                    "mean_ms": round(mean),
                    "stdev_ms": round(statistics.pstdev(deltas)),
                    "cv": round(cv, 4),
                    "median_ms": round(statistics.median(deltas)),
                    "cv_max": cfg.steady_cv_max,
                    "min_actions": cfg.steady_min_actions,
                },
                evidence=[EvidenceRef(kind="match", ref=m) for m in matches[-MAX_MATCH_EVIDENCE:]],
            )
        )
    return alerts


def around_clock(history: History, cfg: IntegrityConfig) -> list[NewAlert]:
    """A player active (an action or a settled match) in at least `clock_hours_min` distinct
    hours of a rolling 24 h, on at least `clock_days_min` days that do not overlap."""
    hours: dict[str, set[int]] = defaultdict(set)
    for timing in history.timings:
        hours[timing.player].add(timing.at_ms // HOUR_MS)
    for pot in history.pots:
        for seat in pot.seats:
            hours[seat.player].add(pot.closed_at_ms // HOUR_MS)
    alerts = []
    for player, active in sorted(hours.items()):
        ordered = sorted(active)
        days: list[tuple[int, int]] = []  # (first hour, distinct hours) of each busy 24 h
        i = 0
        start = 0
        while i < len(ordered):
            while ordered[i] - ordered[start] >= 24:
                start += 1
            count = i - start + 1
            if count >= cfg.clock_hours_min:
                days.append((ordered[start], count))
                # the next period starts after this one: periods never overlap
                nxt = ordered[start] + 24
                while i < len(ordered) and ordered[i] < nxt:
                    i += 1
                start = i
                continue
            i += 1
        if len(days) < cfg.clock_days_min:
            continue
        alerts.append(
            NewAlert(
                kind="around_clock",
                player=player,
                dedup_key=f"around_clock:{player}:{_month(days[-1][0] * HOUR_MS)}",
                score=round(len(days) / cfg.clock_days_min, 3),
                figures={
                    "busy_days": len(days),
                    "most_hours_in_24h": max(c for _, c in days),
                    "hours_min": cfg.clock_hours_min,
                    "days_min": cfg.clock_days_min,
                },
                evidence=[
                    EvidenceRef(
                        kind="period", ref=_iso(first * HOUR_MS), detail={"active_hours": c}
                    )
                    for first, c in days[-30:]
                ],
            )
        )
    return alerts


def _shared(
    sightings: list[SeatSighting],
    cfg: IntegrityConfig,
    kind: str,
    key: Callable[[SeatSighting], str | None],
) -> list[NewAlert]:
    groups: dict[tuple[str, str], list[SeatSighting]] = defaultdict(list)
    for s in sightings:
        value = key(s)
        if value is not None:
            groups[(s.match_id, value)].append(s)
    alerts = []
    for (match_id, value), seen in sorted(groups.items()):
        players = sorted({s.player for s in seen})
        if len(players) < cfg.shared_accounts_min:
            continue
        alerts.append(
            NewAlert(
                kind=kind,
                player=players[0],
                counterpart=players[1],
                dedup_key=f"{kind}:{match_id}:{value[:16]}",
                score=float(len(players)),
                figures={
                    "accounts": len(players),
                    "players": ",".join(players)[:500],
                    "tier": seen[0].tier,
                    "private": seen[0].private,
                    "accounts_min": cfg.shared_accounts_min,
                },
                evidence=[
                    EvidenceRef(
                        kind="match",
                        ref=match_id,
                        detail={"tier": seen[0].tier, "private": seen[0].private},
                    ),
                    *(
                        EvidenceRef(
                            kind="seat", ref=f"{match_id}:{s.player}", detail={"at": _iso(s.at_ms)}
                        )
                        for s in seen[:16]
                    ),
                ],
            )
        )
    return alerts


def shared_device(history: History, cfg: IntegrityConfig) -> list[NewAlert]:
    """Several accounts at one paid match from one device (the `mesa_device` cookie)."""
    return _shared(history.sightings, cfg, "shared_device", lambda s: s.device_hash)


def shared_address(history: History, cfg: IntegrityConfig) -> list[NewAlert]:
    """Several accounts at one paid match from one client address."""
    return _shared(history.sightings, cfg, "shared_address", lambda s: s.address_hash)


DETECTORS: tuple[Callable[[History, IntegrityConfig], list[NewAlert]], ...] = (
    pair_flow,
    repeated_losing,
    chain,
    little_play,
    rapid_in_out,
    structuring,
    steady_timing,
    around_clock,
    shared_device,
    shared_address,
)


def detect(history: History, cfg: IntegrityConfig) -> list[NewAlert]:
    """Every detector's alerts over one history."""
    return [alert for detector in DETECTORS for alert in detector(history, cfg)]
