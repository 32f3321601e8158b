"""Sheet 002 (cubana): every rule sentence, the presets of section 10, examples of section 11."""

from __future__ import annotations

import random

from msgspec.structs import replace
from rules_helpers import T, kinds, play, position, run_replay, tiles
from rules_sim import deal

from services.engine import rules as R
from services.engine.rules.tiles import PIPS

HAB: dict = {}


def test_002_s1_double_nine_55_tiles_495_pips_ten_per_number():
    """'El doble nueve tiene 55 fichas' / 'Las 55 fichas juntas suman 495 tantos.' / 'Cada
    número del 0 al 9 aparece en diez fichas.'"""
    ts = R.tile_set(9)
    assert len(ts) == 55 and sum(PIPS[t] for t in ts) == 495
    assert sum(1 for t in ts if R.tile_str(t)[0] == R.tile_str(t)[2]) == 10
    for n in range(10):
        assert sum(1 for t in ts if str(n) in R.tile_str(t)) == 10


def test_002_s2_pairs_across_play_to_the_right():
    """'el que juega después de ti siempre es un rival, y el siguiente es tu compañero.'"""
    rs = R.make_ruleset("cubana", {})
    assert rs.seats == 4 and rs.pairs
    assert rs.side_of(0) != rs.side_of(1) and rs.side_of(0) == rs.side_of(2)


def test_002_s3_ten_tiles_fifteen_dormidas_hidden(tmp_path):
    """'Cada jugador toma 10 fichas y solo ve las suyas. Las otras 15 fichas son las dormidas.
    No se juegan, no se cuentan y nadie las ve hasta que termina la mano.'"""
    rs = R.make_ruleset("cubana", {})
    hands, stock = deal(rs, random.Random(3))
    assert len(stock) == 15
    st = R.start_hand(R.new_match(rs), hands, stock, opener=0)
    v = R.view(st, 1)
    assert set(v.hand) == set(hands[1]) and v.revealed_stock is None and v.stock_count == 0
    assert v.counts == (10, 10, 10, 10)


def test_002_s3_five_doubles_redeal_is_a_right():
    """'El jugador que recibe 5 dobles o más puede enseñarlos y pedir un nuevo reparto. Se
    mezcla todo otra vez y el derecho de salida no cambia. Es un derecho, no una obligación.'"""
    rs = R.make_ruleset("cubana", {})
    doubles = [f"{n}-{n}" for n in range(10)]
    others = [R.tile_str(t) for t in R.tile_set(9) if R.tile_str(t) not in doubles]
    hands = [doubles[:5] + others[:5], doubles[5:9] + others[5:11]]
    hands += [others[11:21], others[21:31]]
    stock = [doubles[9]] + others[31:]
    match = R.new_match(rs)
    st = R.start_hand(match, [tiles(h) for h in hands], tiles(stock), opening_side=1)
    assert R.RequestRedeal(0) in R.legal_actions(st, 0)
    assert R.RequestRedeal(1) not in R.legal_actions(st, 1)  # four doubles only
    st2, ev = R.apply(st, R.RequestRedeal(0))
    assert st2.phase == R.PHASE_REDEAL and isinstance(ev[0], R.RedealEvent)
    assert R.finish_hand(match, st2) == match  # same opening right on the new deal
    # a right, not an obligation: the hand goes on without it
    st3, _ = R.apply(st, R.ChooseOpener(1, True))
    st3, _ = R.apply(st3, R.ChooseOpener(3, False))
    assert st3.phase == R.PHASE_PLAY and st3.turn == 1
    assert R.RequestRedeal(0) in R.legal_actions(st3, 0)
    st4, _ = R.apply(st3, R.legal_actions(st3)[0])
    assert R.RequestRedeal(0) not in R.legal_actions(st4, 0)


def _choose(match, side, a, b):
    rs = match.rules
    hands, stock = deal(rs, random.Random(5))
    st = R.start_hand(match, hands, stock, opening_side=side)
    seats = [s for s in range(4) if s % 2 == side]
    st, ev1 = R.apply(st, R.ChooseOpener(seats[0], a))
    hidden = R.view(st, seats[1])
    st, ev2 = R.apply(st, R.ChooseOpener(seats[1], b))
    return st, ev1, ev2, hidden


def test_002_s4_salgo_sal_tu_only_one_salgo_opens():
    """'Si solo uno dice «Salgo», sale él.' and both choices are shown at once."""
    match = R.new_match(R.make_ruleset("cubana", HAB))
    st, ev1, ev2, hidden = _choose(match, 1, False, True)
    assert ev1 == () and hidden.my_choice is None and hidden.events == ()
    assert st.opener == 3 and st.turn == 3
    assert ev2 == (R.ChoiceEvent(1, ((1, False), (3, True)), 3),)


