"""Sheet 003 (casa) and sheet 004 (apuesta): every rule sentence."""

from __future__ import annotations

import random

import pytest
from msgspec.structs import replace
from rules_helpers import T, kinds, play, position, run_replay
from rules_sim import deal

from services.engine import rules as R

# ----------------------------------------------------------------------------- sheet 003: casa


def test_003_players_two_or_four_pairs_1_3_and_2_4():
    """'En línea se requieren dos o cuatro personas' / 'Las parejas son 1 + 3 y 2 + 4' /
    'las parejas requieren cuatro'."""
    rs = R.make_ruleset("casa", {})
    assert rs.seats == 4 and rs.pairs and rs.side_of(0) == rs.side_of(2)
    assert not R.make_ruleset("casa", {"players": 4, "pairs": False}).pairs
    with pytest.raises(R.InvalidOptions):
        R.make_ruleset("casa", {"players": 2, "pairs": True})
    with pytest.raises(R.InvalidOptions):
        R.make_ruleset("casa", {"players": 3})
    with pytest.raises(R.InvalidOptions):
        R.make_ruleset("casa", {"capicua_bonus": 20})


def test_003_two_players_use_pozo_four_deal_all_28():
    """'Una partida de dos jugadores usa pozo; con cuatro se reparten las 28 fichas.'"""
    assert R.make_ruleset("casa", {"players": 2}).draws
    assert not R.make_ruleset("casa", {}).draws


def test_003_points_winner_collects_rivals_not_partner():
    """'Por puntos: el ganador cobra la suma de las fichas de los perdedores. En parejas se suman
    las fichas de ambos rivales, no las del compañero ganador.'"""
    st = position("casa", {}, [["1-2"], ["5-5"], ["6-6"], ["3-3"]], 0, 1, 0)
    res = play(st, "1-2", "right")[0].result
    assert res.points == 16 and res.scores == (16, 0) and res.next_opener == 0
    st = position("casa", {"pairs": False}, [["1-2"], ["5-5"], ["6-6"], ["3-3"]], 0, 1, 0)
    assert play(st, "1-2", "right")[0].result.points == 28


def test_003_hands_scoring_one_per_hand_bonuses_shown_not_counted():
    """'Por partidas: cada mano ganada suma una victoria' / 'los bonos se muestran en puntos
    pero no cuentan como victorias adicionales.'"""
    o = {"scoring": "hands"}
    assert R.make_ruleset("casa", o).target == 5
    st = position("casa", o, [["3-5"], ["5-5"], ["6-6"], ["3-3"]], 3, 5, 0, scores=[2, 1])
    res = play(st, "3-5", "left")[0].result
    assert res.points == 1 and res.scores == (3, 1)
    assert [(b.kind, b.points, b.counted) for b in res.bonuses] == [("capicua", 25, False)]


def test_003_capicua_non_double_two_distinct_ends_bonus_options():
    """'CAPICÚA: ganar con la última ficha no doble que, antes de jugar, encaja en ambos
    extremos distintos.' Bonus 0, 25 or 30."""
    st = position("casa", {}, [["3-5"], ["5-5"], ["6-6"], ["1-1"]], 3, 5, 0)
    assert [b.points for b in play(st, "3-5", "left")[0].result.bonuses] == [25]
    st = position("casa", {"capicua_bonus": 30}, [["3-5"], ["5-5"], ["6-6"], ["1-1"]], 3, 5, 0)
    assert [b.points for b in play(st, "3-5", "left")[0].result.bonuses] == [30]
    st = position("casa", {"capicua_bonus": 0}, [["3-5"], ["5-5"], ["6-6"], ["1-1"]], 3, 5, 0)
    assert play(st, "3-5", "left")[0].result.bonuses == ()
    st = position("casa", {}, [["4-4"], ["5-5"], ["6-6"], ["1-1"]], 4, 4, 0)
    assert play(st, "4-4", "left")[0].result.bonuses == ()
    st = position("casa", {}, [["4-6"], ["5-5"], ["0-0"], ["1-1"]], 4, 4, 0)
    assert play(st, "4-6", "left")[0].result.bonuses == ()


