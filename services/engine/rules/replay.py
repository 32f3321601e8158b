"""`mesa rules replay`: replay one hand from an explicit deal and the players' choices.

The input and output formats are those of issue 3; `replay(scenario)` returns the output
object or raises `ReplayError(move_index, reason)`.
"""

from __future__ import annotations

from typing import Any

from msgspec.structs import replace

from services.engine.rules import variants as V
from services.engine.rules.core import apply, new_match, start_hand
from services.engine.rules.errors import RulesError
from services.engine.rules.model import (
    LEFT,
    NO_END,
    PHASE_OVER,
    PHASE_PLAY,
    RIGHT,
    BonusEvent,
    DrawEvent,
    Event,
    HandResult,
    PassEvent,
    Play,
    PlayEvent,
)
from services.engine.rules.tiles import HIGH, LOW, parse_tile, tile_str
from services.engine.rules.variants import RuleSet, make_ruleset

SCENARIO_KEYS = {"variant", "options", "hands", "stock", "opener", "first_hand", "scores", "moves"}
MOVE_KEYS = {"tile", "end", "seat"}
_END_NAMES = {LEFT: "left", RIGHT: "right", NO_END: None}


class ReplayError(Exception):
    def __init__(self, move: int, reason: str) -> None:
        super().__init__(f"move {move}: {reason}")
        self.move = move
        self.reason = reason


def _int(value: Any) -> bool:
    return type(value) is int


def _match_already_over(rules: RuleSet, scores: list[int]) -> bool:
    reached = [s for s in range(rules.sides) if scores[s] >= rules.target]
    if not reached:
        return False
    if rules.match_end == V.MATCH_SOLE_LEADER:
        top = max(scores[s] for s in reached)
        return sum(1 for s in reached if scores[s] == top) == 1
    return True


def _parse_tiles(items: Any, what: str, max_pip: int) -> tuple[list[int], list[str]]:
    if not isinstance(items, list):
        raise ReplayError(0, f"{what} must be a list of tiles")
    ids, texts = [], []
    for item in items:
        try:
            t, _, _ = parse_tile(item, max_pip)
        except ValueError as exc:
            raise ReplayError(0, f"{what}: {exc}") from None
        ids.append(t)
        texts.append(item)
    return ids, texts


def event_json(e: Event, written: str | None = None) -> dict[str, Any]:
    if isinstance(e, PlayEvent):
        return {
            "type": "play",
            "seat": e.seat,
            "tile": written if written is not None else tile_str(e.tile),
            "end": _END_NAMES[e.end],
            "ends": [e.left, e.right],
        }
    if isinstance(e, PassEvent):
        return {"type": "pass", "seat": e.seat}
    if isinstance(e, DrawEvent):
        return {"type": "draw", "seat": e.seat, "tile": tile_str(e.tile)}
    if isinstance(e, BonusEvent):
        return {
            "type": "bonus",
            "kind": e.kind,
            "side": e.side,
            "points": e.points,
            "counted": e.counted,
        }
    raise TypeError(f"no replay form for {e!r}")


def result_json(res: HandResult) -> dict[str, Any]:
    return {
        "end": res.end,
        "winner_seat": res.winner_seat,
        "winner_side": res.winner_side,
        "points": res.points,
        "bonuses": [event_json(b) for b in res.bonuses],
        "scores": list(res.scores),
        "next_opener": res.next_opener,
        "next_opening_side": res.next_opening_side,
        "match_over": res.match_over,
        "match_winner_side": res.match_winner_side,
    }


