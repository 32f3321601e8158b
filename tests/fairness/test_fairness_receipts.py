"""Seed receipts: the operator cannot deal from a seed other than the receipted one.

A forged transcript (one seat's seed substituted, deal, moves and result regenerated, every
record re-signed) is caught by `mesa audit verify`: against the logged seed record, and, when
the operator also forges that record in a forked log, against the player's own receipt."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from fairness.commitments import (
    cpu_seed,
    leaf_bytes,
    player_seed_commitment,
)
from fairness.flow import OpenDeal, log_seed_commitments, open_deal
from fairness.keys import OperatorKey
from fairness.merkle import MemoryTree
from fairness.rules_bridge import replayer
from fairness.tlog import checkpoint_body, sign_note
from fairness.transcript import (
    RECEIPT_FORMAT,
    Receipt,
    Transcript,
    encode_transcript,
)
from fairness.verify import verify_receipt, verify_transcript
from services.cli import main as mesa
from tests.fairness.fairness_helpers import (
    T0,
    inclusion,
    signed_checkpoint,
    signed_record,
)
from tests.fairness.test_fairness_replay import logged_hand

replay = replayer()
OPTIONS = {"mode": "2v2", "target": 100}
DEAL = "dom/m9/h1"


@dataclass
class Hand:
    transcript: Transcript
    receipt: Receipt


def _hand(
    key: OperatorKey, opened: OpenDeal, seeds: list[str], *, logged: list[str] | None = None
) -> Hand:
    """Seats 0-2 are players who commit and reveal `seeds`, seat 3 is the house (CPU seed).
    `logged` are the seeds whose commitments the seed record holds (default: `seeds`)."""
    tree = MemoryTree()
    tree.append(b"an earlier leaf")
    index = tree.append(leaf_bytes(opened.commitment))
    all_seeds = [*seeds, cpu_seed(opened.server_seed, opened.deal_id, 3)]
    logged_seeds = [*(logged or seeds), all_seeds[3]]
    seed_env = log_seed_commitments(
        key,
        opened,
        [
            ("cpu" if s == 3 else "player", player_seed_commitment(x))
            for s, x in enumerate(logged_seeds)
        ],
        T0,
    )
    seed_index = tree.append(leaf_bytes(seed_env))
    cp_receipt = signed_checkpoint(key, tree)
    receipt = Receipt(
        format=RECEIPT_FORMAT,
        deal_id=opened.deal_id,
        record=signed_record(seed_env),
        inclusion=inclusion(tree, seed_index),
        checkpoint=signed_record(cp_receipt),
        checkpoint_note=sign_note(
            checkpoint_body("mesa-fairness-log", tree.size, tree.root()),
            "mesa-fairness-log",
            key.private_key,
        ),
    )
    t = logged_hand(key, opened, all_seeds, tree, index, seed_env, seed_index)
    return Hand(t, receipt)


@pytest.fixture
def opened(operator_key: OperatorKey) -> OpenDeal:
    return open_hand(operator_key)


def open_hand(operator_key: OperatorKey) -> OpenDeal:
    return open_deal(
        operator_key,
        deal_id=DEAL,
        table_id="t9",
        variant="dominicana",
        options=OPTIONS,
        tile_set=6,
        hand_size=7,
        seats=["ana", "beto", "cris", None],
        now=T0,
    )


def _cli(tmp_path: Path, hand: Transcript, receipt: Receipt | None, capsys: Any) -> str:
    p = tmp_path / "hand.json"
    p.write_bytes(encode_transcript(hand))
    args = ["audit", "verify", str(p)]
    if receipt is not None:
        r = tmp_path / "receipt.json"
        r.write_bytes(msgspec.json.encode(receipt))
        args += ["--receipt", str(r)]
    capsys.readouterr()
    status = mesa(args)
    out = capsys.readouterr().out
    assert (status == 0) == (out.strip() == "verified"), out
    return out


def test_honest_hand_verifies_with_the_receipt(
    operator_key: OperatorKey, opened: OpenDeal, tmp_path: Path, capsys: Any
) -> None:
    hand = _hand(operator_key, opened, ["ana-seed", "beto-seed", "cris-seed"])
    verify_receipt(hand.receipt, [operator_key.public_raw])
    report = verify_transcript(hand.transcript, replayer=replay, receipt=hand.receipt)
    assert report.ok, report.checks
    assert _cli(tmp_path, hand.transcript, hand.receipt, capsys).strip() == "verified"


def test_substituted_seed_caught_by_the_logged_record(
    operator_key: OperatorKey, opened: OpenDeal, tmp_path: Path, capsys: Any
) -> None:
    """The house deals from another seed for seat 0, after the reveal: deal, moves and result
    are regenerated and re-signed, the result record and checkpoint too. The seed record
    logged before the reveal still holds seat 0's real commitment."""
    honest = ["ana-seed", "beto-seed", "cris-seed"]
    forged = _hand(operator_key, opened, ["chosen-by-house", *honest[1:]], logged=honest)
    report = verify_transcript(forged.transcript, replayer=replay)
    assert report.failed == ["seed_receipt"], report.checks
    assert "substituted" in next(c.detail for c in report.checks if c.name == "seed_receipt")
    out = _cli(tmp_path, forged.transcript, None, capsys)
    assert out.startswith("seed_receipt: failed")


def test_forked_log_caught_by_the_players_receipt(
    operator_key: OperatorKey, opened: OpenDeal, tmp_path: Path, capsys: Any
) -> None:
    """The house also forges the seed record, in a log of its own: the transcript is
    consistent on its own, but not with the receipt seat 0 kept before the reveal."""
    honest = _hand(operator_key, opened, ["ana-seed", "beto-seed", "cris-seed"])
    forged = _hand(operator_key, opened, ["chosen-by-house", "beto-seed", "cris-seed"])
    assert verify_transcript(forged.transcript, replayer=replay).ok  # self-consistent
    report = verify_transcript(forged.transcript, replayer=replay, receipt=honest.receipt)
    assert report.failed == ["seed_receipt"], report.checks
    out = _cli(tmp_path, forged.transcript, honest.receipt, capsys)
    assert out.startswith("seed_receipt: failed") and "receipt" in out


def test_cpu_seed_is_the_committed_formula(operator_key: OperatorKey, opened: OpenDeal) -> None:
    hand = _hand(operator_key, opened, ["a", "b", "c"])
    doc = msgspec.to_builtins(hand.transcript)
    doc["player_seeds"][3]["seed"] = "house-picked"
    doc["player_seeds"][3]["commitment"] = player_seed_commitment("house-picked")
    t = msgspec.convert(doc, Transcript)
    assert "seed_receipt" in verify_transcript(t, replayer=replay).failed
    assert json.loads(json.dumps(doc))  # still a well-formed document
