"""End to end with the real rules core: deal, play a hand, build the transcript, verify it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from fairness.commitments import (
    SeedRound,
    leaf_bytes,
    player_seed_commitment,
)
from fairness.flow import OpenDeal, close_deal, log_seed_commitments, make_deal, open_deal
from fairness.keys import OperatorKey
from fairness.merkle import MemoryTree
from fairness.rules_bridge import replayer
from fairness.transcript import (
    Transcript,
    build_transcript,
    encode_transcript,
)
from fairness.verify import verify_transcript
from services.cli import main as mesa
from tests.fairness.fairness_helpers import T0, attach_records, signed_checkpoint

replay = replayer()


def play_out(scenario: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Pick, at every turn, the first tile (in hand order) that the rules core accepts."""
    moves: list[dict[str, Any]] = []
    out = replay({**scenario, "moves": moves})
    held = {i: list(h) for i, h in enumerate(scenario["hands"])}
    while out["awaiting"] is not None:
        seat = out["awaiting"]["seat"]
        for tile in held[seat] + list(scenario["stock"]):
            for extra in ({}, {"end": "left"}, {"end": "right"}):
                try:
                    out = replay({**scenario, "moves": [*moves, {"tile": tile, **extra}]})
                except Exception:
                    continue
                moves.append({"tile": tile, **extra})
                break
            else:
                continue
            break
        else:
            raise AssertionError(f"no legal move for seat {seat}")
    return moves, out["result"]


def logged_hand(
    key: OperatorKey,
    opened: OpenDeal,
    seeds: list[str],
    tree: MemoryTree,
    index: int,
    seed_env: dict[str, Any],
    seed_index: int,
) -> Transcript:
    """Deal the hand of `opened` from `seeds` (each seat commits and reveals its own), play it
    out with the rules core and log its result in `tree`, which holds the commitment at `index`
    and the seed record `seed_env` at `seed_index`: the hand's transcript, records and proofs."""
    rnd = SeedRound(len(seeds))
    for s, seed in enumerate(seeds):
        rnd.commit(s, player_seed_commitment(seed))
    rnd.open_reveals()
    for s, seed in enumerate(seeds):
        rnd.reveal(s, seed)
    revealed = rnd.close()
    d = make_deal(opened, revealed)
    hands, stock = d.as_strings()
    scenario = {"variant": opened.record["variant"], "options": opened.record["options"]}
    scenario |= {"hands": hands, "stock": stock, "first_hand": True, "scores": [0, 0]}
    moves, result = play_out(scenario)
    result_env = close_deal(key, opened, revealed, moves, result, T0)
    result_index = tree.append(leaf_bytes(result_env))
    t = build_transcript(
        commitment=opened.commitment,
        public_keys=[key.public_hex()],
        seed_entries=revealed.entries,
        server_seed=opened.server_seed,
        deal=d,
        opener=None,
        first_hand=True,
        scores=[0, 0],
        moves=moves,
        result=result,
        leaf_index=index,
        tree_size=tree.size,
        path=tree.inclusion(index),
        checkpoint=signed_checkpoint(key, tree),
    )
    attach_records(t, tree, seed_env, seed_index, result_env, result_index)
    return t


@pytest.fixture
def real_transcript(operator_key: OperatorKey) -> Transcript:
    opened = open_deal(
        operator_key,
        deal_id="dom/m1/h1",
        table_id="t1",
        variant="dominicana",
        options={"mode": "2v2", "target": 100},
        tile_set=6,
        hand_size=7,
        seats=["a", "b", "c", "d"],
        now=T0,
    )
    tree = MemoryTree()
    index = tree.append(leaf_bytes(opened.commitment))
    seeds = ["s0", "s1", "s2", "s3"]
    seed_env = log_seed_commitments(
        operator_key, opened, [("player", player_seed_commitment(x)) for x in seeds], T0
    )
    seed_index = tree.append(leaf_bytes(seed_env))
    return logged_hand(operator_key, opened, seeds, tree, index, seed_env, seed_index)


def test_real_hand_verifies(real_transcript: Transcript) -> None:
    report = verify_transcript(real_transcript, replayer=replay)
    assert report.ok, report.checks


def test_real_hand_tampered_result_fails_replay(real_transcript: Transcript) -> None:
    doc = msgspec.to_builtins(real_transcript)
    doc["result"]["points"] += 1
    t = msgspec.convert(doc, Transcript)
    # the logged result record still holds the real result
    assert verify_transcript(t, replayer=replay).failed == ["replay", "result_record"]
    doc = msgspec.to_builtins(real_transcript)
    doc["moves"] = doc["moves"][:-1]
    t = msgspec.convert(doc, Transcript)
    assert verify_transcript(t, replayer=replay).failed == ["replay", "result_record"]


def test_cli_verifies_with_rules_core(
    real_transcript: Transcript, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = tmp_path / "hand.json"
    p.write_bytes(encode_transcript(real_transcript))
    assert mesa(["audit", "verify", str(p)]) == 0
    assert capsys.readouterr().out == "verified\n"
