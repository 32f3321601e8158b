"""Random complete matches through the public rules API (test helper; randomness lives here)."""

from __future__ import annotations

import random

from services.engine import rules as R

CONFIGS: list[tuple[str, dict]] = [
    ("dominicana", {"mode": "2v2"}),
    ("dominicana", {"mode": "1v1"}),
    ("dominicana", {"mode": "2v2", "target": 200}),
    ("cubana", {"preset": "habana"}),
    ("cubana", {"preset": "miami"}),
    ("cubana", {"preset": "oriente"}),
    ("cubana", {"preset": "barrio"}),
    ("cubana", {"preset": "oriente", "next_hand": "winners_choose", "capicua": "double"}),
    ("casa", {}),
    ("casa", {"players": 2}),
    ("casa", {"players": 4, "pairs": False}),
    ("casa", {"scoring": "hands", "tranque_bonus": 30}),
    ("casa", {"players": 2, "scoring": "hands", "capicua_bonus": 30}),
    ("apuesta", {"mode": "parejas"}),
    ("apuesta", {"mode": "1v1"}),
    ("apuesta", {"mode": "trios"}),
]


def deal(rs: R.RuleSet, rng: random.Random) -> tuple[list[list[int]], list[int]]:
    tiles = list(R.tile_set(rs.max_pip))
    rng.shuffle(tiles)
    k = rs.hand_size
    hands = [tiles[s * k : (s + 1) * k] for s in range(rs.seats)]
    return hands, tiles[rs.seats * k :]


def play_hand(match: R.MatchState, rng: random.Random, check=None) -> R.HandState:
    rs = match.rules
    while True:
        hands, stock = deal(rs, rng)
        side = rng.randrange(2) if R.needs_opening_side(match) else None
        hand = R.start_hand(match, hands, stock, opening_side=side)
        if check:
            check(hand, None, ())
        while hand.phase in (R.PHASE_PLAY, R.PHASE_CHOOSE):
            seat = R.awaiting(hand)[0]
            acts = R.legal_actions(hand, seat)
            action = rng.choice(acts)
            prev = hand
            hand, events = R.apply(hand, action)
            if check:
                check(hand, prev, events)
        if hand.phase == R.PHASE_OVER:
            return hand


def play_match(rs: R.RuleSet, rng: random.Random, check=None, max_hands: int = 500):
    match = R.new_match(rs)
    hands = 0
    while not match.over:
        hand = play_hand(match, rng, check)
        match = R.finish_hand(match, hand)
        hands += 1
        if hands > max_hands:
            raise RuntimeError("match did not finish")
    return match, hands
