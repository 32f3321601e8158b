"""Sheet 000 (dominicana): every rule sentence and worked example."""

from __future__ import annotations

from rules_helpers import T, kinds, play, position, run_replay

from services.engine import rules as R

DEAL_C = [  # seat 0 holds every 0: the opening 0-0 makes the other three pass
    ["0-0", "0-1", "0-2", "0-3", "0-4", "0-5", "0-6"],
    ["1-1", "1-2", "1-3", "1-4", "1-5", "1-6", "2-2"],
    ["2-3", "2-4", "2-5", "2-6", "3-3", "3-4", "3-5"],
    ["3-6", "4-4", "4-5", "4-6", "5-5", "5-6", "6-6"],
]
DEAL_A = [  # seat 1 has no 0, seat 2 has 0-1
    ["0-0", "0-2", "0-3", "0-4", "0-5", "0-6", "6-6"],
    ["1-1", "1-2", "1-3", "1-4", "1-5", "1-6", "2-2"],
    ["0-1", "2-3", "2-4", "2-5", "2-6", "3-3", "3-4"],
    ["3-5", "3-6", "4-4", "4-5", "4-6", "5-5", "5-6"],
]
DEAL_B = [  # seats 1 and 2 have no 0, seat 3 has 0-1
    ["0-0", "0-2", "0-3", "0-4", "0-5", "0-6", "6-6"],
    ["1-1", "1-2", "1-3", "1-4", "1-5", "1-6", "2-2"],
    ["3-5", "2-3", "2-4", "2-5", "2-6", "3-3", "3-4"],
    ["0-1", "3-6", "4-4", "4-5", "4-6", "5-5", "5-6"],
]


def scen(hands, moves, **kw):
    return {"variant": "dominicana", "hands": hands, "stock": [], "moves": moves, **kw}


def test_000_las_fichas_28_tiles_7_each_2v2_no_boneyard(tmp_path):
    """'El juego tiene 28 fichas. Cada jugador recibe 7.' / 'En 2v2 no hay pozo'."""
    rs = R.make_ruleset("dominicana", {})
    assert len(R.tile_set(rs.max_pip)) == 28 and rs.hand_size == 7 and not rs.draws
    rc, _, err = run_replay(tmp_path, scen(DEAL_C, [], stock=["0-0"]))
    assert rc == 2 and err.startswith("move 0:")


def test_000_1v1_14_tiles_in_the_pozo():
    """'En 1v1, las otras 14 fichas van al pozo.'"""
    rs = R.make_ruleset("dominicana", {"mode": "1v1"})
    assert rs.seats == 2 and rs.draws and len(R.tile_set(6)) - 2 * rs.hand_size == 14


def test_000_first_round_highest_double_placed_for_you(tmp_path):
    """'En la primera ronda sale el doble más alto de la mesa. Esa ficha se pone sola.'"""
    rc, out, _ = run_replay(tmp_path, scen(DEAL_C, []))
    assert rc == 0 and out["awaiting"] == {"seat": 3} and out["result"] is None
    rc, out, _ = run_replay(tmp_path, scen(DEAL_C, [{"tile": "6-6"}]))
    assert out["events"][0] == {
        "type": "play",
        "seat": 3,
        "tile": "6-6",
        "end": None,
        "ends": [6, 6],
    }
    rc, out, err = run_replay(tmp_path, scen(DEAL_C, [{"tile": "5-5"}]))
    assert rc == 2 and out == "" and err.startswith("move 0:") and err.count("\n") == 1
    rc, _, err = run_replay(tmp_path, scen(DEAL_C, [], opener=0))
    assert rc == 2 and err.startswith("move 0:")


