"""One match as a deterministic state machine over its log records (no I/O, no clock).

The actor (services.engine.actor) validates an input with `check_*` (raises ServiceError,
nothing changes), persists the record, then `apply`s it. Restoring after a restart applies
the same records in order and reaches the same state; every time comes from the records.
Randomness enters only through `open` records (the server seed, drawn by the actor).

Records are the tagged union of services.engine.records (open, commit, reveal, close_commit,
close_reveal, act, claim, leave, void, settled), each with `at_ms`, the server time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec

from fairness.commitments import SeedRound, SeedRoundResult
from fairness.flow import OpenDeal, close_deal, make_deal, void_deal
from fairness.keys import OperatorKey
from fairness.shuffle import cuban_draw, pares_o_nones
from services.common.errors import ServiceError, bad_request, conflict
from services.engine import bots
from services.engine import records as L
from services.engine import rules as R
from services.engine.contract import (
    CreateMatch,
    Deadline,
    FeedEvent,
    MatchResult,
    PublicMatchState,
    SeatInfo,
    SeatSnapshot,
)
from services.engine.rules.tiles import tiles_of

# Timers (server clock).
SEED_COMMIT_TIMEOUT_MS = 15_000
SEED_REVEAL_TIMEOUT_MS = 15_000
CHOOSE_TIMEOUT_MS = 20_000
ABANDON_AFTER_MS = 300_000  # a human on turn this long without a move: a bot takes the seat
# Limits.
MAX_SEATS = 4
MAX_EVENTS_PER_MATCH = 20_000

STATUS_SEEDING = "seeding"
STATUS_PLAYING = "playing"
STATUS_FINISHED = "finished"
STATUS_VOID = "void"

_END_NAMES = {R.LEFT: "left", R.RIGHT: "right", R.NO_END: None}


def _time(at_ms: int) -> datetime:
    return datetime.fromtimestamp(at_ms / 1000, tz=UTC)


def tile_text(t: int) -> str:
    return R.tile_str(t)


@dataclass
class Seat:
    seat: int
    player_id: str | None
    bot: bool
    left: bool = False

    @property
    def human(self) -> bool:
        return not self.bot and not self.left


@dataclass
class Round:
    """One committed random draw: a deal, the Cuban draw or pares o nones."""

    purpose: str
    opened: OpenDeal
    seeds: SeedRound
    active: tuple[int, ...]  # seats expected to give a seed
    commit_deadline_ms: int
    reveal_deadline_ms: int | None = None
    result: SeedRoundResult | None = None


class StoredEvent(msgspec.Struct, gc=False):
    """One feed event. Untracked by the garbage collector (`gc=False`: it never takes part in
    a reference cycle): a live match holds thousands of them, and every tracked object adds to
    each full collection, a pause of the whole event loop
    (docs/decisions/0011-garbage-collector-schedule.md)."""

    seq: int
    kind: str
    at_ms: int
    public: dict[str, Any]
    private: dict[int, dict[str, Any]] | None = None

    def for_seat(self, seat: int | None) -> FeedEvent:
        data = dict(self.public)
        if self.private is not None and seat is not None and seat in self.private:
            data.update(self.private[seat])
        return FeedEvent(seq=self.seq, kind=self.kind, at_ms=self.at_ms, data=data)


@dataclass
class Match:
    spec: CreateMatch
    rules: R.RuleSet
    key: OperatorKey
    seats: list[Seat]
    created_ms: int
    seq: int = 0
    log_no: int = 0
    status: str = STATUS_SEEDING
    state: R.MatchState | None = None
    hand: R.HandState | None = None
    hand_no: int = 0  # hands dealt and played to the end (redeals not counted)
    round: Round | None = None
    opening_side: int | None = None
    deal_count: int = 0
    moves: list[dict[str, Any]] = field(default_factory=list)
    events: list[StoredEvent] = field(default_factory=list)
    since_ms: int = 0  # when the awaited decision became awaited
    outbox: list[dict[str, Any]] = field(default_factory=list)  # fairness records to log
    result: MatchResult | None = None
    settled: bool = False

    # ------------------------------------------------------------------ construction

    @classmethod
    def create(cls, spec: CreateMatch, key: OperatorKey, at_ms: int) -> Match:
        rules = validate_spec(spec)
        seats = [Seat(s.seat, s.player_id, s.bot) for s in sorted(spec.seats, key=lambda s: s.seat)]
        m = cls(spec=spec, rules=rules, key=key, seats=seats, created_ms=at_ms, since_ms=at_ms)
        m.state = R.new_match(rules)
        m._emit(
            "match_created",
            at_ms,
            {"variant": spec.variant, "options": spec.options, "seats": m.seat_infos_json()},
        )
        m.log_no = 1
        return m

    # ------------------------------------------------------------------ helpers

    def seat_infos(self) -> list[SeatInfo]:
        return [SeatInfo(s.seat, s.player_id, s.bot or s.left, s.left) for s in self.seats]

    def seat_infos_json(self) -> list[dict[str, Any]]:
        return [msgspec.to_builtins(s) for s in self.seat_infos()]

    @property
    def over(self) -> bool:
        return self.status in (STATUS_FINISHED, STATUS_VOID)

    def humans(self) -> list[int]:
        return [s.seat for s in self.seats if s.human]

    @property
    def claimable(self) -> bool:
        """The other side may claim the match from a seat that sits on its turn too long
        (a match played turn by turn never)."""
        return self.rules.claim_after_ms > 0 and not self.spec.turn_by_turn

    def is_bot(self, seat: int) -> bool:
        s = self.seats[seat]
        return s.bot or s.left

    def _emit(
        self,
        kind: str,
        at_ms: int,
        public: dict[str, Any],
        private: dict[int, dict[str, Any]] | None = None,
    ) -> None:
        if len(self.events) >= MAX_EVENTS_PER_MATCH:
            raise RuntimeError("match event limit reached")
        self.events.append(StoredEvent(self.seq, kind, at_ms, public, private))

    def events_after(
        self, seat: int | None, after: int, limit: int
    ) -> tuple[list[FeedEvent], bool]:
        # events are in seq order: find the first with seq > after by bisection
        lo, hi = 0, len(self.events)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.events[mid].seq <= after:
                lo = mid + 1
            else:
                hi = mid
        chunk = self.events[lo : lo + limit]
        return [e.for_seat(seat) for e in chunk], lo + limit < len(self.events)

    # ------------------------------------------------------------------ what the match awaits

    def awaiting(self) -> tuple[str, tuple[int, ...]]:
        """(kind, seats) of the decision the match waits for."""
        if self.over:
            return "none", ()
        rnd = self.round
        if rnd is not None and rnd.result is None:
            done = rnd.seeds.commitments()
            if rnd.seeds.phase == "commit":
                return "seed_commit", tuple(s for s in rnd.active if s not in done)
            revealed = self._revealed(rnd)
            return "seed_reveal", tuple(s for s in done if s not in revealed)
        if self.hand is not None and self.hand.phase in (R.PHASE_PLAY, R.PHASE_CHOOSE):
            kind = "turn" if self.hand.phase == R.PHASE_PLAY else "choose"
            return kind, R.awaiting(self.hand)
        return "deal", ()

    @staticmethod
    def _revealed(rnd: Round) -> set[int]:
        # SeedRound keeps its seeds private; count them through its public API
        return set(getattr(rnd.seeds, "_seeds", {}).keys())

    def deadline(self) -> Deadline | None:
        kind, seats = self.awaiting()
        rnd = self.round
        if kind == "seed_commit" and rnd is not None:
            return Deadline("seed_commit", rnd.commit_deadline_ms, list(seats))
        if kind == "seed_reveal" and rnd is not None and rnd.reveal_deadline_ms is not None:
            return Deadline("seed_reveal", rnd.reveal_deadline_ms, list(seats))
        if kind == "choose":
            return Deadline("choose", self.since_ms + CHOOSE_TIMEOUT_MS, list(seats))
        if kind == "turn":
            humans = [s for s in seats if not self.is_bot(s)]
            if not humans:
                return None
            if self.rules.turn_timeout_ms:
                return Deadline("turn", self.since_ms + self.rules.turn_timeout_ms, humans)
            if self.claimable:
                return Deadline("claim", self.since_ms + self.rules.claim_after_ms, humans)
            return Deadline("abandon", self.since_ms + ABANDON_AFTER_MS, humans)
        return None

    def next_timer_ms(self) -> int | None:
        """When the engine itself must act next (a claim deadline needs no engine step)."""
        d = self.deadline()
        if d is None:
            return None
        if d.kind == "claim":
            return self.since_ms + ABANDON_AFTER_MS
        return d.at_ms

    def due_step(self, now_ms: int) -> L.Record | None:
        """The record the engine must write now without any input (bots, timeouts), or None.
        A new deal needs randomness: the actor handles kind "deal" itself."""
        kind, seats = self.awaiting()
        if kind in ("none", "deal"):
            return None
        rnd = self.round
        if kind == "seed_commit" and rnd is not None:
            if now_ms >= rnd.commit_deadline_ms:
                return L.CloseCommit(at_ms=now_ms)
            return None
        if kind == "seed_reveal" and rnd is not None:
            if rnd.reveal_deadline_ms is not None and now_ms >= rnd.reveal_deadline_ms:
                return L.CloseReveal(at_ms=now_ms)
            return None
        hand = self.hand
        if hand is None:
            return None
        for s in seats:
            if self.is_bot(s):
                legal = R.legal_actions(hand, s)
                if legal:
                    action = bots.choose_action(R.view(hand, s), self.rules, legal)
                    return L.Act(at_ms=now_ms, seat=s, action=action, by="bot")
        if kind == "choose" and now_ms >= self.since_ms + CHOOSE_TIMEOUT_MS:
            # a silent seat counts as "Sal tú"
            action = R.ChooseOpener(seats[0], False)
            return L.Act(at_ms=now_ms, seat=seats[0], action=action, by="timeout")
        if kind == "turn":
            seat = seats[0]
            timeout_ms = self.rules.turn_timeout_ms
            if timeout_ms and now_ms >= self.since_ms + timeout_ms:
                play = R.heaviest_playable(hand)
                if play is not None:
                    return L.Act(at_ms=now_ms, seat=seat, action=play, by="timeout")
            if now_ms >= self.since_ms + ABANDON_AFTER_MS:
                return L.Leave(at_ms=now_ms, seat=seat, why="abandoned")
        return None

    def needs_deal(self) -> str | None:
        """The purpose of the next committed draw the match needs, or None."""
        if self.over or self.state is None:
            return None
        if self.round is not None and self.round.result is None:
            return None
        if self.hand is not None and self.hand.phase in (R.PHASE_PLAY, R.PHASE_CHOOSE):
            return None
        if R.needs_opening_side(self.state) and self.opening_side is None:
            return "pares_o_nones" if self.rules.series_best_of > 1 else "cuban_draw"
        return "deal"

    def next_deal_id(self, purpose: str) -> str:
        return f"{self.spec.match_id}.{self.deal_count + 1}.{purpose}"

    # ------------------------------------------------------------------ input checks

    def check_submit(
        self, seat: int, seq: int, action: Any, player_id: str | None, at_ms: int
    ) -> L.Record:
        """Validate a player's action made at `at_ms`; return its record. Raises ServiceError,
        changes nothing."""
        from services.engine import contract as C

        if not 0 <= seat < len(self.seats):
            raise bad_request("bad_seat", f"no seat {seat} at this table")
        st = self.seats[seat]
        if player_id is not None and st.player_id != player_id:
            raise bad_request("bad_seat", f"seat {seat} is not {player_id}'s")
        if seq != self.seq:
            raise conflict(
                "stale_seq", f"action made against seq {seq}, the match is at {self.seq}"
            )
        if self.over:
            raise conflict("match_over", "the match is over")
        if st.left:
            raise conflict("seat_left", f"seat {seat}'s player left the match")
        if st.bot:
            raise conflict("not_your_turn", f"seat {seat} is played by the house")
        if isinstance(action, C.LeaveAction):
            return L.Leave(at_ms=at_ms, seat=seat, why="left")
        if isinstance(action, C.ClaimAction):
            self._check_claim(seat)
            return L.Claim(at_ms=at_ms, seat=seat)
        rnd = self.round
        if isinstance(action, C.SeedCommitAction):
            if rnd is None or rnd.result is not None or rnd.seeds.phase != "commit":
                raise conflict("wrong_phase", "no seed commitment is expected now")
            if seat not in rnd.active or seat in rnd.seeds.commitments():
                raise conflict("wrong_phase", f"seat {seat} has no commitment to give")
            c = action.commitment.lower()
            if len(c) != 64 or any(ch not in "0123456789abcdef" for ch in c):
                raise bad_request("bad_commitment", "commitment must be 64 hex digits")
            return L.Commit(at_ms=at_ms, seat=seat, commitment=c)
        if isinstance(action, C.SeedRevealAction):
            if rnd is None or rnd.result is not None or rnd.seeds.phase != "reveal":
                raise conflict("wrong_phase", "no seed reveal is expected now")
            commits = rnd.seeds.commitments()
            if seat not in commits or seat in self._revealed(rnd):
                raise conflict("wrong_phase", f"seat {seat} has no seed to reveal")
            from fairness.commitments import player_seed_commitment
            from fairness.shuffle import FairnessInputError

            try:
                if player_seed_commitment(action.seed) != commits[seat]:
                    raise conflict("seed_mismatch", "SHA-256 of the seed is not the commitment")
            except FairnessInputError as exc:
                raise bad_request("bad_seed", str(exc)) from None
            return L.Reveal(at_ms=at_ms, seat=seat, seed=action.seed)
        hand = self.hand
        if (
            hand is None
            or hand.phase not in (R.PHASE_PLAY, R.PHASE_CHOOSE)
            or (rnd is not None and rnd.result is None)
        ):
            raise conflict("wrong_phase", "no hand is being played")
        rule_action: R.Action
        if isinstance(action, C.PlayAction):
            try:
                t, _, _ = R.parse_tile(action.tile, self.rules.max_pip)
            except ValueError as exc:
                raise bad_request("bad_tile", str(exc)) from None
            if hand.phase != R.PHASE_PLAY or hand.turn != seat:
                raise conflict("not_your_turn", f"seat {seat} is not on turn")
            if not hand.hands[seat] >> t & 1:
                raise conflict("illegal_action", f"{action.tile} is not in seat {seat}'s hand")
            end = R.RIGHT if action.end == "right" else R.LEFT
            if hand.left < 0:
                end = R.NO_END
            elif action.end is None:
                fits_left = R.Play(t, R.LEFT) in R.legal_actions(hand)
                end = R.LEFT if fits_left else R.RIGHT
            rule_action = R.Play(t, end)
        elif isinstance(action, C.ChooseAction):
            rule_action = R.ChooseOpener(seat, action.salgo)
        elif isinstance(action, C.RedealAction):
            rule_action = R.RequestRedeal(seat)
        else:
            raise bad_request("bad_action", "unknown action")
        legal = R.legal_actions(hand, seat)
        if isinstance(rule_action, R.Play) and hand.left < 0:
            ok = any(isinstance(a, R.Play) and a.tile == rule_action.tile for a in legal)
        else:
            ok = rule_action in legal
        if not ok:
            if seat not in R.awaiting(hand) and not isinstance(rule_action, R.RequestRedeal):
                raise conflict("not_your_turn", f"seat {seat} is not on turn")
            raise conflict("illegal_action", "that action is not legal now")
        return L.Act(at_ms=at_ms, seat=seat, action=rule_action, by="player")

    def _check_claim(self, seat: int) -> None:
        if not self.claimable:
            raise conflict("claim_not_allowed", "this match cannot be claimed")
        d = self.deadline()
        if d is None or d.kind != "claim":
            raise conflict("claim_not_allowed", "nobody is on turn")
        if self.hand is None or R.side_on_turn(self.hand) == self.rules.side_of(seat):
            raise conflict("claim_not_allowed", "only the other side can claim")

    def check_claim_time(self, seat: int, now_ms: int) -> None:
        self._check_claim(seat)
        if now_ms < self.since_ms + self.rules.claim_after_ms:
            raise conflict("claim_not_allowed", "the player on turn still has time")

    # ------------------------------------------------------------------ applying records

    def apply(self, rec: L.Record) -> None:
        """Apply one persisted record (live or during restore)."""
        at = rec.at_ms
        self.log_no += 1
        if isinstance(rec, L.Settled):
            self.settled = True
            self.seq += 1
            if self.result is not None:
                self.result = msgspec.structs.replace(self.result, settled=True)
            self._emit("settled", at, {})
            return
        self.seq += 1
        before = self.awaiting()
        if isinstance(rec, L.Open):
            self._open(rec, at)
        elif isinstance(rec, L.Commit):
            self._commit(rec, at)
        elif isinstance(rec, L.Reveal):
            self._reveal(rec, at)
        elif isinstance(rec, L.CloseCommit):
            self._close_commit(at)
        elif isinstance(rec, L.CloseReveal):
            self._finish_round(at)
        elif isinstance(rec, L.Act):
            self._act(rec, at)
        elif isinstance(rec, L.Claim):
            self._claim(rec, at)
        elif isinstance(rec, L.Leave):
            self._leave(rec, at)
        elif isinstance(rec, L.Void):
            self._void(rec.reason, at)
        else:
            raise ValueError(f"unknown record {rec!r}")
        if self.awaiting() != before:
            self.since_ms = at

    def _open(self, rec: L.Open, at: int) -> None:
        purpose = rec.purpose
        opened = OpenDeal(rec.deal_id, bytes.fromhex(rec.server_seed), rec.commitment)
        self.outbox.append(rec.commitment)
        self.deal_count += 1
        active = tuple(self.humans())
        rnd = Round(
            purpose, opened, SeedRound(len(self.seats)), active, at + SEED_COMMIT_TIMEOUT_MS
        )
        self.round = rnd
        self.status = STATUS_SEEDING if self.hand_no == 0 else self.status
        self._emit(
            "deal_commitment",
            at,
            {
                "deal_id": opened.deal_id,
                "purpose": purpose,
                "commitment": opened.commitment,
                "seed_seats": list(active),
                "commit_deadline_ms": rnd.commit_deadline_ms,
            },
        )
        if not active:
            self._finish_round(at)

    def _commit(self, rec: L.Commit, at: int) -> None:
        rnd = self._round()
        seat = rec.seat
        rnd.seeds.commit(seat, rec.commitment)
        self._emit("seed_committed", at, {"seat": seat})
        if set(rnd.active) <= set(rnd.seeds.commitments()):
            self._close_commit(at)

    def _close_commit(self, at: int) -> None:
        rnd = self._round()
        rnd.seeds.open_reveals()
        rnd.reveal_deadline_ms = at + SEED_REVEAL_TIMEOUT_MS
        commitments = rnd.seeds.commitments()
        self._emit(
            "seed_reveals_open",
            at,
            {
                "deal_id": rnd.opened.deal_id,
                "commitments": {str(s): c for s, c in sorted(commitments.items())},
                "reveal_deadline_ms": rnd.reveal_deadline_ms,
            },
        )
        if not commitments:
            self._finish_round(at)

    def _reveal(self, rec: L.Reveal, at: int) -> None:
        rnd = self._round()
        seat = rec.seat
        rnd.seeds.reveal(seat, rec.seed)
        self._emit("seed_revealed", at, {"seat": seat})
        if rnd.seeds.all_revealed:
            self._finish_round(at)

    def _round(self) -> Round:
        if self.round is None:
            raise ValueError("no seed round open")
        return self.round

    def _finish_round(self, at: int) -> None:
        rnd = self._round()
        res = rnd.seeds.close()
        rnd.result = res
        opened = rnd.opened
        seeds_json = [e.to_json() for e in res.entries]
        if rnd.purpose in ("cuban_draw", "pares_o_nones"):
            if rnd.purpose == "cuban_draw":
                side, rounds = cuban_draw(opened.server_seed, opened.deal_id, res.seeds)
                detail: dict[str, Any] = {
                    "opening_side": side,
                    "rounds": [list(map(list, r)) for r in rounds],
                }
            else:
                side, fingers = pares_o_nones(opened.server_seed, opened.deal_id, res.seeds)
                detail = {"opening_side": side, "fingers": list(fingers)}
            self.opening_side = side
            self.outbox.append(close_deal(self.key, opened, res, [], detail, _time(at)))
            self._emit(
                "opening_draw",
                at,
                {
                    "deal_id": opened.deal_id,
                    "purpose": rnd.purpose,
                    "server_seed": opened.server_seed.hex(),
                    "seeds": seeds_json,
                    **detail,
                },
            )
            return
        if self.state is None:
            raise ValueError("match state missing")
        d = make_deal(opened, res)
        hands = [[R.tile(a, b) for a, b in h] for h in d.hands]
        stock = [R.tile(a, b) for a, b in d.stock]
        opening: int | None = None
        if R.needs_opening_side(self.state):
            opening = self.opening_side
        try:
            self.hand = R.start_hand(self.state, hands, stock, opening_side=opening)
        except R.RulesError as exc:
            self.outbox.append(void_deal(self.key, opened, "engine_error", _time(at)))
            self._void(f"cannot start the hand: {exc.code}", at)
            return
        self.moves = []
        self.status = STATUS_PLAYING
        self._emit(
            "hand_started",
            at,
            {
                "deal_id": opened.deal_id,
                "hand_no": self.hand_no + 1,
                "seeds": seeds_json,
                "opener": self.hand.opener,
                "opening_side": self.hand.setup.opening_side,
                "turn": self.hand.turn,
                "phase": self.hand.phase,
                "counts": [len(h) for h in hands],
                "stock_count": len(stock) if self.rules.draws else 0,
            },
            {s: {"tiles": [tile_text(t) for t in sorted(hands[s])]} for s in range(len(hands))},
        )

    def _act(self, rec: L.Act, at: int) -> None:
        hand = self.hand
        if hand is None:
            raise ValueError("no hand")
        seat = rec.seat
        action = rec.action
        if not isinstance(action, R.Play) and action.seat != seat:
            raise ValueError(f"an action of seat {action.seat} recorded for seat {seat}")
        hand, evs = R.apply(hand, action)
        self.hand = hand
        if isinstance(action, R.Play):
            end = _END_NAMES.get(action.end) if self.moves else None
            mv: dict[str, Any] = {"tile": tile_text(action.tile), "seat": seat}
            if end is not None:
                mv["end"] = end
            self.moves.append(mv)
        by = rec.by
        for e in evs:
            self._emit_rules_event(e, at, by if getattr(e, "seat", None) == seat else "rules")
        if hand.phase == R.PHASE_REDEAL:
            rnd = self._round()
            self.outbox.append(void_deal(self.key, rnd.opened, "redeal", _time(at)))
            self._emit(
                "hand_void",
                at,
                {
                    "deal_id": rnd.opened.deal_id,
                    "reason": "redeal",
                    "server_seed": rnd.opened.server_seed.hex(),
                    "hands": [[tile_text(t) for t in tiles_of(m)] for m in hand.hands],
                },
            )
            self.hand = None
            self.round = None
        elif hand.phase == R.PHASE_OVER:
            self._hand_over(at)

    def _emit_rules_event(self, e: R.Event, at: int, by: str) -> None:
        data: dict[str, Any] = msgspec.to_builtins(e)
        kind = type(e).__name__.removesuffix("Event").lower()
        data["by"] = by
        private = None
        if isinstance(e, R.PlayEvent):
            data["tile"] = tile_text(e.tile)
            data["end"] = _END_NAMES.get(e.end)
        elif isinstance(e, R.DrawEvent):
            data["tile"] = None
            private = {e.seat: {"tile": tile_text(e.tile)}}
        self._emit(kind, at, data, private)

    def _hand_over(self, at: int) -> None:
        hand, state, rnd = self.hand, self.state, self._round()
        if hand is None or state is None or hand.result is None or rnd.result is None:
            raise ValueError("hand over without a hand")
        res = hand.result
        result_json = msgspec.to_builtins(res)
        self.outbox.append(
            close_deal(self.key, rnd.opened, rnd.result, self.moves, result_json, _time(at))
        )
        self.state = R.finish_hand(state, hand)
        self.hand_no += 1
        self._emit(
            "hand_ended",
            at,
            {
                "deal_id": rnd.opened.deal_id,
                "result": result_json,
                "server_seed": rnd.opened.server_seed.hex(),
                "seeds": [e.to_json() for e in rnd.result.entries],
                "hands": [[tile_text(t) for t in tiles_of(m)] for m in hand.hands],
                "stock": [tile_text(t) for t in hand.stock],
                "moves": list(self.moves),
            },
        )
        if (
            self.state.partida_over is False
            and not self.state.over
            and self.state.hands_played == 0
        ):
            self.opening_side = None  # a new partida of a series: draw the opening right again
        if self.state.over:
            self._finish(self.state.winner_side, "target", list(self.state.scores), at)

    def _claim(self, rec: L.Claim, at: int) -> None:
        seat = rec.seat
        side = self.rules.side_of(seat)
        rnd = self.round
        if rnd is not None and rnd.result is not None:
            self.outbox.append(
                close_deal(
                    self.key,
                    rnd.opened,
                    rnd.result,
                    self.moves,
                    {"end": "claim", "winner_side": side},
                    _time(at),
                )
            )
        scores = (
            list(self.hand.scores)
            if self.hand is not None
            else list(self.state.scores if self.state else [])
        )
        self._emit("claimed", at, {"seat": seat, "side": side})
        if rnd is not None:
            self._emit(
                "hand_ended",
                at,
                {
                    "deal_id": rnd.opened.deal_id,
                    "result": {"end": "claim", "winner_side": side},
                    "server_seed": rnd.opened.server_seed.hex(),
                    "seeds": [e.to_json() for e in rnd.result.entries] if rnd.result else [],
                    "hands": [[tile_text(t) for t in tiles_of(m)] for m in self.hand.hands]
                    if self.hand
                    else [],
                    "stock": [tile_text(t) for t in self.hand.stock] if self.hand else [],
                    "moves": list(self.moves),
                },
            )
        self.hand = None
        self._finish(side, "claim", scores, at)

    def _leave(self, rec: L.Leave, at: int) -> None:
        seat = rec.seat
        self.seats[seat].left = True
        self._emit("seat_left", at, {"seat": seat, "why": rec.why, "bot": True})
        if not self.humans() and self.hand_no == 0:
            self._void("all players left before the first hand ended", at)
            return
        self._release_seed_wait(seat, at)

    def _release_seed_wait(self, seat: int, at: int) -> None:
        """A departed seat can send no seed: stop waiting for it (it gets the empty seed,
        recorded as such) instead of holding the table until the deadline."""
        rnd = self.round
        if rnd is None or rnd.result is not None:
            return
        if rnd.seeds.phase == "commit":
            rnd.active = tuple(s for s in rnd.active if s != seat)
            if set(rnd.active) <= set(rnd.seeds.commitments()):
                self._close_commit(at)
            return
        pending = set(rnd.seeds.commitments()) - self._revealed(rnd)
        if pending and all(self.seats[s].left for s in pending):
            self._finish_round(at)

    def _void(self, reason: str, at: int) -> None:
        if self.over:
            return
        rnd = self.round
        if rnd is not None and not (self.hand is not None and self.hand.phase == R.PHASE_OVER):
            if rnd.result is None or (self.hand is not None and self.hand.phase != R.PHASE_OVER):
                self.outbox.append(void_deal(self.key, rnd.opened, "match_void", _time(at)))
        self.status = STATUS_VOID
        self.hand = None
        self.round = None
        self.result = MatchResult(
            match_id=self.spec.match_id,
            status=STATUS_VOID,
            winner_side=None,
            winner_seats=[],
            winners=[],
            scores=list(self.state.scores) if self.state else [],
            reason=reason,
            settled=self.spec.tier == "free",
        )
        self._emit("match_void", at, {"reason": reason})

    def _finish(self, side: int | None, reason: str, scores: list[int], at: int) -> None:
        self.status = STATUS_FINISHED
        self.round = None
        winner_seats = [
            s.seat for s in self.seats if side is not None and self.rules.side_of(s.seat) == side
        ]
        winners = [p for s in winner_seats if (p := self.seats[s].player_id) is not None]
        self.result = MatchResult(
            match_id=self.spec.match_id,
            status=STATUS_FINISHED,
            winner_side=side,
            winner_seats=winner_seats,
            winners=winners,
            scores=scores,
            reason=reason,
            settled=self.spec.tier == "free",
        )
        self._emit("match_ended", at, msgspec.to_builtins(self.result))

    # ------------------------------------------------------------------ views

    def public_state(self) -> PublicMatchState:
        hand = self.hand
        kind, _ = self.awaiting()
        phase = {"seed_commit": "seed_commit", "seed_reveal": "seed_reveal"}.get(kind)
        if phase is None:
            phase = hand.phase if hand is not None else ("over" if self.over else "between")
        table: list[dict[str, Any]] = []
        counts: list[int] = []
        if hand is not None:
            counts = [m.bit_count() for m in hand.hands]
            for e in R.events_of(hand):
                if isinstance(e, R.PlayEvent):
                    table.append(
                        {"seat": e.seat, "tile": tile_text(e.tile), "end": _END_NAMES.get(e.end)}
                    )
        scores = (
            list(hand.scores) if hand is not None else list(self.state.scores if self.state else [])
        )
        return PublicMatchState(
            match_id=self.spec.match_id,
            variant=self.spec.variant,
            options=self.spec.options,
            tier=self.spec.tier,
            seq=self.seq,
            status=self.status,
            seats=self.seat_infos(),
            scores=scores,
            hand_no=self.hand_no + (1 if hand is not None and hand.phase != R.PHASE_OVER else 0),
            deal_id=self.round.opened.deal_id if self.round is not None else None,
            phase=phase,
            turn=hand.turn if hand is not None else -1,
            counts=counts,
            table=table,
            deadline=self.deadline(),
            result=self.result,
        )

    def snapshot(self, seat: int) -> SeatSnapshot:
        hand = self.hand
        dealing = self.round is not None and self.round.result is None
        own: list[str] = []
        legal: list[dict[str, Any]] = []
        hand_view: dict[str, Any] | None = None
        if hand is not None and not dealing:
            own = [tile_text(t) for t in tiles_of(hand.hands[seat])]
            hand_view = msgspec.to_builtins(R.view(hand, seat))
            hand_view["hand"] = own
            if not self.is_bot(seat):
                legal = [action_public(a) for a in R.legal_actions(hand, seat)]
        mine = None
        if self.round is not None and self.round.result is None:
            mine = self.round.seeds.commitments().get(seat)
            kind, seats = self.awaiting()
            if seat in seats:
                legal = [{"type": kind}]
        if self.claimable and hand is not None:
            d = self.deadline()
            if (
                d is not None
                and d.kind == "claim"
                and R.side_on_turn(hand) != self.rules.side_of(seat)
            ):
                legal.append({"type": "claim", "from_ms": d.at_ms})
        return SeatSnapshot(
            match_id=self.spec.match_id,
            seat=seat,
            seq=self.seq,
            state=self.public_state(),
            hand=own,
            legal=legal,
            my_seed_commitment=mine,
            hand_view=hand_view,
        )


# ---------------------------------------------------------------------------------- helpers


def validate_spec(spec: CreateMatch) -> R.RuleSet:
    try:
        rules = R.make_ruleset(spec.variant, dict(spec.options))
    except R.RulesError as exc:
        raise bad_request("bad_match_spec", exc.message) from None
    except KeyError:
        raise bad_request("bad_match_spec", f"unknown variant {spec.variant!r}") from None
    if len(spec.seats) != rules.seats or sorted(s.seat for s in spec.seats) != list(
        range(rules.seats)
    ):
        raise bad_request("bad_match_spec", f"{spec.variant} needs seats 0..{rules.seats - 1}")
    if not 1 <= len(spec.match_id) <= 100 or not all(
        c.isalnum() or c in "._-" for c in spec.match_id
    ):
        raise bad_request("bad_match_spec", "match_id must be 1..100 of [A-Za-z0-9._-]")
    for s in spec.seats:
        if s.bot and spec.tier != "free":
            raise bad_request(
                "bad_match_spec", "CPU players sit only at free tables from the start"
            )
        if not s.bot and not s.player_id:
            raise bad_request("bad_match_spec", f"seat {s.seat} needs a player or a bot")
    if all(s.bot for s in spec.seats):
        raise bad_request("bad_match_spec", "a match needs at least one player")
    if spec.tier != "free" and spec.stake_cents <= 0:
        raise bad_request("bad_match_spec", "a paid table needs a stake")
    return rules


def action_public(a: R.Action) -> dict[str, Any]:
    if isinstance(a, R.Play):
        return {"type": "play", "tile": tile_text(a.tile), "end": _END_NAMES.get(a.end)}
    if isinstance(a, R.ChooseOpener):
        return {"type": "choose", "salgo": a.salgo}
    return {"type": "redeal"}


def restore(
    spec: CreateMatch,
    key: OperatorKey,
    created_ms: int,
    records: list[L.Record],
    *,
    keep_outbox: bool = False,
) -> Match:
    """Rebuild a match from its log. With `keep_outbox` the fairness records it implies are
    kept for re-sending (signatures are deterministic, so they are the same records)."""
    m = Match.create(spec, key, created_ms)
    for rec in records:
        m.apply(rec)
    if not keep_outbox:
        m.outbox.clear()
    return m


__all__ = ["Match", "ServiceError", "restore", "validate_spec"]
