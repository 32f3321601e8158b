"""Mesa's pure rules core: every variant of the four rule sheets.

Typical use by the engine service::

    from services.engine import rules as R

    rs = R.make_ruleset("dominicana", {"mode": "2v2", "target": 100})
    match = R.new_match(rs)
    # deal: tile ids per seat and the rest (boneyard front first, or dormidas)
    hand = R.start_hand(match, hands, stock, opener=None, opening_side=None)
    while hand.phase == R.PHASE_PLAY or hand.phase == R.PHASE_CHOOSE:
        seat = R.awaiting(hand)[0]
        action = choose(R.legal_actions(hand, seat))      # Play / ChooseOpener / RequestRedeal
        hand, events = R.apply(hand, action)              # forced passes/draws applied eagerly
        send(R.view(hand, s) for s in seats)              # per-seat views, nothing hidden leaks
    match = R.finish_hand(match, hand)                    # scores, next opener, series
    if match.over: ...                                    # match.winner_side, match.pollona

`hand.result` (a `HandResult`) says how the hand ended (`domino`, `tranque`, `target`), the
points, bonuses, scores, `next_opener` / `next_opening_side` and whether the match is over.
`R.needs_opening_side(match)` tells when the next hand needs a random opening side (Cuban
draw, Miami's pares o nones), passed as `start_hand(..., opening_side=side)`.
A `RequestRedeal` makes the hand void (`PHASE_REDEAL`): deal again with the same opener /
opening side. `R.heaviest_playable(hand)` is the play for a timed-out turn.
"""

from services.engine.rules.core import (
    apply,
    awaiting,
    events_of,
    finish_hand,
    heaviest_playable,
    legal_actions,
    needs_opening_side,
    new_match,
    side_on_turn,
    start_hand,
    view,
)
from services.engine.rules.errors import IllegalAction, InvalidDeal, InvalidOptions, RulesError
from services.engine.rules.model import (
    LEFT,
    NO_END,
    PHASE_CHOOSE,
    PHASE_OVER,
    PHASE_PLAY,
    PHASE_REDEAL,
    RIGHT,
    Action,
    BonusEvent,
    ChoiceEvent,
    ChooseOpener,
    DrawEvent,
    Event,
    HandResult,
    HandState,
    MatchState,
    PassEvent,
    Play,
    PlayEvent,
    RedealEvent,
    RequestRedeal,
    SeatView,
)
from services.engine.rules.tiles import parse_tile, tile, tile_set, tile_str
from services.engine.rules.tiles import tiles_of as tiles_of_mask
from services.engine.rules.variants import RuleSet, list_variants, make_ruleset

__all__ = [
    "LEFT",
    "NO_END",
    "PHASE_CHOOSE",
    "PHASE_OVER",
    "PHASE_PLAY",
    "PHASE_REDEAL",
    "RIGHT",
    "Action",
    "BonusEvent",
    "ChoiceEvent",
    "ChooseOpener",
    "DrawEvent",
    "Event",
    "HandResult",
    "HandState",
    "IllegalAction",
    "InvalidDeal",
    "InvalidOptions",
    "MatchState",
    "PassEvent",
    "Play",
    "PlayEvent",
    "RedealEvent",
    "RequestRedeal",
    "RuleSet",
    "RulesError",
    "SeatView",
    "apply",
    "awaiting",
    "events_of",
    "finish_hand",
    "heaviest_playable",
    "legal_actions",
    "list_variants",
    "make_ruleset",
    "needs_opening_side",
    "new_match",
    "parse_tile",
    "side_on_turn",
    "start_hand",
    "tile",
    "tile_set",
    "tile_str",
    "tiles_of_mask",
    "view",
]