def test_002_s4_same_choice_or_silence_priority_first_seat_of_pair():
    """'Si los dos dicen lo mismo, o ninguno responde, sale el jugador con prioridad: en la
    primera mano, el primer asiento de la pareja' ('Si responde solo uno, el otro cuenta como
    «Sal tú»')."""
    match = R.new_match(R.make_ruleset("cubana", HAB))
    assert _choose(match, 1, True, True)[0].opener == 1
    assert _choose(match, 0, False, False)[0].opener == 0


def test_002_s4_later_hand_winning_pair_chooses_priority_last_winner():
    """'Sale la pareja que ganó la última mano ... y otra vez decide quién sale.' / priority:
    'después, quien ganó la mano anterior'."""
    rs = R.make_ruleset("cubana", HAB)
    st = position("cubana", HAB, [["5-5"], ["6-6"], ["1-2"], ["3-3"]], 0, 1, 2)
    st2, _ = play(st, "1-2", "right")
    res = st2.result
    assert res.winner_seat == 2 and res.next_opener is None and res.next_opening_side == 0
    match = R.finish_hand(replace(R.new_match(rs), hands_played=1), st2)
    assert match.next_opening_side == 0 and match.priority == 2
    st3, *_ = _choose(match, 0, False, False)
    assert st3.opener == 2


def test_002_s4_first_tile_any_tile(tmp_path):
    """'El que sale puede jugar cualquier ficha de su mano.'"""
    rs = R.make_ruleset("cubana", {})
    hands, stock = deal(rs, random.Random(9))
    st = R.start_hand(R.new_match(rs), hands, stock, opener=2)
    assert sorted(a.tile for a in R.legal_actions(st)) == sorted(hands[2])


def test_002_s5_no_spinner_double_opens_two_ends_and_chain():
    """'Si sale un doble 55, los extremos son 5 y 5.' / 'Si sale la 62, los extremos son 6 y 2.'"""
    rs = R.make_ruleset("cubana", {})
    hands, stock = deal(rs, random.Random(9))
    st = R.start_hand(R.new_match(rs), hands, stock, opener=0)
    st2, ev = R.apply(st, R.Play(hands[0][0]))
    assert (st2.left, st2.right) == (ev[0].left, ev[0].right)


def test_002_s5_habana_pass_gives_no_points():
    """'En el juego de La Habana el pase no da ni quita tantos.'"""
    st = position("cubana", HAB, [["1-2", "2-3"], ["5-5"], ["6-6"], ["4-4"]], 0, 1, 0)
    st2, ev = play(st, "1-2", "right")
    assert kinds(ev) == [("play", 0), ("pass", 1), ("pass", 2), ("pass", 3)]
    assert st2.scores == (0, 0) and st2.bonuses == ()


def test_002_s6_tranque_at_once_dormidas_do_not_count():
    """'Tranque: nadie en la mesa tiene ficha para ninguno de los extremos. La mano se cierra
    enseguida, sin esperar cuatro pases.' (0s and 2s may sleep among the dormidas)."""
    st = position("cubana", HAB, [["1-2", "5-5"], ["6-6"], ["3-3"], ["4-4"]], 0, 1, 0)
    st2, ev = play(st, "1-2", "right")
    assert kinds(ev) == [("play", 0)] and st2.result.end == "tranque"
    assert st2.result.blocker == 0


def test_002_s6_last_tile_that_locks_is_pegarse():
    """'Si la última ficha además cierra el juego, cuenta como pegarse, no como tranque.'"""
    st = position("cubana", HAB, [["1-2"], ["6-6"], ["3-3"], ["4-4"]], 0, 1, 0)
    st2, _ = play(st, "1-2", "right")
    assert st2.result.end == "domino" and st2.result.points == 12 + 8


def test_002_s11_example1_pegarse_rivals_only():
    """Ejemplo 1: rivals 98 52 00 (24) and 76 41 (18); partner's 99 33 do not count: 42."""
    st = position(
        "cubana", HAB, [["9-8", "5-2", "0-0"], ["9-9", "3-3"], ["7-6", "4-1"], ["5-8"]], 5, 1, 3
    )
    st2, _ = play(st, "5-8", "left")
    res = st2.result
    assert res.end == "domino" and res.winner_side == 1 and res.points == 42
    assert res.scores == (0, 42)


