"""Helpers for the fairness tests: a fixed operator key and a complete, valid transcript."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fairness.commitments import (
    SeedRound,
    canonical_json,
    checkpoint_record,
    commitment_record,
    leaf_bytes,
    player_seed_commitment,
    result_record,
    seed_commitments_record,
    server_seed_commitment,
    sign_record,
)
from fairness.flow import OpenDeal, open_deal
from fairness.keys import OperatorKey
from fairness.merkle import MemoryTree
from fairness.shuffle import deal
from fairness.transcript import InclusionDoc, SignedRecord, Transcript, build_transcript
from fairness.verify import replay_scenario

EXAMPLE_KEY_SEED = bytes.fromhex("8d405a0d7487d0e0ede671b748066f747bb6e4145b5af924daba9d338f8306d4")
SERVER_SEED = bytes(range(32))
T0 = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)


def fake_replayer(scenario: Mapping[str, Any]) -> dict[str, Any]:
    """Stands in for the rules core: the 'result' is a digest of the whole scenario."""
    digest = hashlib.sha256(canonical_json(dict(scenario))).hexdigest()
    return {"events": [], "result": {"digest": digest}, "awaiting": None}


def signed_record(envelope: Mapping[str, Any]) -> SignedRecord:
    return SignedRecord(record=envelope["record"], signature=envelope["signature"])


def inclusion(tree: MemoryTree, index: int) -> InclusionDoc:
    return InclusionDoc(
        leaf_index=index, tree_size=tree.size, path=[p.hex() for p in tree.inclusion(index)]
    )


def signed_checkpoint(key: OperatorKey, tree: MemoryTree) -> dict[str, Any]:
    """The operator's signed checkpoint of the log as `tree` stands now."""
    return sign_record(
        key.private_key,
        checkpoint_record(
            origin="mesa-fairness-log",
            tree_size=tree.size,
            root_hash=tree.root(),
            time=T0,
            signing_key_id=key.key_id,
        ),
    )


def attach_records(
    t: Transcript,
    tree: MemoryTree,
    seed_env: Mapping[str, Any],
    seed_index: int,
    result_env: Mapping[str, Any],
    result_index: int,
) -> None:
    """Put the hand's signed seed and result records, each with its inclusion proof, into `t`."""
    t.seed_record = signed_record(seed_env)
    t.seed_inclusion = inclusion(tree, seed_index)
    t.result_record = signed_record(result_env)
    t.result_inclusion = inclusion(tree, result_index)


def make_transcript(
    key: OperatorKey,
    *,
    result: Mapping[str, Any] | None = None,
    moves: list[dict[str, Any]] | None = None,
    other_leaves: int = 5,
) -> Transcript:
    record = commitment_record(
        deal_id="table-7/match-3/hand-1",
        table_id="table-7",
        variant="dominicana",
        options={"mode": "2v2", "target": 100},
        tile_set=6,
        hand_size=7,
        seats=["p-alice", "p-bob", "p-carol", None],
        commitment=server_seed_commitment(SERVER_SEED),
        time=T0,
        signing_key_id=key.key_id,
    )
    envelope = sign_record(key.private_key, record)
    rnd = SeedRound(4)
    rnd.commit(0, player_seed_commitment("alice"))
    rnd.commit(1, player_seed_commitment("bob"))
    rnd.commit(3, player_seed_commitment("dave"))
    rnd.open_reveals()
    rnd.reveal(0, "alice")
    rnd.reveal(1, "bob")
    seeds = rnd.close()  # seat 2 never committed, seat 3 never revealed
    d = deal(SERVER_SEED, "table-7/match-3/hand-1", seeds.seeds, 6, 7)
    seed_env = sign_record(
        key.private_key,
        seed_commitments_record(
            deal_id="table-7/match-3/hand-1",
            commitment=record["commitment"],
            seats=[("player", e.commitment) for e in seeds.entries],
            time=T0,
            signing_key_id=key.key_id,
        ),
    )
    mv = moves if moves is not None else [{"tile": "0-0"}, {"tile": "0-1", "end": "right"}]
    hand: dict[str, Any] = {
        "commitment": envelope,
        "public_keys": [key.public_hex()],
        "seed_entries": seeds.entries,
        "server_seed": SERVER_SEED,
        "deal": d,
        "opener": 0,
        "first_hand": True,
        "scores": [0, 0],
        "moves": mv,
    }
    # the transcript without its proofs, to compute the (fake) result it replays to
    draft = build_transcript(
        **hand, result=result, leaf_index=0, tree_size=1, path=[], checkpoint=envelope
    )
    if result is None:
        result = fake_replayer(replay_scenario(draft))["result"]
    result_env = sign_record(
        key.private_key,
        result_record(
            deal_id="table-7/match-3/hand-1",
            commitment=record["commitment"],
            server_seed=SERVER_SEED,
            seeds=seeds.seeds,
            moves=msgspec.to_builtins(draft.moves),
            result=result,
            time=T0,
            signing_key_id=key.key_id,
        ),
    )
    tree = MemoryTree()
    for i in range(other_leaves):
        tree.append(f"earlier leaf {i}".encode())
    index = tree.append(leaf_bytes(envelope))
    seed_index = tree.append(leaf_bytes(seed_env))
    tree.append(b"a later leaf")
    result_index = tree.append(leaf_bytes(result_env))
    t = build_transcript(
        **hand,
        result=result,
        leaf_index=index,
        tree_size=tree.size,
        path=tree.inclusion(index),
        checkpoint=signed_checkpoint(key, tree),
    )
    attach_records(t, tree, seed_env, seed_index, result_env, result_index)
    return t


def example_key() -> OperatorKey:
    return OperatorKey(Ed25519PrivateKey.from_private_bytes(EXAMPLE_KEY_SEED))


def opened_deal(key: OperatorKey, deal_id: str, now: datetime = T0) -> OpenDeal:
    """A dominicana deal of four seats opened (committed) under `key`, for log tests."""
    return open_deal(
        key,
        deal_id=deal_id,
        table_id="t",
        variant="dominicana",
        options={},
        tile_set=6,
        hand_size=7,
        seats=["a", "b", "c", "d"],
        now=now,
    )
