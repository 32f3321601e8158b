"""Properties over random deals and random legal play, every variant and mode; replay format."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from rules_helpers import run_replay
from rules_sim import CONFIGS, deal, play_hand, play_match

from services.engine import rules as R
from services.engine.rules.tiles import NUM_MASK, mask_of

RULESETS = [R.make_ruleset(v, o) for v, o in CONFIGS]


def _checker(rs: R.RuleSet):
    full = mask_of(list(R.tile_set(rs.max_pip)))

    def check(hand: R.HandState, prev: R.HandState | None, events) -> None:
        # tile conservation: hands + table + stock is the whole set, no tile twice
        table = [e.tile for e in R.events_of(hand) if isinstance(e, R.PlayEvent)]
        parts = [*hand.hands, mask_of(table), mask_of(list(hand.stock))]
        union = 0
        for p in parts:
            assert union & p == 0
            union |= p
        assert union == full
        # a seat's view never holds hidden tiles while the hand runs
        if hand.phase in (R.PHASE_PLAY, R.PHASE_CHOOSE):
            for s in range(rs.seats):
                v = R.view(hand, s)
                seen = set(v.hand) | {e.tile for e in v.chain}
                seen |= {e.tile for e in v.events if isinstance(e, R.DrawEvent) and e.tile >= 0}
                assert seen <= set(R.tiles_of_mask(hand.hands[s])) | set(table)
                assert v.revealed_hands is None and v.revealed_stock is None
                assert v.hand == R.tiles_of_mask(hand.hands[s])
        if prev is None or prev.phase != R.PHASE_PLAY:
            return
        # only forced passes: a passing seat held no fitting tile (and the stock was empty)
        fit = NUM_MASK[hand.left] | NUM_MASK[hand.right] if hand.left >= 0 else 0
        for e in events:
            if isinstance(e, R.PassEvent):
                assert not hand.hands[e.seat] & fit
                if rs.draws:
                    assert hand.stock == ()
        # scores add up: running scores = before + counted bonuses (+ the hand's points)
        res = hand.result
        gained = [0] * rs.sides
        for b in hand.bonuses:
            if b.counted:
                gained[b.side] += b.points
        if res is not None and res.winner_side is not None and res.end != "target":
            gained[res.winner_side] += res.points
        before = hand.setup.scores_before
        assert tuple(before[i] + gained[i] for i in range(rs.sides)) == hand.scores
        # the hand ends exactly when the rules say
        if hand.phase == R.PHASE_PLAY:
            assert R.legal_actions(hand)
            if rs.tranque_detect == "lock":
                assert hand.live & fit
        elif res is not None and res.end == "domino":
            assert any(m == 0 for m in hand.hands)
        elif res is not None and res.end == "tranque":
            assert all(m != 0 for m in hand.hands)
            if rs.tranque_detect == "lock":
                assert not hand.live & fit
            else:
                assert sum(isinstance(e, R.PassEvent) for e in events) == rs.seats
                assert all(not m & fit for m in hand.hands)

    return check


@settings(max_examples=60, deadline=None)
@given(idx=st.integers(0, len(RULESETS) - 1), seed=st.integers(0, 2**32 - 1))
def test_random_hands_keep_every_invariant(idx, seed):
    """Tile conservation, only forced passes, the hand ends when the rules say, scores add up
    and views never show hidden tiles: random deal, random legal play, every variant/mode."""
    rs = RULESETS[idx]
    rng = random.Random(seed)
    match = R.new_match(rs)
    for _ in range(3):
        hand = play_hand(match, rng, _checker(rs))
        match = R.finish_hand(match, hand)
        if match.over:
            break


def test_thousands_of_random_matches_finish_for_every_variant():
    """At least 2000 complete random matches per variant (all modes) finish without error."""
    per_variant: dict[str, int] = {}
    for i, rs in enumerate(RULESETS):
        rng = random.Random(1000 + i)
        for _ in range(700):
            match, _ = play_match(rs, rng)
            assert match.over and match.winner_side is not None
            assert match.scores[match.winner_side] >= rs.target or (
                match.last_result is not None and match.last_result.viajera
            )
        per_variant[rs.variant] = per_variant.get(rs.variant, 0) + 700
    assert all(n >= 2000 for n in per_variant.values())


def test_views_after_the_hand_reveal_everything():
    rs = R.make_ruleset("cubana", {})
    hand = play_hand(R.new_match(rs), random.Random(2))
    v = R.view(hand, 0)
    assert v.revealed_stock is not None and len(v.revealed_stock) == 15


def test_replay_is_deterministic_and_matches_the_core(tmp_path):
    """A random hand replayed through `mesa rules replay` gives the same result."""
    for rs in RULESETS:
        if rs.variant == "cubana" and rs.first_opening == "choose":
            continue
        rng = random.Random(17)
        hands, stock = deal(rs, rng)
        hand = R.start_hand(R.new_match(rs), hands, stock)
        moves = []
        while hand.phase == R.PHASE_PLAY:
            a = rng.choice(R.legal_actions(hand))
            t = R.tile_str(a.tile)
            moves.append(
                {"tile": t, "end": "left" if a.end == R.LEFT else "right"}
                if hand.left >= 0
                else {"tile": t}
            )
            hand, _ = R.apply(hand, a)
        scen = {
            "variant": rs.variant,
            "options": dict(rs.options),
            "hands": [[R.tile_str(t) for t in h] for h in hands],
            "stock": [R.tile_str(t) for t in stock],
            "moves": moves,
        }
        if rs.variant == "cubana":
            scen["opener"] = hand.opener
        rc, out, err = run_replay(tmp_path, scen)
        assert rc == 0, err
        assert out["result"]["scores"] == list(hand.result.scores)
        assert out["result"]["end"] == hand.result.end and out["awaiting"] is None
        assert set(out) == {"events", "result", "awaiting"}
        assert list(out["result"]) == [
            "end",
            "winner_seat",
            "winner_side",
            "points",
            "bonuses",
            "scores",
            "next_opener",
            "next_opening_side",
            "match_over",
            "match_winner_side",
        ]


BASE = {
    "variant": "dominicana",
    "hands": [
        ["0-0", "0-1", "0-2", "0-3", "0-4", "0-5", "0-6"],
        ["1-1", "1-2", "1-3", "1-4", "1-5", "1-6", "2-2"],
        ["2-3", "2-4", "2-5", "2-6", "3-3", "3-4", "3-5"],
        ["3-6", "4-4", "4-5", "4-6", "5-5", "5-6", "6-6"],
    ],
    "stock": [],
}


def test_replay_errors_exit_2_one_line_naming_the_move(tmp_path):
    """Invalid scenario -> move 0; illegal move -> its index; nothing on stdout."""
    cases = [
        ("{not json", 0),
        ({**BASE, "extra": 1}, 0),
        ({**BASE, "variant": "chess"}, 0),
        ({**BASE, "options": {"mode": "3v3"}}, 0),
        ({**BASE, "options": {"colour": "red"}}, 0),
        ({**BASE, "hands": BASE["hands"][:3]}, 0),
        ({**BASE, "stock": ["0-0"]}, 0),
        ({**BASE, "hands": [["0-0"] * 7, *BASE["hands"][1:]]}, 0),
        ({**BASE, "scores": [100, 0]}, 0),
        ({**BASE, "scores": [1, 2, 3]}, 0),
        ({**BASE, "moves": [{"tile": "6-6", "foo": 1}]}, 0),
        ({**BASE, "moves": [{"tile": "6-6"}, {"tile": "9-9"}]}, 1),
        ({**BASE, "moves": [{"tile": "6-6"}, {"tile": "0-0"}]}, 1),
        ({**BASE, "moves": [{"tile": "6-6"}, {"tile": "5-6", "seat": 1}]}, 1),
        ({**BASE, "moves": [{"tile": "6-6"}, {"tile": "6-0"}, {"tile": "5-4"}]}, 2),
        ({**BASE, "first_hand": False}, 0),
    ]
    for scenario, index in cases:
        rc, out, err = run_replay(tmp_path, scenario)
        assert rc == 2 and out == "", scenario
        assert err.startswith(f"move {index}:") and err.count("\n") == 1, (scenario, err)


def test_replay_stdin_and_list(tmp_path, capsys, monkeypatch):
    import io
    import json

    from services.engine.rules import cli

    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(BASE)))
    assert cli.main(["replay", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["awaiting"] == {"seat": 3}
    assert cli.main(["list"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert set(listed["variants"]) == {"dominicana", "cubana", "casa", "apuesta"}
    assert listed["variants"]["casa"]["options"]["capicua_bonus"]["default"] == 25
    assert cli.main(["bogus"]) == 2