def _lock(h0, h1, h2, h3, opener=0, options=None):
    # ends (4, 1); seat 3 plays 1-7 -> ends (4, 7): nobody holds a 4 or a 7.
    return play(
        position("cubana", options or HAB, [h0, h1, h2, [*h3, "1-7"]], 4, 1, 3, opener=opener),
        "1-7",
        "right",
    )[0]


def test_002_s11_example2_tranque_one_lowest_hand():
    """Ejemplo 2: sums 14, 17, 17, 17: the first player's pair wins 17 + 17 = 34 and opens."""
    res = _lock(["9-5"], ["9-8"], ["9-6", "2-0"], ["8-6", "3-0"]).result
    assert res.end == "tranque" and res.winner_seat == 0 and res.winner_side == 0
    assert res.points == 34 and res.next_opening_side == 0


def test_002_s11_example3_partners_share_the_lowest():
    """Ejemplo 3: pair A 8 and 8, pair B 9 and 13: pair A wins 22."""
    res = _lock(["8-0"], ["9-0"], ["5-3"], ["8-5"], opener=1).result
    assert res.winner_side == 0 and res.points == 22 and res.winner_seat == 2


def test_002_s11_example4_tied_tranque_nobody_scores_other_pair_opens():
    """Ejemplo 4: B opened; sums 8, 8, 18, 14: tie, nobody scores, pair A opens."""
    res = _lock(["8-0"], ["5-3"], ["9-9"], ["9-5"], opener=1).result
    assert res.winner_seat is None and res.winner_side is None and res.points == 0
    assert res.scores == (0, 0) and res.next_opener is None and res.next_opening_side == 0


def test_002_s11_example5_viajera_wins_the_match():
    """Ejemplo 5: 40 a 30, A goes out; 82 + 29 = 111, a viajera; A has 151 and wins."""
    st = position(
        "cubana",
        HAB,
        [["1-2"], ["9-9", "9-8", "8-8", "9-7", "8-7"], ["0-0"], ["7-7", "9-6"]],
        5,
        1,
        0,
        scores=[40, 30],
    )
    res = play(st, "1-2", "right")[0].result
    assert res.points == 111 and res.scores == (151, 30) and res.viajera
    assert res.match_over and res.match_winner_side == 0


def test_002_s7_viajera_wins_at_once_below_the_target():
    """'Cuando una pareja suma 100 tantos o más en una sola mano, se llama viajera y gana la
    partida en el acto.' (Miami plays to 150.)"""
    st = position(
        "cubana",
        {"preset": "miami"},
        [["1-2"], ["9-9", "9-8", "8-8", "9-7", "8-7"], ["0-0"], ["7-7", "9-6"]],
        5,
        1,
        0,
    )
    res = play(st, "1-2", "right")[0].result
    assert res.scores == (111, 0) and res.match_over and res.viajera


def test_002_s11_example6_pollona_and_107_stays_107():
    """Ejemplo 6: 92 a 0, A wins a hand of 15: 107 and a pollona. 'Los tantos de más se anotan
    completos: 107 se queda en 107.'"""
    rs = R.make_ruleset("cubana", HAB)
    st = position("cubana", HAB, [["1-2"], ["9-6"], ["0-1"], ["0-0"]], 5, 1, 0, scores=[92, 0])
    st2, _ = play(st, "1-2", "right")
    assert st2.result.scores == (107, 0) and st2.result.match_over
    match = R.finish_hand(replace(R.new_match(rs), scores=(92, 0), hands_played=3), st2)
    assert match.over and match.winner_side == 0 and match.pollona and match.scores == (107, 0)


def test_002_s11_example7_what_plays_there_are():
    """Ejemplo 7: ends 4 and 9, hand 49 99 44 26 14: five plays; the 26 cannot be played."""
    st = position(
        "cubana", HAB, [["4-9", "9-9", "4-4", "2-6", "1-4"], ["0-0"], ["0-1"], ["0-2"]], 4, 9, 0
    )
    acts = {(R.tile_str(a.tile), a.end) for a in R.legal_actions(st)}
    assert acts == {
        ("9-4", R.LEFT),
        ("9-4", R.RIGHT),
        ("9-9", R.RIGHT),
        ("4-4", R.LEFT),
        ("4-1", R.LEFT),
    }
    st2, _ = play(st, "4-9", "left")
    assert (st2.left, st2.right) == (9, 9)
    st2, _ = play(st, "4-9", "right")
    assert (st2.left, st2.right) == (4, 4)