def _corrido(options, hand0):
    return position(
        options.get("_v", "casa"),
        {k: v for k, v in options.items() if k != "_v"},
        [hand0, ["5-5", "5-6"], ["4-4", "4-5"], ["3-3", "3-4"]],
        0,
        1,
        0,
    )


def test_003_pase_corrido_paid_when_the_player_plays_again():
    """'Pase corrido: los otros tres pasan consecutivamente y quien jugó vuelve a colocar
    ficha' / 'Se abona al volver a jugar, una vez por ciclo.'"""
    st, ev = play(_corrido({}, ["1-2", "2-6", "6-6"]), "1-2", "right")
    assert kinds(ev) == [("play", 0), ("pass", 1), ("pass", 2), ("pass", 3)]
    assert st.scores == (0, 0)
    st, ev = play(st, "2-6", "right")
    assert kinds(ev)[:2] == [("play", 0), ("bonus", "pase_corrido", 0, 25, True)]


def test_003_all_blocked_is_tranque_not_pase_corrido():
    """'Si todos quedan bloqueados es tranque, no pase corrido.' / 'Tranque: pasan todos'."""
    st, ev = play(_corrido({}, ["1-2", "1-1"]), "1-2", "right")
    assert kinds(ev) == [("play", 0), ("pass", 1), ("pass", 2), ("pass", 3), ("pass", 0)]
    res = st.result
    assert res.end == "tranque" and res.bonuses == ()
    # pair totals: seats 0+2 = 2 + 17, seats 1+3 = 21 + 13
    assert res.winner_side == 0 and res.winner_seat == 0 and res.points == 34


def test_003_duel_rivals_pass_is_enough_after_the_pozo():
    """'en duelo basta el pase del rival.' (2 players: the rival draws the pozo first)."""
    st = position("casa", {"players": 2}, [["1-2", "2-6"], ["5-5"]], 0, 1, 0, stock=["4-4"])
    st, ev = play(st, "1-2", "right")
    assert kinds(ev) == [("play", 0), ("draw", 1), ("pass", 1)]
    _, ev = play(st, "2-6", "right")
    assert ("bonus", "pase_corrido", 0, 25, True) in kinds(ev)


def test_003_tranque_individual_lowest_sum_and_tie_nobody():
    """'gana la menor suma individual o de la pareja completa. Con igualdad hay empate: nadie
    gana esa mano ni cobra sus fichas o bono de tranque.' / 'Tras un empate, la salida rota al
    siguiente del que abrió la mano empatada.'"""
    o = {"pairs": False, "tranque_bonus": 25}
    st = position("casa", o, [["1-2", "1-1"], ["5-5"], ["4-4"], ["3-3"]], 0, 1, 0)
    res = play(st, "1-2", "right")[0].result
    assert res.winner_seat == 0 and res.points == 10 + 8 + 6
    assert [(b.kind, b.points) for b in res.bonuses] == [("tranque", 25)]
    assert res.scores == (49, 0, 0, 0)
    st = position("casa", o, [["1-2", "3-3"], ["5-1"], ["4-4"], ["6-6"]], 0, 1, 0, opener=2)
    res = play(st, "1-2", "right")[0].result
    assert res.winner_seat is None and res.points == 0 and res.bonuses == ()
    assert res.next_opener == 3


def test_003_pairs_tranque_first_seat_of_winning_pair_opens():
    """'en parejas por tranque, abre el primer asiento de la pareja ganadora.'"""
    st = position("casa", {}, [["1-2", "6-6"], ["5-5"], ["4-4"], ["3-3"]], 0, 1, 0)
    res = play(st, "1-2", "right")[0].result  # pair totals 12 + 8 = 20, 10 + 6 = 16
    assert res.winner_side == 1 and res.winner_seat == 1 and res.next_opener == 1


