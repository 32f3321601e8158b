"""Actions, events, results and states: frozen msgspec Structs."""

from __future__ import annotations

from typing import Any

import msgspec

from services.engine.rules.variants import RuleSet

LEFT = 0
RIGHT = 1
NO_END = -1  # the opening tile: no end to choose

PHASE_CHOOSE = "choose"  # the opening side picks its opener ("Salgo" / "Sal tú")
PHASE_PLAY = "play"
PHASE_OVER = "over"  # hand finished (or match decided in mid-hand)
PHASE_REDEAL = "redeal"  # void hand: a five-doubles redeal was requested


class Play(msgspec.Struct, frozen=True, tag="play"):
    """Place `tile` on `end` (LEFT/RIGHT). For the opening tile `end` is ignored and the tile
    lies high half on the left unless `flip` (then low half on the left)."""

    tile: int
    end: int = LEFT
    flip: bool = False


class ChooseOpener(msgspec.Struct, frozen=True, tag="choose"):
    """Secret "Salgo" (salgo=True) / "Sal tú" (salgo=False); a silent seat counts as Sal tú."""

    seat: int
    salgo: bool


class RequestRedeal(msgspec.Struct, frozen=True, tag="redeal"):
    """A seat holding five or more doubles asks for a new deal (before the first tile)."""

    seat: int


Action = Play | ChooseOpener | RequestRedeal


class PlayEvent(msgspec.Struct, frozen=True, gc=False, tag="play"):
    seat: int
    tile: int
    end: int  # LEFT, RIGHT or NO_END for the opening
    left: int
    right: int


class PassEvent(msgspec.Struct, frozen=True, gc=False, tag="pass"):
    seat: int


class DrawEvent(msgspec.Struct, frozen=True, gc=False, tag="draw"):
    seat: int
    tile: int  # -1 in views of other seats


class BonusEvent(msgspec.Struct, frozen=True, tag="bonus"):
    kind: str
    side: int
    points: int
    counted: bool


class ChoiceEvent(msgspec.Struct, frozen=True, tag="choice"):
    """Both Salgo/Sal tú choices, revealed together, and the resulting opener."""

    side: int
    choices: tuple[tuple[int, bool], ...]
    opener: int


class RedealEvent(msgspec.Struct, frozen=True, tag="redeal"):
    seat: int


Event = PlayEvent | PassEvent | DrawEvent | BonusEvent | ChoiceEvent | RedealEvent


class HandResult(msgspec.Struct, frozen=True):
    end: str  # "domino" | "tranque" | "target"
    winner_seat: int | None
    winner_side: int | None
    points: int
    bonuses: tuple[BonusEvent, ...]
    scores: tuple[int, ...]
    next_opener: int | None
    next_opening_side: int | None
    match_over: bool
    match_winner_side: int | None
    blocker: int | None = None  # who placed the locking tile ("el que tranca")
    pips: tuple[int, ...] = ()  # pips left per seat
    viajera: bool = False
    next_priority: int | None = None  # seat with priority in the next Salgo/Sal tú


class HandSetup(msgspec.Struct, frozen=True):
    """Per-hand constants."""

    first_hand: bool
    scores_before: tuple[int, ...]
    dealt: tuple[int, ...]  # hand masks as dealt
    stock_dealt: tuple[int, ...]
    opening_side: int | None
    priority: int | None
    forced_open: int  # tile the opening must be, or -1
    first_pass_pending: bool  # miami: the match's first pass has not happened yet


class HandState(msgspec.Struct, frozen=True):
    """One hand in progress. `log` is a cons list (event, older) of every event so far."""

    # core._play builds it positionally (once per play, the hot path): keep this field order
    # in step with it.

    rules: RuleSet
    setup: HandSetup
    hands: tuple[int, ...]  # bitmask per seat
    stock: tuple[int, ...]  # boneyard (drawn from the front) or dormidas / unused tiles
    left: int  # -1 before the opening
    right: int
    turn: int  # seat on turn, -1 while choosing the opener or when over
    phase: str
    opener: int  # -1 until known
    last_player: int  # seat that placed the last tile
    passes: int  # consecutive passes since the last tile
    plays: int  # tiles on the table
    live: int  # unplayed tiles that can still reach the table (hands, plus boneyard if drawn)
    scores: tuple[int, ...]  # running side totals (counted bonuses included)
    bonuses: tuple[BonusEvent, ...]
    log: Any
    choices: tuple[tuple[int, bool], ...]
    first_pass_pending: bool
    result: HandResult | None


class MatchState(msgspec.Struct, frozen=True):
    """A match: a partida to the target, or Miami's series of partidas (best of three)."""

    rules: RuleSet
    scores: tuple[int, ...]
    hands_played: int  # in the current partida
    next_opener: int | None
    next_opening_side: int | None
    priority: int | None
    first_pass_pending: bool
    partida: int
    partidas_won: tuple[int, ...]
    partida_over: bool
    over: bool
    winner_side: int | None
    pollona: bool
    last_result: HandResult | None


class SeatView(msgspec.Struct, frozen=True):
    """What one seat may see."""

    seat: int
    variant: str
    phase: str
    hand: tuple[int, ...]
    counts: tuple[int, ...]
    left: int
    right: int
    chain: tuple[PlayEvent, ...]
    events: tuple[Event, ...]
    scores: tuple[int, ...]
    turn: int
    side_on_turn: int | None
    opener: int
    opening_side: int | None
    stock_count: int  # boneyard size where the variant draws, else 0
    bonuses: tuple[BonusEvent, ...]
    my_choice: bool | None
    result: HandResult | None
    revealed_hands: tuple[tuple[int, ...], ...] | None
    revealed_stock: tuple[int, ...] | None
