"""The detectors over planted abuse (each flagged with the right kind, players and evidence)
and over honest histories (few alerts: the false-positive rate stated in
docs/explanation/integrity.md)."""

from __future__ import annotations

import msgspec
import pytest

from bench.integrity_honest import false_positive_rate, honest_history
from integrity import config as integrity_config
from integrity.config import IntegrityConfig
from integrity.detectors import detect, flows_of
from tests.integrity import histories as h

CFG = IntegrityConfig()


def _kinds(alerts, kind):
    return [a for a in alerts if a.kind == kind]


def test_a_pot_flows_from_each_loser_to_each_winner():
    flows = flows_of(h.pot("m", "w", "l", 8000, 0, True))
    assert flows == [("l", "w", 6400)]  # $160 pot, $16 commission, winner up $64


def test_a_dumping_ring_is_flagged_pair_by_pair_with_its_matches():
    alerts = detect(h.merged(honest_history(11, players=120, days=10), h.dumping_ring()), CFG)
    pairs = {(a.counterpart, a.player) for a in _kinds(alerts, "pair_flow")}
    assert {("ring_a", "ring_b"), ("ring_b", "ring_c")} <= pairs
    ab = next(a for a in alerts if a.kind == "pair_flow" and a.player == "ring_b")
    assert ab.figures["net_cents"] == 10 * 6400 and ab.figures["private_matches"] == 10
    assert ab.figures["gross_back_cents"] == 0
    assert {e.ref for e in ab.evidence if e.kind == "match"} == {f"ring-ab-{d}" for d in range(10)}
    assert any(e.kind == "flow" and e.ref == "ring_a>ring_b:USD" for e in ab.evidence)
    losing = {(a.player, a.counterpart) for a in _kinds(alerts, "repeated_losing")}
    assert {("ring_a", "ring_b"), ("ring_b", "ring_c")} <= losing


def test_a_laundering_chain_is_flagged_with_deposit_matches_and_withdrawal():
    chain = h.laundering_chain()
    alerts = detect(h.merged(honest_history(12, players=120, days=10), chain), CFG)
    [found] = [a for a in _kinds(alerts, "chain") if a.player == "mule_y"]
    assert found.counterpart == "mule_x"
    assert found.figures["passed_cents"] == 6 * 6400 and found.figures["withdrawn_cents"] == 45_000
    refs = {(e.kind, e.ref) for e in found.evidence}
    deposit, _, withdrawal = chain.moves
    assert ("entry", str(deposit.entry_id)) in refs and ("entry", str(withdrawal.entry_id)) in refs
    assert {("match", f"mule-{i}") for i in range(6)} <= refs


def test_structuring_little_play_and_rapid_in_and_out_are_flagged():
    alerts = detect(h.structured_deposits(), CFG)
    [structuring] = _kinds(alerts, "structuring")
    assert structuring.player == "smurf" and structuring.figures["deposits"] == 4
    assert len([e for e in structuring.evidence if e.kind == "entry"]) == 4
    [little] = _kinds(alerts, "little_play")
    assert little.figures["staked_cents"] == 3000 and little.figures["turnover_ratio"] < 0.01
    quick = detect(
        h.History(
            moves=[
                h.move("deposit", "hasty", 50_000, 0),
                h.move("withdrawal", "hasty", 49_000, 1_800_000),
            ]
        ),
        CFG,
    )
    [rapid] = _kinds(quick, "rapid_in_out")
    assert rapid.player == "hasty" and rapid.figures["minutes"] == 30.0


def test_bot_timing_around_the_clock_and_shared_devices_are_flagged():
    alerts = detect(
        h.merged(
            honest_history(13, players=120, days=10),
            h.bot_player(),
            h.night_and_day(),
            h.one_device(),
        ),
        CFG,
    )
    [bot] = _kinds(alerts, "steady_timing")
    assert bot.player == "robot" and bot.figures["cv"] < 0.05 and bot.figures["actions"] == 120
    [owl] = _kinds(alerts, "around_clock")
    assert owl.player == "owl" and owl.figures["busy_days"] == 3
    [device] = _kinds(alerts, "shared_device")
    assert (device.player, device.counterpart) == ("twin_a", "twin_b")
    assert _kinds(alerts, "shared_address")  # the same address too


def test_a_clean_history_raises_nothing_and_a_rescan_names_the_same_alerts():
    assert detect(honest_history(6, players=300, days=14), CFG) == []
    planted = h.merged(h.dumping_ring(), h.laundering_chain(), h.bot_player())
    first = [a.dedup_key for a in detect(planted, CFG)]
    assert first and first == [a.dedup_key for a in detect(planted, CFG)]


def test_every_threshold_is_configurable_and_a_bad_one_is_refused():
    ring = h.dumping_ring()
    assert _kinds(detect(ring, CFG), "pair_flow")
    raised = integrity_config.load('{"pair_flow_cents": 1000000}')
    assert not _kinds(detect(ring, raised), "pair_flow")
    with pytest.raises(ValueError, match="pair_flow_cents"):
        integrity_config.load('{"pair_flow_cents": -1}')
    with pytest.raises(ValueError, match="unknown"):
        integrity_config.load('{"no_such_threshold": 1}')
    assert integrity_config.load("") == CFG
    assert msgspec.structs.asdict(CFG)  # a flat Struct: every field documented in the config


def test_false_positive_rate_on_honest_histories_is_low():
    """Eight seeded honest worlds of 300 players over 14 days (about 45,000 matches): the
    share of players named in any alert stays under 3% per world and 2% overall."""
    rates = [false_positive_rate(seed)[0] for seed in range(1, 9)]
    assert max(rates) < 0.03
    assert sum(rates) / len(rates) < 0.02
