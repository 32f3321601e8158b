"""Deliberate losing ("chip dumping"): who hands hands to his rivals more than chance explains.

Pure code: no I/O, no clock, no randomness. `scan_losing(hands)` replays every finished hand
with the real rules core, move by move, and at each decision of a human seat that had a real
choice it asks, for every legal play: does this play hand the hand to the rivals? A play is a
*gift* when, after it, the next rival to play can domino at once with his last tile, or the
play locks the game and the tranque goes to the rivals. The replay judges this on the true
deal (the transcript holds it): the question is what the play did, not what the player could
see. What the player could see enters through the comparison: an honest player cannot see the
rival's last tile, so he gives gifts at the chance rate (about the share of gifting plays among
his legal ones), a player who shares hands with his "rival" gives one whenever he can.

A position counts as an *opportunity* only when some legal play is a gift and the CPU policy
(`services.engine.bots.choose_action`, from the seat's own view) would have played a safe one:
the positions where avoiding the gift is what a plain, sensible player does. Choosing a gift
there is the player's *gift*. The CPU's own gift rate over the same positions is therefore 0
by construction; it is reported as the baseline (`cpu_baseline_rate`) so a reader sees the
yardstick. Each player's score is gifts / opportunities, in [0, 1]; it is compared with the
population of players scanned together (z-score and percentile, over players with at least
`min_opportunities`), and an outlier must also be above the population mean by its Wilson
lower bound, so a handful of unlucky hands does not alert.

Money: each gift carries the hand's stake, whether the table was private and who received it
(the counterpart); findings add the stakes per currency and name the counterpart who received
the most gifts, the signature of two friends moving money.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import msgspec
from msgspec.structs import replace

from services.engine import rules as R
from services.engine.bots import choose_action
from services.engine.rules.tiles import HIGH, parse_tile

__all__ = [
    "GiftEvidence",
    "HandRecord",
    "LosingFinding",
    "LosingReport",
    "MoveRecord",
    "ScanLimits",
    "hand_from_transcript",
    "scan_losing",
]

KIND = "deliberate_losing"


class MoveRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """One player choice, as a transcript's `moves` holds it (`fairness.transcript.Move`)."""

    tile: str
    end: str | None = None
    seat: int | None = None


class HandRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """One finished hand with who sat where and what was at stake.

    `players[s]` is seat s's player id, None for a CPU seat (CPU seats are not scored, but
    can receive gifts). The deal and moves are the transcript's (`hand_from_transcript`)."""

    deal_id: str
    match_id: str
    variant: str
    options: dict[str, Any] = {}
    players: tuple[str | None, ...]
    hands: tuple[tuple[str, ...], ...]
    stock: tuple[str, ...] = ()
    opener: int | None = None
    first_hand: bool = True
    scores: tuple[int, ...] = ()
    moves: tuple[MoveRecord, ...]
    stake_cents: int = 0
    currency: str = "USD"
    private: bool = False


class ScanLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Bounds of one scan; the defaults suit a daily scan."""

    max_hands: int = 200_000
    max_moves_per_hand: int = 120  # a longer transcript is skipped, not judged
    max_positions_per_hand: int = 60
    max_evidence: int = 25  # gifts kept as evidence per player
    min_opportunities: int = 12  # fewer: no z-score, never an outlier
    z_alert: float = 4.0  # gifts above the chance expectation, in standard deviations
    wilson_z: float = 1.96
    std_floor: float = 0.05  # a population with (almost) one rate still needs a real gap


class GiftEvidence(msgspec.Struct, frozen=True):
    deal_id: str
    match_id: str
    move_index: int  # index into the hand's moves
    tile: str
    counterpart: str | None  # the player the gift went to (None: a CPU seat)
    stake_cents: int
    currency: str
    private: bool


class LosingFinding(msgspec.Struct, frozen=True, kw_only=True):
    kind: str = KIND
    player: str
    score: float  # gifts / opportunities, in [0, 1]
    gifts: int
    opportunities: int
    positions: int  # decisions with more than one legal play
    hands: int
    z_score: float | None  # against the population; None below min_opportunities
    percentile: float | None  # share of the population at or below this score
    wilson_low: float  # lower bound of the score's confidence interval
    population_rate: float
    cpu_baseline_rate: float  # the CPU policy's gift rate on the same positions (0)
    chance_rate: float  # expected score of a player choosing at random among his legal plays
    chance_z: float  # (gifts - chance expectation) / its standard deviation
    outlier: bool
    gift_stakes: dict[str, int]  # currency -> cents staked on hands with a gift
    paid_gifts: int  # gifts at tables with a stake
    private_gifts: int
    top_counterpart: str | None
    counterpart_gifts: int  # gifts to top_counterpart
    counterpart_stakes: dict[str, int]  # currency -> cents staked on the gifts to him
    evidence: tuple[GiftEvidence, ...]  # the first `max_evidence` gifts
    deal_ids: tuple[str, ...]  # the evidence's deals, distinct
    dedup_key: str


class LosingReport(msgspec.Struct, frozen=True, kw_only=True):
    hands_scanned: int
    hands_skipped: int  # malformed, too long, or beyond max_hands
    players: int
    population_rate: float
    population_std: float
    cpu_baseline_rate: float
    findings: tuple[LosingFinding, ...]  # every human player, by player id

    @property
    def outliers(self) -> tuple[LosingFinding, ...]:
        return tuple(f for f in self.findings if f.outlier)


def hand_from_transcript(
    transcript: Any,
    *,
    match_id: str,
    stake_cents: int = 0,
    currency: str = "USD",
    private: bool = False,
) -> HandRecord:
    """A `HandRecord` from a `fairness.transcript.Transcript` (variant, options and seated
    players come from its signed commitment record) and the table's money context."""
    record = transcript.commitment.record
    seats = sorted(record.get("seats") or [], key=lambda s: int(s.get("seat", 0)))
    return HandRecord(
        deal_id=transcript.deal_id,
        match_id=match_id,
        variant=str(record["variant"]),
        options=dict(record.get("options") or {}),
        players=tuple(s.get("player") for s in seats),
        hands=tuple(tuple(h) for h in transcript.deal.hands),
        stock=tuple(transcript.deal.stock),
        opener=transcript.opener,
        first_hand=transcript.first_hand,
        scores=tuple(transcript.scores),
        moves=tuple(MoveRecord(m.tile, m.end, m.seat) for m in transcript.moves),
        stake_cents=stake_cents,
        currency=currency,
        private=private,
    )


class _Tally:
    __slots__ = (
        "chance",
        "chance_var",
        "counterpart_stakes",
        "counterparts",
        "paid",
        "evidence",
        "gifts",
        "hands",
        "opps",
        "positions",
        "stakes",
    )

    def __init__(self) -> None:
        self.chance = 0.0  # expected gifts of a random chooser at the same opportunities
        self.chance_var = 0.0
        self.gifts = 0
        self.opps = 0
        self.positions = 0
        self.hands = 0
        self.stakes: dict[str, int] = {}
        self.counterparts: dict[str | None, int] = {}
        self.counterpart_stakes: dict[tuple[str | None, str], int] = {}
        self.paid = 0
        self.evidence: list[GiftEvidence] = []


class _BadHand(Exception):
    pass


def _start(h: HandRecord) -> R.HandState:
    try:
        rules = R.make_ruleset(h.variant, dict(h.options))
        hands = [[parse_tile(t, rules.max_pip)[0] for t in hand] for hand in h.hands]
        stock = [parse_tile(t, rules.max_pip)[0] for t in h.stock]
        scores = h.scores or (0,) * rules.sides
        if len(h.players) != rules.seats or len(scores) != rules.sides:
            raise _BadHand("seats or scores do not fit the variant")
        match = replace(
            R.new_match(rules), scores=tuple(scores), hands_played=0 if h.first_hand else 1
        )
        return R.start_hand(match, hands, stock, opener=h.opener)
    except (R.RulesError, ValueError, TypeError) as exc:
        raise _BadHand(str(exc)) from None


def _action(state: R.HandState, move: MoveRecord, opening_flip: bool | None = None) -> R.Play:
    """The Play a transcript move stands for (the same reading as `mesa rules replay`); the
    opening tile's way round is `opening_flip` when known (`_opening_flip`)."""
    try:
        t, a, _b = parse_tile(move.tile, state.rules.max_pip)
    except ValueError as exc:
        raise _BadHand(str(exc)) from None
    if move.seat is not None and move.seat != state.turn:
        raise _BadHand("move by a seat not on turn")
    if state.left < 0:
        return R.Play(t, R.NO_END, flip=a != HIGH[t] if opening_flip is None else opening_flip)
    if move.end is not None:
        return R.Play(t, R.LEFT if move.end == "left" else R.RIGHT)
    for act in R.legal_actions(state):
        if isinstance(act, R.Play) and act.tile == t:
            return act
    raise _BadHand("a move that fits neither end")