def test_003_target_checked_at_hand_end_highest_wins_tie_replays():
    """'La meta de puntos se verifica al terminar la mano, incluidos bonos. Si varios alcanzan la
    meta gana el mayor marcador; si empatan se juega otra mano.'"""
    o = {"pairs": False}
    st = position("casa", o, [["3-5"], ["0-0"], ["0-1"], ["0-2"]], 3, 5, 0, scores=[70, 99, 0, 0])
    res = play(st, "3-5", "left")[0].result  # 3 points + 25 capicúa = 98
    assert res.scores == (98, 99, 0, 0) and not res.match_over
    st = position("casa", o, [["3-5"], ["0-0"], ["0-1"], ["0-2"]], 3, 5, 0, scores=[72, 99, 0, 0])
    res = play(st, "3-5", "left")[0].result
    assert res.scores == (100, 99, 0, 0) and res.match_over and res.match_winner_side == 0
    st = position("casa", o, [["3-5"], ["0-0"], ["0-1"], ["0-2"]], 3, 5, 0, scores=[73, 101, 0, 0])
    res = play(st, "3-5", "left")[0].result
    assert res.scores == (101, 101, 0, 0) and not res.match_over


def test_003_first_hand_opens_with_66_later_winner_any_tile(tmp_path):
    """'La primera mano abre con 6–6. En las siguientes sale el jugador ganador anterior con
    cualquier ficha'."""
    rs = R.make_ruleset("casa", {})
    hands, stock = deal(rs, random.Random(2))
    st = R.start_hand(R.new_match(rs), hands, stock)
    assert R.legal_actions(st) == (R.Play(T("6-6"), R.NO_END),)


def test_003_no_pase_normal_no_salida_bonus():
    """'Los pases normales no dan puntos. No se aplica bono de salida.'"""
    st = position("casa", {}, [["1-2", "2-3"], ["5-5"], ["2-4"], ["3-3"]], 0, 1, 0)
    st, ev = play(st, "1-2", "right")
    assert kinds(ev) == [("play", 0), ("pass", 1)]
    _, ev = play(st, "2-4", "right")
    assert all(k[0] != "bonus" for k in kinds(ev))


def test_003_same_number_both_ends_placed_automatically(tmp_path):
    """'Si las dos puntas tienen el mismo número, la ficha se coloca automáticamente.' (replay:
    no end needed, it goes left)."""
    hands = [
        ["0-0", "0-1", "0-2", "0-3", "0-4", "0-5", "0-6"],
        ["1-1", "1-2", "1-3", "1-4", "1-5", "1-6", "2-2"],
        ["2-3", "2-4", "2-5", "2-6", "3-3", "3-4", "3-5"],
        ["3-6", "4-4", "4-5", "4-6", "5-5", "5-6", "6-6"],
    ]
    s = {
        "variant": "casa",
        "hands": hands,
        "stock": [],
        "opener": 3,
        "first_hand": False,
        "moves": [{"tile": "4-4"}, {"tile": "4-0"}],
    }
    rc, out, _ = run_replay(tmp_path, s)
    assert rc == 0 and out["events"][1]["end"] == "left" and out["events"][1]["ends"] == [0, 4]


# -------------------------------------------------------------------------- sheet 004: apuesta


def test_004_modes_targets_and_deal():
    """'Parejas ... Partida a 200' / '1 vs 1: ... 7 fichas; sin pozo. Partida a 100' / 'Tríos: 3
    jugadores ... 7 fichas' / 'Gana la partida quien llegue primero a la meta: 200 puntos en
    parejas y tríos o 100 en 1 vs 1.'"""
    p, d, t = (R.make_ruleset("apuesta", {"mode": m}) for m in ("parejas", "1v1", "trios"))
    assert (p.target, d.target, t.target) == (200, 100, 200)
    assert (p.seats, d.seats, t.seats) == (4, 2, 3)
    assert not (p.draws or d.draws or t.draws) and p.pairs and not t.pairs


