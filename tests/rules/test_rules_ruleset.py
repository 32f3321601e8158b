"""Variant differences are RuleSet fields: what the engine and the core read instead of asking
which variant runs."""

from __future__ import annotations

from services.engine import rules as R
from services.engine.rules import variants as V


def test_004_turn_timeout_and_000_claim_are_ruleset_fields() -> None:
    """Sheet 004: "Tienes 25 segundos por turno. Si se acaba el tiempo, el juego juega una
    ficha por ti." Sheet 000: "Si el jugador de turno lleva 2 minutos sin jugar, el otro lado
    puede reclamar la partida y la gana." No other sheet has either."""
    for mode in ("parejas", "1v1", "trios"):
        rs = R.make_ruleset("apuesta", {"mode": mode})
        assert (rs.turn_timeout_ms, rs.claim_after_ms) == (25_000, 0)
    for mode in ("2v2", "1v1"):
        rs = R.make_ruleset("dominicana", {"mode": mode})
        assert (rs.turn_timeout_ms, rs.claim_after_ms) == (0, 120_000)
    for preset in V.CUBAN_PRESETS:
        rs = R.make_ruleset("cubana", {"preset": preset})
        assert (rs.turn_timeout_ms, rs.claim_after_ms) == (0, 0)
    for players in (4, 2):
        rs = R.make_ruleset("casa", {"players": players})
        assert (rs.turn_timeout_ms, rs.claim_after_ms) == (0, 0)


def test_match_end_and_tranque_seat_are_ruleset_fields() -> None:
    """Apuesta: the first side to reach the target, point by point; casa: a side alone in the
    lead at or past it (sheet 003 "si empatan se juega otra mano"), and its tranque goes to the
    side's first seat; elsewhere the hand's winner reaching the target."""
    assert R.make_ruleset("apuesta").match_end == V.MATCH_FIRST_TO_TARGET
    assert R.make_ruleset("casa").match_end == V.MATCH_SOLE_LEADER
    assert R.make_ruleset("casa").tranque_seat == V.TRANQUE_SEAT_FIRST
    for variant in ("dominicana", "cubana"):
        rs = R.make_ruleset(variant)
        assert rs.match_end == V.MATCH_WINNER_REACHES
        assert rs.tranque_seat == V.TRANQUE_SEAT_LOWEST