def replay(scenario: Any) -> dict[str, Any]:
    """Replay one hand; return {"events", "result", "awaiting"} or raise ReplayError."""
    if not isinstance(scenario, dict):
        raise ReplayError(0, "the scenario must be a JSON object")
    unknown = sorted(set(scenario) - SCENARIO_KEYS)
    if unknown:
        raise ReplayError(0, f"unknown key(s): {', '.join(unknown)}")
    variant = scenario.get("variant")
    if not isinstance(variant, str):
        raise ReplayError(0, "variant is required")
    options = scenario.get("options", {})
    if not isinstance(options, dict):
        raise ReplayError(0, "options must be an object")
    try:
        rules = make_ruleset(variant, options)
    except RulesError as exc:
        raise ReplayError(0, exc.message) from None
    if "hands" not in scenario or not isinstance(scenario["hands"], list):
        raise ReplayError(0, "hands must be a list of hands")
    hands = [
        _parse_tiles(h, f"hands[{i}]", rules.max_pip)[0] for i, h in enumerate(scenario["hands"])
    ]
    stock, _ = _parse_tiles(scenario.get("stock", []), "stock", rules.max_pip)
    opener = scenario.get("opener")
    if opener is not None and not (_int(opener) and 0 <= opener < rules.seats):
        raise ReplayError(0, f"opener {opener!r} is not a seat")
    first_hand = scenario.get("first_hand", True)
    if type(first_hand) is not bool:
        raise ReplayError(0, "first_hand must be true or false")
    scores = scenario.get("scores", [0] * rules.sides)
    if (
        not isinstance(scores, list)
        or len(scores) != rules.sides
        or not all(_int(x) and x >= 0 for x in scores)
    ):
        raise ReplayError(0, f"scores must be {rules.sides} non-negative integers")
    if _match_already_over(rules, scores):
        raise ReplayError(0, "the prior scores already end the match")
    moves = scenario.get("moves", [])
    if not isinstance(moves, list):
        raise ReplayError(0, "moves must be a list")
    parsed_moves = []
    for i, mv in enumerate(moves):
        if not isinstance(mv, dict):
            raise ReplayError(0, f"moves[{i}] must be an object")
        bad = sorted(set(mv) - MOVE_KEYS)
        if bad:
            raise ReplayError(0, f"moves[{i}]: unknown key(s): {', '.join(bad)}")
        if "tile" not in mv or not isinstance(mv["tile"], str):
            raise ReplayError(0, f"moves[{i}]: tile is required")
        if "end" in mv and mv["end"] not in ("left", "right"):
            raise ReplayError(0, f"moves[{i}]: end must be 'left' or 'right'")
        if "seat" in mv and not _int(mv["seat"]):
            raise ReplayError(0, f"moves[{i}]: seat must be an integer")
        parsed_moves.append(mv)
    if rules.variant == "cubana" and first_hand and opener is None:
        raise ReplayError(0, "opener is required for cubana")
    if not first_hand and opener is None:
        raise ReplayError(0, "opener is required for a later hand")

    match = replace(new_match(rules), scores=tuple(scores), hands_played=0 if first_hand else 1)
    try:
        state = start_hand(match, hands, stock, opener=opener)
    except RulesError as exc:
        raise ReplayError(0, exc.message) from None

    out: list[dict[str, Any]] = []
    for i, mv in enumerate(parsed_moves):
        if state.phase != PHASE_PLAY:
            if state.result is not None and state.result.end == "target":
                raise ReplayError(i, "the match was decided in the middle of the hand")
            raise ReplayError(i, "the hand is over")
        seat = state.turn
        if "seat" in mv and mv["seat"] != seat:
            raise ReplayError(i, f"seat {seat} is on turn, not seat {mv['seat']}")
        try:
            t, a, b = parse_tile(mv["tile"], rules.max_pip)
        except ValueError as exc:
            raise ReplayError(i, str(exc)) from None
        if not state.hands[seat] >> t & 1:
            raise ReplayError(i, f"seat {seat} does not hold {mv['tile']}")
        if state.left < 0:
            action = Play(t, NO_END, flip=a != HIGH[t])
        else:
            le, r = state.left, state.right
            fits_left = LOW[t] == le or HIGH[t] == le
            fits_right = LOW[t] == r or HIGH[t] == r
            if "end" in mv:
                end = LEFT if mv["end"] == "left" else RIGHT
                if not (fits_left if end == LEFT else fits_right):
                    raise ReplayError(i, f"{mv['tile']} does not fit the {mv['end']} end")
            elif fits_left and fits_right:
                if le != r:
                    raise ReplayError(i, f"{mv['tile']} fits both ends: say which end")
                end = LEFT
            elif fits_left:
                end = LEFT
            elif fits_right:
                end = RIGHT
            else:
                raise ReplayError(i, f"{mv['tile']} fits neither end ({le}, {r})")
            action = Play(t, end)
        try:
            state, events = apply(state, action)
        except RulesError as exc:
            raise ReplayError(i, exc.message) from None
        for k, e in enumerate(events):
            out.append(event_json(e, mv["tile"] if k == 0 else None))
    result = None
    if state.phase == PHASE_OVER and state.result is not None:
        result = result_json(state.result)
    return {
        "events": out,
        "result": result,
        "awaiting": {"seat": state.turn} if state.phase == PHASE_PLAY else None,
    }