def test_002_s8_match_to_100():
    """'La partida es a 100 tantos.' / 'termina en cuanto una pareja llega a 100 o más.'"""
    assert R.make_ruleset("cubana", {}).target == 100
    st = position("cubana", HAB, [["1-2"], ["9-6"], ["0-1"], ["0-0"]], 5, 1, 0, scores=[84, 0])
    assert play(st, "1-2", "right")[0].result.match_over is False
    st = position("cubana", HAB, [["1-2"], ["9-6"], ["0-1"], ["0-0"]], 5, 1, 0, scores=[85, 0])
    assert play(st, "1-2", "right")[0].result.match_over is True


def test_002_s9_illegal_moves_refused(tmp_path):
    """'El servidor no acepta una ficha que no coincide, una jugada fuera de turno ni un pase
    teniendo ficha.'"""
    st = position("cubana", HAB, [["4-9", "2-6"], ["0-0"], ["0-1"], ["0-2"]], 4, 9, 0)
    for action in (R.Play(T("2-6"), R.LEFT), R.Play(T("0-0"), R.LEFT)):
        try:
            R.apply(st, action)
        except R.IllegalAction:
            continue
        raise AssertionError("accepted an illegal play")


def test_002_s10_presets():
    """Section 10 table: La Habana / Miami / Oriente / barrio."""
    hab = R.make_ruleset("cubana", {})
    mia = R.make_ruleset("cubana", {"preset": "miami"})
    ori = R.make_ruleset("cubana", {"preset": "oriente"})
    bar = R.make_ruleset("cubana", {"preset": "barrio"})
    assert (hab.target, mia.target, ori.target, bar.target) == (100, 150, 20, 100)
    assert mia.series_best_of == 3 and hab.series_best_of == 1
    assert (ori.max_pip, ori.hand_size) == (6, 7) and (hab.max_pip, hab.hand_size) == (9, 10)
    assert hab.capicua == mia.capicua == ori.capicua == "none" and bar.capicua == "double"
    assert mia.primer_pase_points == 2 and ori.doble_sin_respuesta_points == 20
    assert hab.primer_pase_points == 0 and hab.doble_sin_respuesta_points == 0


def test_002_s10_miami_first_pass_of_the_match_gives_2():
    """'El primer pase de la partida da 2 tantos' (to the passer's rivals, first hand only)."""
    o = {"preset": "miami"}
    st = position(
        "cubana", o, [["1-2", "2-3"], ["5-5"], ["6-6"], ["4-4"]], 0, 1, 0, first_hand=True
    )
    st2, ev = play(st, "1-2", "right")
    assert kinds(ev)[:3] == [("play", 0), ("pass", 1), ("bonus", "primer_pase", 0, 2, True)]
    assert st2.scores == (2, 0) and len(st2.bonuses) == 1
    st = position("cubana", o, [["1-2", "2-3"], ["5-5"], ["6-6"], ["4-4"]], 0, 1, 0)
    assert play(st, "1-2", "right")[0].bonuses == ()


def test_002_s10_miami_best_of_three_partidas():
    """'150, mejor de tres partidas': a won partida resets the scores; two partidas win."""
    rs = R.make_ruleset("cubana", {"preset": "miami"})
    st = position(
        "cubana",
        {"preset": "miami"},
        [["1-2"], ["9-6"], ["0-0"], ["0-1"]],
        5,
        1,
        0,
        scores=[140, 5],
    )
    st2, _ = play(st, "1-2", "right")
    m = R.finish_hand(replace(R.new_match(rs), scores=(140, 5), hands_played=4), st2)
    assert not m.over and m.partidas_won == (1, 0) and m.scores == (0, 0) and m.partida == 2
    assert R.needs_opening_side(m)
    m2 = R.finish_hand(replace(m, scores=(140, 5), hands_played=4), st2)
    assert m2.over and m2.winner_side == 0 and m2.partidas_won == (2, 0)


def test_002_s10_oriente_66_opens_target_20_right_of_opener(tmp_path):
    """Oriente: 'Sale con el 66 quien lo tenga'; 'Partida a 20'; 'El de la derecha'."""
    rs = R.make_ruleset("cubana", {"preset": "oriente"})
    hands, stock = deal(rs, random.Random(11))
    assert stock == []
    st = R.start_hand(R.new_match(rs), hands, stock)
    holder = next(s for s in range(4) if T("6-6") in hands[s])
    assert st.opener == holder and R.legal_actions(st) == (R.Play(T("6-6"), R.NO_END),)
    st = position(
        "cubana", {"preset": "oriente"}, [["1-2"], ["6-6"], ["3-3"], ["4-4"]], 0, 1, 0, opener=2
    )
    assert play(st, "1-2", "right")[0].result.next_opener == 3