def _winner(state: R.HandState, limit: int) -> tuple[int | None, int | None]:
    """(winning side, winning seat) of the hand played out from `state` with every seat
    playing the engine's timed-out move (`heaviest_playable`), on the true deal: a fixed,
    plain continuation, so the only thing that differs between two plays is the play."""
    for _ in range(limit):
        if state.phase != R.PHASE_PLAY:
            break
        play = R.heaviest_playable(state)
        if play is None:
            break
        state, _ = R.apply(state, play)
    res = state.result
    if state.phase != R.PHASE_OVER or res is None:
        return None, None
    side = res.match_winner_side if res.end == "target" else res.winner_side
    return side, res.winner_seat


def _gift_to(state: R.HandState, seat: int, action: R.Action, limit: int) -> int | None:
    """The rival seat this play hands the hand to (it dominoes, or takes the tranque, in the
    plain continuation), or None when the hand does not go to the rivals."""
    rules = state.rules
    side, winner = _winner(R.apply(state, action)[0], limit)
    if side is None or side == rules.side_of(seat):
        return None
    if winner is not None:
        return winner
    return next(s for s in range(rules.seats) if rules.side_of(s) == side)


def _opening_flip(h: HandRecord, start: R.HandState) -> bool | None:
    """Which way round the opening tile lay: the transcript names it without its orientation,
    and the later moves' ends say it. The first way the whole hand replays legally; None if
    neither does (the hand is then refused as malformed)."""
    for flip in (False, True):
        state = start
        try:
            for move in h.moves:
                state, _ = R.apply(state, _action(state, move, flip))
        except (_BadHand, R.RulesError):
            continue
        return flip
    return None


def _judge_hand(h: HandRecord, limits: ScanLimits, tallies: dict[str, _Tally]) -> None:
    state = _start(h)
    flip = _opening_flip(h, state)
    if flip is None:
        raise _BadHand("the moves do not replay either way round")
    limit = len(R.tile_set(state.rules.max_pip))  # each step of a continuation places a tile
    seen: set[str] = set()
    positions = 0
    for i, move in enumerate(h.moves):
        if state.phase != R.PHASE_PLAY:
            raise _BadHand("moves after the end of the hand")
        seat = state.turn
        action = _action(state, move, flip)
        player = h.players[seat]
        if player is not None and state.left >= 0 and positions < limits.max_positions_per_hand:
            legal = [a for a in R.legal_actions(state) if isinstance(a, R.Play)]
            judged = action
            if action not in legal:
                # When both ends show the same number the rules list the tile once (on the
                # left); the engine takes it on either end, and the two are mirror positions
                # of one another: judge it as the listed one, play it as it was played.
                same = [a for a in legal if a.tile == action.tile]
                if not same or state.left != state.right:
                    raise _BadHand("an illegal move")
                judged = same[0]
            if len(legal) > 1:
                positions += 1
                tally = tallies.setdefault(player, _Tally())
                tally.positions += 1
                if player not in seen:
                    seen.add(player)
                    tally.hands += 1
                gifts = {a: _gift_to(state, seat, a, limit) for a in legal}
                if any(g is not None for g in gifts.values()):
                    cpu = choose_action(R.view(state, seat), state.rules, tuple(legal))
                    if not isinstance(cpu, R.Play) or gifts.get(cpu) is None:
                        tally.opps += 1
                        c = sum(1 for g in gifts.values() if g is not None) / len(legal)
                        tally.chance += c
                        tally.chance_var += c * (1 - c)
                        to = gifts[judged]
                        if to is not None:
                            _record_gift(h, i, move, h.players[to], tally, limits)
        try:
            state, _ = R.apply(state, action)
        except R.RulesError as exc:
            raise _BadHand(str(exc)) from None
    if state.phase != R.PHASE_OVER:
        raise _BadHand("the hand is not finished")


def _record_gift(
    h: HandRecord,
    index: int,
    move: MoveRecord,
    counterpart: str | None,
    tally: _Tally,
    limits: ScanLimits,
) -> None:
    tally.gifts += 1
    tally.stakes[h.currency] = tally.stakes.get(h.currency, 0) + h.stake_cents
    tally.counterparts[counterpart] = tally.counterparts.get(counterpart, 0) + 1
    key = (counterpart, h.currency)
    tally.counterpart_stakes[key] = tally.counterpart_stakes.get(key, 0) + h.stake_cents
    if h.stake_cents > 0:
        tally.paid += 1
    if len(tally.evidence) < limits.max_evidence:
        tally.evidence.append(
            GiftEvidence(
                deal_id=h.deal_id,
                match_id=h.match_id,
                move_index=index,
                tile=move.tile,
                counterpart=counterpart,
                stake_cents=h.stake_cents,
                currency=h.currency,
                private=h.private,
            )
        )