def test_000_no_double_highest_tile_opens(tmp_path):
    """'Si nadie tiene doble, sale la ficha más alta.' (1v1: doubles all in the pozo)."""
    hands = [
        ["0-1", "0-2", "0-3", "0-4", "0-5", "0-6", "1-2"],
        ["1-3", "1-4", "1-5", "1-6", "2-3", "2-4", "5-6"],
    ]
    used = {x for h in hands for x in h}
    stock = [
        R.tile_str(t)
        for t in R.tile_set(6)
        if R.tile_str(t) not in used and f"{R.tile_str(t)[2]}-{R.tile_str(t)[0]}" not in used
    ]
    s = {"variant": "dominicana", "options": {"mode": "1v1"}, "hands": hands, "stock": stock}
    rc, out, _ = run_replay(tmp_path, s)
    assert rc == 0 and out["awaiting"] == {"seat": 1}
    rc, out, err = run_replay(tmp_path, {**s, "moves": [{"tile": "2-4"}]})
    assert rc == 2 and err.startswith("move 0:")


def test_000_later_rounds_winner_opens_with_any_tile(tmp_path):
    """'En las demás rondas sale el que ganó la ronda anterior, con la ficha que quiera.'"""
    rc, out, _ = run_replay(tmp_path, scen(DEAL_C, [{"tile": "2-5"}], opener=2, first_hand=False))
    assert rc == 0 and out["events"][0]["ends"] == [2, 5]
    rc, out, _ = run_replay(tmp_path, scen(DEAL_C, [{"tile": "5-2"}], opener=2, first_hand=False))
    assert out["events"][0]["ends"] == [5, 2]


def test_000_must_play_if_you_can_no_pass_with_a_play():
    """'Si tienes una ficha que pega, tienes que jugarla. No se puede pasar con jugada.'"""
    st = position("dominicana", {}, [["0-3", "6-6"], ["1-1"], ["2-2"], ["4-4"]], 0, 5, 0)
    acts = R.legal_actions(st)
    assert acts and all(isinstance(a, R.Play) for a in acts)
    assert [a.tile for a in acts] == [T("0-3")]


def test_000_1v1_draw_until_one_fits_then_pass_only_when_pozo_empty():
    """'Si no tienes jugada, en 1v1 jalas del pozo hasta que te salga una. Solo pasas cuando el
    pozo está vacío.'"""
    st = position(
        "dominicana",
        {"mode": "1v1"},
        [["1-2", "2-6"], ["5-5"]],
        0,
        1,
        0,
        stock=["4-4", "3-5", "2-3", "6-5"],
    )
    st2, ev = play(st, "1-2", "right")
    assert kinds(ev) == [("play", 0), ("draw", 1), ("draw", 1), ("draw", 1)]
    assert st2.turn == 1 and st2.stock == (T("6-5"),)
    st = position(
        "dominicana", {"mode": "1v1"}, [["1-2", "2-6"], ["5-5"]], 0, 1, 0, stock=["4-4", "3-5"]
    )
    st2, ev = play(st, "1-2", "right")
    assert kinds(ev) == [("play", 0), ("draw", 1), ("draw", 1), ("pass", 1)]
    assert st2.turn == 0 and st2.stock == ()


def test_000_2v2_no_draw_you_pass():
    """'En 2v2 no se jala: si no puedes jugar, pasas.'"""
    st = position("dominicana", {}, [["1-2", "2-6"], ["5-5"], ["2-4"], ["3-3"]], 0, 1, 0)
    _, ev = play(st, "1-2", "right")
    assert kinds(ev) == [("play", 0), ("pass", 1)]


def test_000_domino_side_takes_every_pip_partner_included():
    """'Su lado se lleva todas las pintas que quedan en las manos. En parejas, eso incluye la
    mano de su frente.'"""
    st = position("dominicana", {}, [["1-2"], ["5-5"], ["6-6"], ["3-3", "0-4"]], 0, 1, 0)
    st2, _ = play(st, "1-2", "right")
    res = st2.result
    assert res.end == "domino" and res.winner_seat == 0 and res.points == 10 + 12 + 10
    assert res.next_opener == 0 and res.scores == (32, 0)