def test_002_s10_oriente_unanswered_opening_double_gives_20_and_wins_at_20(tmp_path):
    """Oriente: 'Salida de doble sin respuesta del siguiente: 20'; bonuses reaching the target
    win the match at once (DESIGN)."""
    hands = [
        ["0-0", "0-1", "0-2", "0-3", "0-4", "0-5", "0-6"],
        ["1-1", "1-2", "1-3", "1-4", "1-5", "1-6", "2-2"],
        ["2-3", "2-4", "2-5", "2-6", "3-3", "3-4", "3-5"],
        ["3-6", "4-4", "4-5", "4-6", "5-5", "5-6", "6-6"],
    ]
    s = {
        "variant": "cubana",
        "options": {"preset": "oriente"},
        "hands": hands,
        "stock": [],
        "opener": 0,
        "first_hand": False,
        "moves": [{"tile": "0-0"}],
    }
    rc, out, _ = run_replay(tmp_path, s)
    assert rc == 0 and out["events"][:3] == [
        {"type": "play", "seat": 0, "tile": "0-0", "end": None, "ends": [0, 0]},
        {"type": "pass", "seat": 1},
        {"type": "bonus", "kind": "doble_sin_respuesta", "side": 0, "points": 20, "counted": True},
    ]
    assert out["result"] == {
        "end": "target",
        "winner_seat": None,
        "winner_side": 0,
        "points": 0,
        "bonuses": [out["events"][2]],
        "scores": [20, 0],
        "next_opener": None,
        "next_opening_side": None,
        "match_over": True,
        "match_winner_side": 0,
    }
    assert out["awaiting"] is None
    rc, _, err = run_replay(tmp_path, {**s, "moves": [{"tile": "0-0"}, {"tile": "0-1"}]})
    assert rc == 2 and err.startswith("move 1:")


def test_002_s10_oriente_and_barrio_tied_tranque_goes_to_the_opening_pair():
    """'Tranque empatado: Lo gana la pareja que salió' (oriente, barrio)."""
    res = _lock(["8-0"], ["5-3"], ["9-9"], ["9-5"], opener=1, options={"preset": "barrio"}).result
    assert res.winner_side == 1 and res.winner_seat == 1 and res.points == 8 + 18
    assert res.next_opener == 1


def test_002_s10_barrio_highest_double_opens_winner_opens_next_capicua_doubles():
    """barrio: 'Sale el doble más alto'; 'El propio ganador'; 'Duplica la mano'."""
    o = {"preset": "barrio"}
    rs = R.make_ruleset("cubana", o)
    hands, stock = deal(rs, random.Random(4))
    st = R.start_hand(R.new_match(rs), hands, stock)
    best = max(
        (t for h in hands for t in h), key=lambda t: (R.tile_str(t)[0] == R.tile_str(t)[2], PIPS[t])
    )
    assert R.legal_actions(st) == (R.Play(best, R.NO_END),)
    st = position("cubana", o, [["0-0"], ["9-6"], ["3-5"], ["0-1"]], 3, 5, 2)
    st2, ev = play(st, "3-5", "left")
    assert kinds(ev)[-1] == ("bonus", "capicua", 0, 16, True)
    assert st2.result.points == 16 and st2.result.scores == (32, 0)
    assert st2.result.next_opener == 2


def test_002_s10_capicua_never_with_a_double_nor_equal_ends():
    """'Capicúa es ganar con una última ficha que sirve para los dos extremos a la vez (no un
    doble).'"""
    o = {"preset": "barrio"}
    st = position("cubana", o, [["5-5"], ["9-6"], ["0-0"], ["0-1"]], 5, 5, 0)
    assert play(st, "5-5", "left")[0].result.bonuses == ()
    st = position("cubana", o, [["5-6"], ["9-6"], ["0-0"], ["0-1"]], 5, 5, 0)
    assert play(st, "5-6", "left")[0].result.bonuses == ()
    st = position("cubana", HAB, [["3-5"], ["9-6"], ["0-0"], ["0-1"]], 3, 5, 0)
    assert play(st, "3-5", "left")[0].result.bonuses == ()  # 'En La Habana no se usa'


def test_002_replay_requires_opener(tmp_path):
    """Issue 3: 'opener ... required for cubana'."""
    rs = R.make_ruleset("cubana", {})
    hands, stock = deal(rs, random.Random(1))
    s = {
        "variant": "cubana",
        "hands": [[R.tile_str(t) for t in h] for h in hands],
        "stock": [R.tile_str(t) for t in stock],
    }
    rc, _, err = run_replay(tmp_path, s)
    assert rc == 2 and err.startswith("move 0:")
    rc, out, _ = run_replay(tmp_path, {**s, "opener": 3})
    assert rc == 0 and out["awaiting"] == {"seat": 3}
