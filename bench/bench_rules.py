"""Rules-core throughput: random playouts per variant, and 2v2 double-six against `dominoes`.

Both sides of the comparison do the same job: shuffle a double-six set, deal 4 x 7, draw a
random starting player who may open with any tile (what `dominoes.Game.new(starting_player=...)`
does), then play uniformly random legal moves until the game ends (dominó, or every player
passing in a row), picking moves with the same cheap `moves[int(random() * len(moves))]` so the
RNG does not dominate either side. The two run in alternating slices (order swapped each round)
and are timed in process CPU time, so that load from other processes on a shared machine
neither counts nor falls on one side more than the other.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import random
import time
from typing import Any

from msgspec.structs import replace

from bench.common import write_result
from services.engine import rules as R

SECONDS = 1.5
# The rules core must stay at least this many times as fast as `dominoes` on the same job
# (docs/reference/rules.md, Performance): what decides whether a speed-up's extra code path is kept.
GUARDRAIL_SPEEDUP = 2.0
# CPU time of this (single-threaded) process: "on one core", and other processes on a shared
# machine do not count against either side of the comparison.
_clock = time.process_time

VARIANTS: list[tuple[str, str, dict[str, Any]]] = [
    ("dominicana_2v2", "dominicana", {"mode": "2v2"}),
    ("dominicana_1v1", "dominicana", {"mode": "1v1"}),
    ("cubana_habana", "cubana", {"preset": "habana"}),
    ("cubana_miami", "cubana", {"preset": "miami"}),
    ("cubana_oriente", "cubana", {"preset": "oriente"}),
    ("cubana_barrio", "cubana", {"preset": "barrio"}),
    ("casa_pairs", "casa", {}),
    ("casa_2_players", "casa", {"players": 2}),
    ("apuesta_parejas", "apuesta", {"mode": "parejas"}),
    ("apuesta_1v1", "apuesta", {"mode": "1v1"}),
    ("apuesta_trios", "apuesta", {"mode": "trios"}),
]


def _mesa_hands(
    rs: R.RuleSet, seconds: float, seed: int = 7, later: bool = False
) -> tuple[int, int, float]:
    """Random first hands of a match (or, with `later`, later hands from a random opener)."""
    rng = random.Random(seed)
    rand = rng.random
    shuffle = rng.shuffle
    tiles = list(R.tile_set(rs.max_pip))
    k = rs.hand_size
    n = rs.seats
    match = R.new_match(rs)
    if later:
        match = replace(match, hands_played=1)
    apply = R.apply
    legal = R.legal_actions
    playing = R.PHASE_PLAY
    hands = plays = 0
    start = _clock()
    deadline = start + seconds
    while _clock() < deadline:
        for _ in range(50):
            shuffle(tiles)
            side = rng.randrange(2) if R.needs_opening_side(match) else None
            opener = rng.randrange(n) if later else None
            st = R.start_hand(
                match, [tiles[s * k : (s + 1) * k] for s in range(n)], tiles[n * k :], opener, side
            )
            while st.phase != playing:
                if st.phase != R.PHASE_CHOOSE:
                    break
                acts = legal(st, R.awaiting(st)[0])
                st, _ = apply(st, acts[int(rand() * len(acts))])
            while st.phase == playing:
                acts = legal(st)
                st, _ = apply(st, acts[int(rand() * len(acts))])
                plays += 1
            hands += 1
    return hands, plays, _clock() - start


def _dominoes_hands(seconds: float, seed: int = 7) -> tuple[int, int, float]:
    import dominoes

    rng = random.Random(seed)
    rand = rng.random
    module_shuffle = dominoes.game.random.shuffle
    dominoes.game.random.shuffle = rng.shuffle  # its deal shuffles with the module RNG
    hands = plays = 0
    try:
        start = _clock()
        deadline = start + seconds
        while _clock() < deadline:
            for _ in range(50):
                game = dominoes.Game.new(starting_player=rng.randrange(4))
                while game.result is None:
                    moves = game.valid_moves
                    game.make_move(*moves[int(rand() * len(moves))])
                    plays += 1
                hands += 1
        return hands, plays, _clock() - start
    finally:
        dominoes.game.random.shuffle = module_shuffle


def _compare(rs: R.RuleSet, seconds: float, rounds: int = 8) -> tuple[tuple[int, int, float], ...]:
    """Mesa and `dominoes` on the same job, in alternating slices: (hands, plays, s) each."""
    ours: list[float] = [0, 0, 0.0]
    theirs: list[float] = [0, 0, 0.0]
    runs = [
        lambda i: _mesa_hands(rs, seconds / rounds, seed=i, later=True),
        lambda i: _dominoes_hands(seconds / rounds, seed=i),
    ]
    for i in range(rounds):
        order = (0, 1) if i % 2 == 0 else (1, 0)
        for which in order:
            total = ours if which == 0 else theirs
            for k, v in enumerate(runs[which](i)):
                total[k] += v
    return (
        (int(ours[0]), int(ours[1]), ours[2]),
        (int(theirs[0]), int(theirs[1]), theirs[2]),
    )


def _row(hands: int, plays: int, elapsed: float) -> dict[str, float]:
    return {
        "hands_per_s": round(hands / elapsed, 1),
        "us_per_play": round(elapsed / plays * 1e6, 3),
        "plays_per_hand": round(plays / hands, 2),
    }


def _profile(rs: R.RuleSet) -> str:
    prof = cProfile.Profile()
    prof.enable()
    _mesa_hands(rs, 0.5)
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(8)
    lines = [ln for ln in buf.getvalue().splitlines() if ln.strip()]
    return "\n".join(lines[-10:])


def main() -> dict[str, Any]:
    results: dict[str, Any] = {"variants": {}}
    for name, variant, options in VARIANTS:
        row = _row(*_mesa_hands(R.make_ruleset(variant, options), SECONDS))
        results["variants"][name] = row
        print(f"{name:<18} {row['hands_per_s']:>10.1f} hands/s {row['us_per_play']:>7.3f} us/play")
    # Same job on both: 2v2 double-six, random opener playing any tile (a later hand of the
    # match, as `dominoes` has no first-hand rule), random legal moves, until the game ends.
    same = R.make_ruleset(
        "casa", {"players": 4, "pairs": True, "capicua_bonus": 0, "pase_corrido_bonus": 0}
    )
    mesa_run, dominoes_run = _compare(same, SECONDS * 2)
    ours = _row(*mesa_run)
    theirs = _row(*dominoes_run)
    ratio = round(ours["hands_per_s"] / theirs["hands_per_s"], 2)
    results["comparison_2v2_double_six"] = {
        "mesa": ours,
        "dominoes": theirs,
        "speedup": ratio,
        "guardrail_met": ratio >= GUARDRAIL_SPEEDUP,
    }
    print(
        f"2v2 double-six random games: mesa {ours['hands_per_s']} hands/s "
        f"({ours['us_per_play']} us/play), dominoes {theirs['hands_per_s']} hands/s "
        f"({theirs['us_per_play']} us/play): mesa is {ratio}x "
        f"(guardrail {GUARDRAIL_SPEEDUP}x: {'met' if ratio >= GUARDRAIL_SPEEDUP else 'NOT met'})"
    )
    profile = _profile(R.make_ruleset("dominicana", {"mode": "2v2"}))
    print("where the time goes (dominicana 2v2, cProfile, by own time):\n" + profile)
    results["profile_top"] = profile
    write_result("rules", results)
    return results


if __name__ == "__main__":
    main()