def test_004_first_hand_66_or_highest_double():
    """'En la primera mano sale quien tiene el doble seis (6|6); en 1 vs 1 y tríos, el doble más
    alto.'"""
    for mode in ("parejas", "1v1", "trios"):
        rs = R.make_ruleset("apuesta", {"mode": mode})
        hands, stock = deal(rs, random.Random(8))
        st = R.start_hand(R.new_match(rs), hands, stock)
        dealt = [t for h in hands for t in h]
        doubles = [t for t in dealt if R.tile_str(t)[0] == R.tile_str(t)[2]]
        assert R.legal_actions(st)[0].tile == max(doubles, key=lambda t: R.tile_str(t))
        assert len(R.legal_actions(st)) == 1


def test_004_pase_normal_parejas_when_partner_plays():
    """'Pase normal: si el jugador que sigue tiene que pasar justo después de que alguien jugó,
    el equipo de quien jugó gana 25 puntos (en parejas, si su frente lleva).'"""
    st = position("apuesta", {}, [["1-2", "6-6"], ["5-5"], ["2-4", "4-4"], ["3-3"]], 0, 1, 0)
    st, ev = play(st, "1-2", "right")
    assert kinds(ev) == [("play", 0), ("pass", 1)]
    _, ev = play(st, "2-4", "right")
    assert kinds(ev)[:2] == [("play", 2), ("bonus", "pase", 0, 25, True)]


def test_004_pase_normal_none_when_partner_passes_too():
    """DESIGN: 'none if the partner passes too'."""
    st = position("apuesta", {}, [["1-2", "6-6"], ["5-5"], ["4-4"], ["2-3", "3-3"]], 0, 1, 0)
    _, ev = play(st, "1-2", "right")
    assert kinds(ev) == [("play", 0), ("pass", 1), ("pass", 2)]


def test_004_pase_normal_1v1_when_opponent_passes():
    """1 vs 1: the opponent's pass gives +25 at once."""
    st = position("apuesta", {"mode": "1v1"}, [["1-2", "2-6"], ["5-5"]], 0, 1, 0)
    _, ev = play(st, "1-2", "right")
    assert kinds(ev) == [("play", 0), ("pass", 1), ("bonus", "pase", 0, 25, True)]


def test_004_pase_normal_trios_when_the_third_plays():
    """Tríos: the next passes and the third plays."""
    st = position("apuesta", {"mode": "trios"}, [["1-2", "6-6"], ["5-5"], ["2-4", "4-4"]], 0, 1, 0)
    st, _ = play(st, "1-2", "right")
    _, ev = play(st, "2-4", "right")
    assert ("bonus", "pase", 0, 25, True) in kinds(ev)


def test_004_pase_corrido_30_replaces_25_and_plays_again():
    """'Pase corrido: si después de una jugada nadie más lleva (pasan los tres), pasan todos
    solos y el equipo de quien jugó gana 30 puntos. Le vuelve a tocar a él.'"""
    st = position("apuesta", {}, [["1-2", "2-3"], ["5-5"], ["4-4"], ["3-3"]], 0, 1, 0)
    st, ev = play(st, "1-2", "right")
    assert kinds(ev) == [
        ("play", 0),
        ("pass", 1),
        ("pass", 2),
        ("pass", 3),
        ("bonus", "pase_corrido", 0, 30, True),
    ]
    assert st.turn == 0
    st = position("apuesta", {"mode": "trios"}, [["1-2", "2-3"], ["5-5"], ["4-4"]], 0, 1, 0)
    _, ev = play(st, "1-2", "right")
    assert kinds(ev)[-1] == ("bonus", "pase_corrido", 0, 30, True)


def test_004_bonus_reaching_target_wins_at_once():
    """DESIGN: apuesta bonuses count toward the target and win the match at once."""
    st = position("apuesta", {"mode": "1v1"}, [["1-2", "2-6"], ["5-5"]], 0, 1, 0, scores=[80, 0])
    st2, _ = play(st, "1-2", "right")
    res = st2.result
    assert res.end == "target" and res.match_winner_side == 0 and res.scores == (105, 0)
    assert st2.phase == R.PHASE_OVER and R.legal_actions(st2) == ()