def wilson_low(successes: int, trials: int, z: float = 1.96) -> float:
    """Lower bound of the Wilson score interval of successes / trials (0 with no trials)."""
    if trials <= 0:
        return 0.0
    p = successes / trials
    z2 = z * z
    centre = p + z2 / (2 * trials)
    margin = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials))
    return max(0.0, (centre - margin) / (1 + z2 / trials))


def scan_losing(hands: Iterable[HandRecord], limits: ScanLimits | None = None) -> LosingReport:
    """Score every human player of `hands` (at most `limits.max_hands`) for deliberate losing.

    Deterministic: the same hands in the same order give the same report."""
    lim = limits or ScanLimits()
    tallies: dict[str, _Tally] = {}
    private_gifts: dict[str, int] = {}
    scanned = skipped = 0
    for n, h in enumerate(hands):
        if n >= lim.max_hands:
            skipped += 1
            continue
        if len(h.moves) > lim.max_moves_per_hand:
            skipped += 1
            continue
        # Judged into a scratch copy first: a hand that turns out malformed halfway adds
        # nothing.
        scratch: dict[str, _Tally] = {}
        try:
            _judge_hand(h, lim, scratch)
        except _BadHand:
            skipped += 1
            continue
        scanned += 1
        for player, t in scratch.items():
            into = tallies.setdefault(player, _Tally())
            into.gifts += t.gifts
            into.opps += t.opps
            into.chance += t.chance
            into.chance_var += t.chance_var
            into.positions += t.positions
            into.hands += t.hands
            for cur, cents in t.stakes.items():
                into.stakes[cur] = into.stakes.get(cur, 0) + cents
            for who, k in t.counterparts.items():
                into.counterparts[who] = into.counterparts.get(who, 0) + k
            for key, cents in t.counterpart_stakes.items():
                into.counterpart_stakes[key] = into.counterpart_stakes.get(key, 0) + cents
            into.paid += t.paid
            room = lim.max_evidence - len(into.evidence)
            into.evidence.extend(t.evidence[: max(room, 0)])
            if h.private and t.gifts:
                private_gifts[player] = private_gifts.get(player, 0) + t.gifts
    rates = sorted(t.gifts / t.opps for t in tallies.values() if t.opps >= lim.min_opportunities)
    mean = sum(rates) / len(rates) if rates else 0.0
    var = sum((r - mean) ** 2 for r in rates) / len(rates) if rates else 0.0
    std = math.sqrt(var)
    spread = max(std, lim.std_floor)
    findings = []
    for player in sorted(tallies):
        t = tallies[player]
        score = t.gifts / t.opps if t.opps else 0.0
        low = wilson_low(t.gifts, t.opps, lim.wilson_z)
        z: float | None = None
        pct: float | None = None
        if t.opps >= lim.min_opportunities and rates:
            z = (score - mean) / spread
            pct = sum(1 for r in rates if r <= score) / len(rates)
        chance_z = (t.gifts - t.chance) / math.sqrt(t.chance_var) if t.chance_var > 0 else 0.0
        named = {k: v for k, v in t.counterparts.items() if k is not None}
        top = min(named, key=lambda k: (-named[k], k)) if named else None
        findings.append(
            LosingFinding(
                player=player,
                score=score,
                gifts=t.gifts,
                opportunities=t.opps,
                positions=t.positions,
                hands=t.hands,
                z_score=z,
                percentile=pct,
                wilson_low=low,
                population_rate=mean,
                cpu_baseline_rate=0.0,
                chance_rate=t.chance / t.opps if t.opps else 0.0,
                chance_z=chance_z,
                outlier=z is not None and chance_z >= lim.z_alert and low > mean,
                gift_stakes=dict(sorted(t.stakes.items())),
                paid_gifts=t.paid,
                private_gifts=private_gifts.get(player, 0),
                top_counterpart=top,
                counterpart_gifts=named.get(top, 0) if top is not None else 0,
                counterpart_stakes=dict(
                    sorted(
                        (cur, cents)
                        for (who, cur), cents in t.counterpart_stakes.items()
                        if top is not None and who == top
                    )
                ),
                evidence=tuple(t.evidence),
                deal_ids=tuple(dict.fromkeys(e.deal_id for e in t.evidence)),
                dedup_key=f"{KIND}:{player}",
            )
        )
    return LosingReport(
        hands_scanned=scanned,
        hands_skipped=skipped,
        players=len(tallies),
        population_rate=mean,
        population_std=std,
        cpu_baseline_rate=0.0,
        findings=tuple(findings),
    )