def test_000_capicua_example_ends_3_and_5_out_with_3_5():
    """Capicúa example 1: 'las puntas son 3 y 5, y te quedas sin fichas con el 3-5.'"""
    st = position("dominicana", {}, [["3-5"], ["0-0"], ["1-1"], ["6-6"]], 3, 5, 0)
    st2, ev = play(st, "3-5", "left")
    assert kinds(ev)[-1] == ("bonus", "capicua", 0, 25, True)
    assert st2.result.points == 14 and st2.result.scores == (39, 0)


def test_000_capicua_example_equal_ends_5_5_out_with_5_6():
    """Capicúa example 2: 'las puntas son 5 y 5, y sales con el 5-6.'"""
    st = position("dominicana", {}, [["5-6"], ["0-0"], ["1-1"], ["2-2"]], 5, 5, 0)
    _, ev = play(st, "5-6", "left")
    assert ("bonus", "capicua", 0, 25, True) in kinds(ev)


def test_000_capicua_example_double_2_2_on_ends_2_and_2():
    """Capicúa example 3: 'las puntas son 2 y 2, y sales con el 2-2.'"""
    st = position("dominicana", {}, [["2-2"], ["0-0"], ["1-1"], ["3-3"]], 2, 2, 0)
    _, ev = play(st, "2-2", "left")
    assert ("bonus", "capicua", 0, 25, True) in kinds(ev)


def test_000_not_capicua_when_last_tile_fits_one_end_only():
    """'Si tu última ficha pega por las dos puntas de la mesa, es capicúa' (not otherwise)."""
    st = position("dominicana", {}, [["3-3"], ["0-0"], ["1-1"], ["6-6"]], 3, 5, 0)
    st2, ev = play(st, "3-3", "left")
    assert st2.result.bonuses == () and all(k[0] != "bonus" for k in kinds(ev))


def test_000_capicua_always_counts_even_past_target():
    """DESIGN: capicúa (+25) always counts, even past the target."""
    st = position("dominicana", {}, [["3-5"], ["0-0"], ["1-1"], ["6-6"]], 3, 5, 0, scores=[95, 0])
    st2, _ = play(st, "3-5", "left")
    assert st2.result.bonuses[0].counted and st2.result.scores == (95 + 14 + 25, 0)
    assert st2.result.match_over and st2.result.match_winner_side == 0


def _tranque_position(hand0, hand1, opener=0):
    # ends (0, 1); seat 0 plays 1-2 on the right -> ends (0, 2): nobody holds a 0 or a 2.
    return position(
        "dominicana", {}, [["1-2", *hand0], hand1, ["4-4"], ["3-3"]], 0, 1, 0, opener=opener
    )


def test_000_tranque_at_once_blocker_against_his_right_right_wins():
    """'La ronda se acaba ahí mismo' / 'El que puso esa ficha trancó. Cuenta sus pintas contra
    las del jugador a su derecha.' / 'Solo cuentan las manos de ellos dos, no la de su frente.'"""
    st2, ev = play(_tranque_position(["6-6"], ["5-5"]), "1-2", "right")
    res = st2.result
    assert kinds(ev) == [("play", 0)]  # nobody passes first
    assert res.end == "tranque" and res.winner_seat == 1 and res.winner_side == 1
    assert res.points == 12 + 10 + 8 + 6  # every pip in every hand
    assert res.next_opener == 1


def test_000_tranque_blocker_wins_with_fewer_pips():
    """'Gana el que tenga menos pintas. Su lado se lleva todas las pintas que quedan.'"""
    st2, _ = play(_tranque_position(["1-1"], ["5-5"]), "1-2", "right")
    assert st2.result.winner_seat == 0 and st2.result.points == 2 + 10 + 8 + 6
    assert st2.result.next_opener == 0


