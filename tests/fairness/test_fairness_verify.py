"""verify_transcript: a valid transcript passes; each altered field fails the right check."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fairness.commitments import raw_public_key
from fairness.keys import OperatorKey
from fairness.transcript import Transcript, decode_transcript, encode_transcript
from fairness.verify import CHECKS, verify_transcript
from tests.fairness.fairness_helpers import fake_replayer


def _verify(t: Transcript, **kw: Any) -> list[str]:
    return verify_transcript(t, replayer=fake_replayer, **kw).failed


def test_valid_transcript_passes_every_check(transcript: Transcript) -> None:
    report = verify_transcript(transcript, replayer=fake_replayer)
    assert [c.name for c in report.checks] == list(CHECKS)
    assert report.ok, report.checks


def test_roundtrip_through_json(transcript: Transcript) -> None:
    again = decode_transcript(encode_transcript(transcript))
    assert again == transcript
    assert _verify(again) == []


def test_without_replayer_replay_is_skipped_not_passed(transcript: Transcript) -> None:
    report = verify_transcript(transcript)
    assert not report.ok
    assert report.failed == ["replay"]
    assert report.status("replay") == "skipped"


def _flip_hex(h: str) -> str:
    return ("1" if h[0] == "0" else "0") + h[1:]


Mutation = Callable[[dict[str, Any]], None]


def _set(path: list[Any], value: Any) -> Mutation:
    def run(doc: dict[str, Any]) -> None:
        target: Any = doc
        for p in path[:-1]:
            target = target[p]
        target[path[-1]] = value(target[path[-1]]) if callable(value) else value

    return run


MUTATIONS: list[tuple[str, Mutation, str]] = [
    ("commitment.signature", _set(["commitment", "signature"], _flip_hex), "signature"),
    ("record.table_id", _set(["commitment", "record", "table_id"], "table-8"), "signature"),
    (
        "record.time",
        _set(["commitment", "record", "time"], "2026-01-02T03:04:05.679Z"),
        "signature",
    ),
    ("record.key_id", _set(["commitment", "record", "key_id"], _flip_hex), "signature"),
    (
        "record.commitment",
        _set(["commitment", "record", "commitment"], _flip_hex),
        "server_seed_opening",
    ),
    ("record.commitment/sig", _set(["commitment", "record", "commitment"], _flip_hex), "signature"),
    (
        "record.deal_id",
        _set(["commitment", "record", "deal_id"], "table-7/match-3/hand-2"),
        "deal_recomputation",
    ),
    ("record.hand_size", _set(["commitment", "record", "hand_size"], 6), "deal_recomputation"),
    ("record.variant", _set(["commitment", "record", "variant"], "casa"), "replay"),
    ("record.options", _set(["commitment", "record", "options"], {"mode": "1v1"}), "replay"),
    (
        "public_keys",
        _set(["public_keys"], [raw_public_key(Ed25519PrivateKey.generate().public_key()).hex()]),
        "signature",
    ),
    ("public_keys/checkpoint", _set(["public_keys"], []), "checkpoint_signature"),
    ("seed.seed", _set(["player_seeds", 0, "seed"], "alicf"), "seed_commitments"),
    ("seed.seed/deal", _set(["player_seeds", 1, "seed"], "bobby"), "deal_recomputation"),
    ("seed.commitment", _set(["player_seeds", 0, "commitment"], _flip_hex), "seed_commitments"),
    ("seed.status", _set(["player_seeds", 2, "status"], "revealed"), "seed_commitments"),
    ("seed.defaulted_seed", _set(["player_seeds", 2, "seed"], "x"), "seed_commitments"),
    ("seed.unrevealed_seed", _set(["player_seeds", 3, "seed"], "dave"), "seed_commitments"),
    ("seed.seat", _set(["player_seeds", 1, "seat"], 2), "seed_commitments"),
    ("seed.dropped", lambda d: d["player_seeds"].pop(), "seed_commitments"),
    ("server_seed", _set(["server_seed"], _flip_hex), "server_seed_opening"),
    ("server_seed/deal", _set(["server_seed"], _flip_hex), "deal_recomputation"),
    ("server_seed.upper", _set(["server_seed"], str.upper), "server_seed_opening"),
    ("deal_id", _set(["deal_id"], "table-7/match-3/hand-9"), "deal_recomputation"),
    ("deal.hands", lambda d: d["deal"]["hands"][0].reverse(), "deal_recomputation"),
    ("deal.swap", lambda d: d["deal"]["hands"].reverse(), "deal_recomputation"),
    ("deal.stock", _set(["deal", "stock"], ["0-0"]), "deal_recomputation"),
    ("opener", _set(["opener"], 1), "replay"),
    ("first_hand", _set(["first_hand"], False), "replay"),
    ("scores", _set(["scores"], [10, 0]), "replay"),
    ("moves", _set(["moves", 1, "end"], "left"), "replay"),
    ("moves.dropped", lambda d: d["moves"].pop(), "replay"),
    ("result", _set(["result"], {"digest": "0" * 64}), "replay"),
    ("inclusion.leaf_index", _set(["inclusion", "leaf_index"], 4), "merkle_inclusion"),
    ("inclusion.tree_size", _set(["inclusion", "tree_size"], 6), "merkle_inclusion"),
    ("inclusion.path", _set(["inclusion", "path", 0], _flip_hex), "merkle_inclusion"),
    ("inclusion.path.short", lambda d: d["inclusion"]["path"].pop(), "merkle_inclusion"),
    (
        "checkpoint.root_hash",
        _set(["checkpoint", "record", "root_hash"], _flip_hex),
        "merkle_inclusion",
    ),
    (
        "checkpoint.root_hash/sig",
        _set(["checkpoint", "record", "root_hash"], _flip_hex),
        "checkpoint_signature",
    ),
    (
        "checkpoint.tree_size",
        _set(["checkpoint", "record", "tree_size"], 10),
        "checkpoint_signature",
    ),
    (
        "checkpoint.time",
        _set(["checkpoint", "record", "time"], "2026-01-02T03:04:05.000Z"),
        "checkpoint_signature",
    ),
    ("checkpoint.signature", _set(["checkpoint", "signature"], _flip_hex), "checkpoint_signature"),
    (
        "checkpoint.type",
        _set(["checkpoint", "record", "type"], "commitment"),
        "checkpoint_signature",
    ),
]


@pytest.mark.parametrize(("field", "mutate", "check"), MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_each_altered_field_fails_its_check(
    transcript: Transcript, field: str, mutate: Mutation, check: str
) -> None:
    doc = copy.deepcopy(msgspec.to_builtins(transcript))
    mutate(doc)
    altered = msgspec.convert(doc, Transcript)
    failed = _verify(altered)
    assert check in failed, (field, failed)


@pytest.mark.parametrize(
    ("field", "mutate", "only"),
    [
        (
            "seed.commitment",
            _set(["player_seeds", 0, "commitment"], _flip_hex),
            {"seed_commitments", "seed_receipt"},  # the logged commitment is the old one
        ),
        ("moves", _set(["moves", 1, "end"], "left"), {"replay", "result_record"}),
        (
            "checkpoint.signature",
            _set(["checkpoint", "signature"], _flip_hex),
            {"checkpoint_signature"},
        ),
        ("inclusion.path", _set(["inclusion", "path", 0], _flip_hex), {"merkle_inclusion"}),
        (
            "commitment.signature",
            _set(["commitment", "signature"], _flip_hex),
            {"signature", "merkle_inclusion"},
        ),
    ],
)
def test_failures_are_specific(
    transcript: Transcript, field: str, mutate: Mutation, only: set[str]
) -> None:
    doc = copy.deepcopy(msgspec.to_builtins(transcript))
    mutate(doc)
    assert set(_verify(msgspec.convert(doc, Transcript))) == only, field


def test_pinned_key_and_external_checkpoint(
    transcript: Transcript, operator_key: OperatorKey
) -> None:
    assert _verify(transcript, public_keys=[operator_key.public_raw]) == []
    other = Ed25519PrivateKey.generate().public_key()
    assert set(_verify(transcript, public_keys=[raw_public_key(other)])) == {
        "signature",
        "checkpoint_signature",
        "seed_receipt",
        "result_record",
    }
    # A checkpoint of another size does not match this proof.
    cp = copy.deepcopy(transcript.checkpoint)
    cp.record["tree_size"] = 3
    assert "merkle_inclusion" in _verify(transcript, checkpoint=cp)


def test_replayer_that_raises_fails_replay(transcript: Transcript) -> None:
    def broken(_: Any) -> dict[str, Any]:
        raise ValueError("move 1: illegal")

    report = verify_transcript(transcript, replayer=broken)
    assert report.failed == ["replay"]
    assert "illegal" in report.checks[4].detail


def test_unfinished_hand_fails_replay(transcript: Transcript) -> None:
    def unfinished(_: Any) -> dict[str, Any]:
        return {"events": [], "result": None, "awaiting": {"seat": 2}}

    assert verify_transcript(transcript, replayer=unfinished).failed == ["replay"]
