"""Response times from a match log: a player's own moves only, each timed from the record
before it; bot moves, timeouts and CPU seats are left out."""

from __future__ import annotations

from services.engine import records
from services.engine.integrity_feed import timings_of
from services.engine.rules.model import ChooseOpener

SPEC = {"seats": [{"seat": 0, "player_id": "ana"}, {"seat": 1, "player_id": "cpu", "bot": True}]}


def _log(*recs: records.Record) -> list[bytes]:
    return [records.encode(r) for r in recs]


def test_only_a_players_own_moves_are_timed_from_the_record_before():
    move = ChooseOpener(seat=0, salgo=True)
    log = _log(
        records.CloseReveal(at_ms=1000),
        records.Act(at_ms=3500, seat=0, action=move),  # ana: 2.5 s
        records.Act(at_ms=3600, seat=1, action=move),  # the CPU seat
        records.Act(at_ms=9000, seat=0, action=move, by="timeout"),
        records.Act(at_ms=9100, seat=0, action=move, by="bot"),
        records.Act(at_ms=10_300, seat=0, action=move),  # ana: 1.2 s after the bot move
    )
    assert [(t.player, t.delta_ms, t.at_ms) for t in timings_of(SPEC, log)] == [
        ("ana", 2500, 3500),
        ("ana", 1200, 10_300),
    ]