def test_000_tranque_tie_goes_to_the_opener_of_the_round():
    """'Si empatan, gana el jugador que salió en esa ronda, y su lado se lleva los puntos.'"""
    st2, _ = play(_tranque_position(["5-5"], ["4-6"], opener=3), "1-2", "right")
    assert st2.result.winner_seat == 3 and st2.result.winner_side == 1
    assert st2.result.next_opener == 3 and st2.result.points == 10 + 10 + 8 + 6
    st2, _ = play(_tranque_position(["5-5"], ["4-6"], opener=2), "1-2", "right")
    assert st2.result.winner_seat == 2 and st2.result.winner_side == 0


def test_000_lock_with_last_tile_is_domino_not_tranque():
    """'Si trancas con tu última ficha, es dominó, no tranque.'"""
    st2, _ = play(
        position("dominicana", {}, [["1-2"], ["5-5"], ["4-4"], ["3-3"]], 0, 1, 0), "1-2", "right"
    )
    assert st2.result.end == "domino" and st2.result.winner_seat == 0


def _veinticinco(scores):
    return position(
        "dominicana",
        {},
        [["1-2", "2-3"], ["5-5", "5-6"], ["4-4", "4-5"], ["3-3", "3-4"]],
        0,
        1,
        0,
        scores=scores,
    )


def test_000_veinticinco_three_pass_plus_25_and_play_again():
    """'Si después de tu ficha pasan los otros tres, tu lado gana +25 al momento y te toca jugar
    otra vez.' / 'La ronda sigue, y tú siempre tienes jugada.'"""
    st2, ev = play(_veinticinco([0, 0]), "1-2", "right")
    assert kinds(ev) == [
        ("play", 0),
        ("pass", 1),
        ("pass", 2),
        ("pass", 3),
        ("bonus", "pase_corrido", 0, 25, True),
    ]
    assert st2.turn == 0 and st2.scores == (25, 0) and R.legal_actions(st2)


def test_000_veinticinco_can_happen_twice_in_a_round():
    """'Puede pasar más de una vez en la misma ronda.'"""
    st = position(
        "dominicana",
        {},
        [["1-2", "2-3", "3-6"], ["5-5"], ["4-4"], ["1-1", "5-1"]],
        0,
        1,
        0,
    )
    st, _ = play(st, "1-2", "right")  # ends 0, 2: seat 3 has 1s only
    assert st.scores == (25, 0)
    st, _ = play(st, "2-3", "right")  # ends 0, 3: nobody else has 0 or 3
    assert st.scores == (50, 0) and st.turn == 0


def test_000_veinticinco_not_counted_when_it_reaches_the_target():
    """'Si esos 25 llevan a tu lado a la meta o más, no cuentan.'"""
    st2, ev = play(_veinticinco([75, 0]), "1-2", "right")
    assert kinds(ev)[-1] == ("bonus", "pase_corrido", 0, 25, False) and st2.scores == (75, 0)
    st2, _ = play(_veinticinco([74, 0]), "1-2", "right")
    assert st2.scores == (99, 0) and st2.phase == R.PHASE_PLAY


def test_000_veinticinco_only_in_2v2():
    """'Solo en 2v2.' (1v1: the rival's pass gives nothing)."""
    st = position("dominicana", {"mode": "1v1"}, [["1-2", "2-6"], ["5-5"]], 0, 1, 0)
    _, ev = play(st, "1-2", "right")
    assert kinds(ev) == [("play", 0), ("pass", 1)]


def test_000_pase_de_salida_counted_when_partner_plays(tmp_path):
    """'Si el jugador que sigue al que salió no puede jugar a la primera ficha de la ronda, el
    lado del que salió gana +25 cuando su frente juega.'"""
    rc, out, _ = run_replay(
        tmp_path, scen(DEAL_A, [{"tile": "0-0"}, {"tile": "0-1"}], opener=0, first_hand=False)
    )
    assert [e["type"] for e in out["events"]][:4] == ["play", "pass", "play", "bonus"]
    assert out["events"][3] == {
        "type": "bonus",
        "kind": "pase_salida",
        "side": 0,
        "points": 25,
        "counted": True,
    }
    assert out["awaiting"] == {"seat": 0}