def test_004_pase_with_hand_end_points_then_capicua_then_pase():
    """DESIGN: when the play that earns a pase also ends the hand: first the hand's points and
    capicúa, then the pase; the first side to reach the target in that order wins."""
    st = position(
        "apuesta",
        {"mode": "trios"},
        [["6-6"], ["5-5"], ["1-4"]],
        1,
        3,
        2,
        last_player=0,
        passes=1,
        scores=[190, 0, 180],
    )
    st2, ev = play(st, "1-4", "left")
    assert kinds(ev) == [("play", 2), ("bonus", "pase", 0, 25, True)]
    res = st2.result
    assert res.points == 22 and res.scores == (215, 0, 202)
    assert res.match_over and res.match_winner_side == 2


def test_004_capicua_plus_25_distinct_ends():
    """'Capicúa (+25 extra): ganar con una ficha que se puede jugar por los dos lados con puntas
    distintas.'"""
    st = position("apuesta", {}, [["3-5"], ["5-5"], ["6-6"], ["1-1"]], 3, 5, 0)
    res = play(st, "3-5", "left")[0].result
    assert [(b.kind, b.points) for b in res.bonuses] == [("capicua", 25)]
    assert res.points == 10 + 12 + 2  # every pip left in the hands


def test_004_tranque_fewest_pips_tie_to_opening_side():
    """'Tranque: si nadie puede jugar, la mano se tranca. Gana la pareja (o jugador) que suma
    menos puntos en sus manos.' Ties: the side that opened (tríos: first tied from the opener)."""
    st = position("apuesta", {}, [["1-2", "6-6"], ["5-5"], ["4-4"], ["3-3"]], 0, 1, 0)
    res = play(st, "1-2", "right")[0].result  # sides 20 vs 16
    assert res.winner_side == 1 and res.winner_seat == 3 and res.points == 36
    st = position("apuesta", {}, [["1-2", "5-5"], ["4-4"], ["3-3"], ["6-6"]], 0, 1, 0, opener=1)
    res = play(st, "1-2", "right")[0].result  # 10 + 6 = 16 vs 8 + 12 = 20
    assert res.winner_side == 0
    st = position("apuesta", {}, [["1-2", "6-6"], ["4-4"], ["3-3"], ["5-5"]], 0, 1, 0, opener=1)
    res = play(st, "1-2", "right")[0].result  # 18 vs 18: tie -> opener's side 1
    assert res.winner_side == 1 and res.winner_seat == 1
    st = position(
        "apuesta", {"mode": "trios"}, [["1-2", "4-4"], ["5-3"], ["6-6"]], 0, 1, 0, opener=2
    )
    res = play(st, "1-2", "right")[0].result  # 8, 8, 12: tie -> first from opener 2: seat 0
    assert res.winner_side == 0 and res.next_opener == 0


def test_004_timed_out_turn_plays_the_heaviest_tile():
    """'Tienes 25 segundos por turno. Si se acaba el tiempo, el juego juega una ficha por ti.'"""
    st = position("apuesta", {}, [["4-1", "4-6", "5-1", "0-0"], ["5-5"], ["6-6"], ["3-3"]], 4, 5, 0)
    assert R.heaviest_playable(st) == R.Play(T("4-6"), R.LEFT)
    st = position("apuesta", {}, [["4-5", "0-0"], ["5-5"], ["6-6"], ["3-3"]], 4, 5, 0)
    assert R.heaviest_playable(st) == R.Play(T("4-5"), R.LEFT)


def test_004_later_hand_winner_opens(tmp_path):
    """'En las siguientes sale quien ganó la mano anterior.'"""
    rs = R.make_ruleset("apuesta", {})
    st = position("apuesta", {}, [["1-2"], ["5-5"], ["6-6"], ["3-3"]], 0, 1, 0)
    st2, _ = play(st, "1-2", "right")
    m = R.finish_hand(replace(R.new_match(rs), hands_played=1), st2)
    assert m.next_opener == 0
    hands, stock = deal(rs, random.Random(1))
    h = R.start_hand(m, hands, stock)
    assert h.turn == 0 and len(R.legal_actions(h)) == 7