def test_000_pase_de_salida_not_counted_when_partner_passes_too(tmp_path):
    """'Si su frente tampoco puede jugar, esos 25 no cuentan.'"""
    rc, out, _ = run_replay(
        tmp_path, scen(DEAL_B, [{"tile": "0-0"}, {"tile": "0-1"}], opener=0, first_hand=False)
    )
    assert [e["type"] for e in out["events"]] == ["play", "pass", "pass", "bonus", "play"]
    assert out["events"][3]["counted"] is False and out["events"][3]["kind"] == "pase_salida"


def test_000_pase_de_salida_three_pass_is_one_pase_corrido(tmp_path):
    """'Si los otros tres pasan a la primera ficha, es un pase corrido: 25 una sola vez.'"""
    rc, out, _ = run_replay(tmp_path, scen(DEAL_C, [{"tile": "0-0"}], opener=0, first_hand=False))
    bonuses = [e for e in out["events"] if e["type"] == "bonus"]
    assert [(b["kind"], b["counted"]) for b in bonuses] == [
        ("pase_salida", False),
        ("pase_corrido", True),
    ]
    assert out["awaiting"] == {"seat": 0}


def test_000_pase_de_salida_counts_in_the_first_round_too(tmp_path):
    """'Vale en todas las rondas, también en la primera, donde el doble más alto se pone solo.'"""
    hands = [
        ["3-5", "3-4", "4-4", "4-5", "0-1", "5-5", "5-6"],
        ["0-0", "0-2", "0-3", "0-4", "0-5", "0-6", "6-6"],
        ["1-1", "1-2", "1-3", "1-4", "1-5", "2-2", "3-3"],
        ["1-6", "2-3", "2-4", "2-5", "2-6", "3-6", "4-6"],
    ]
    rc, out, _ = run_replay(tmp_path, scen(hands, [{"tile": "6-6"}, {"tile": "6-3"}]))
    assert rc == 0
    assert out["events"][-1]["kind"] == "pase_salida" and out["events"][-1]["counted"]


def test_000_pase_de_salida_not_counted_when_it_reaches_the_target(tmp_path):
    """'Si esos 25 llevan al lado del que salió a la meta o más, no cuentan.'"""
    rc, out, _ = run_replay(
        tmp_path,
        scen(
            DEAL_A, [{"tile": "0-0"}, {"tile": "0-1"}], opener=0, first_hand=False, scores=[80, 10]
        ),
    )
    assert out["events"][3]["kind"] == "pase_salida" and out["events"][3]["counted"] is False


def test_000_match_to_100_or_200_and_bonuses_never_win():
    """'La partida es a 100 puntos ... puedes ponerla a 200.' / 'Un pase corrido o un pase de
    salida nunca da la partida.' / 'La partida solo se gana ganando una ronda'."""
    assert R.make_ruleset("dominicana", {}).target == 100
    assert R.make_ruleset("dominicana", {"target": 200}).target == 200
    st2, _ = play(_veinticinco([99, 0]), "1-2", "right")
    assert st2.phase == R.PHASE_PLAY and st2.scores == (99, 0)
    st = position("dominicana", {}, [["1-2"], ["5-5"], ["6-6"], ["3-3"]], 0, 1, 0, scores=[90, 0])
    st2, _ = play(st, "1-2", "right")
    assert st2.result.match_over and st2.result.match_winner_side == 0


def test_000_claim_helper_side_on_turn():
    """'Si el jugador de turno lleva 2 minutos sin jugar, el otro lado puede reclamar' (the
    engine needs the side on turn)."""
    st = _veinticinco([0, 0])
    assert R.side_on_turn(st) == 0
    st2, _ = play(st, "1-2", "right")
    assert R.side_on_turn(st2) == 0
