"""The hand transcript (one JSON document per hand) and the log's record types.

Log records are built in fairness.commitments (commitment, result, void, key_rotation), each
a signed envelope whose canonical JSON is a Merkle leaf; the type tag is `record.type`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from fairness.commitments import SeedEntry
from fairness.shuffle import Deal

TRANSCRIPT_FORMAT = "mesa-transcript-v1"
RECEIPT_FORMAT = "mesa-seed-receipt-v1"


class TranscriptError(ValueError):
    """A transcript document that is not valid JSON or does not have the transcript's shape."""


class SignedRecord(msgspec.Struct, forbid_unknown_fields=True):
    """`{"record": R, "signature": hex}`; the signature is Ed25519 over canonical_json(R)."""

    record: dict[str, Any]
    signature: str

    def to_json(self) -> dict[str, Any]:
        return {"record": self.record, "signature": self.signature}


class SeedDoc(msgspec.Struct, forbid_unknown_fields=True):
    seat: int
    commitment: str | None
    seed: str
    status: str


class DealDoc(msgspec.Struct, forbid_unknown_fields=True):
    hands: list[list[str]]
    stock: list[str]


class Move(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """One player choice, exactly as `mesa rules replay` reads it."""

    tile: str
    end: str | None = None
    seat: int | None = None


class InclusionDoc(msgspec.Struct, forbid_unknown_fields=True):
    leaf_index: int
    tree_size: int
    path: list[str]


class Transcript(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    format: str
    deal_id: str
    commitment: SignedRecord
    public_keys: list[str]
    player_seeds: list[SeedDoc]
    server_seed: str
    deal: DealDoc
    opener: int | None
    first_hand: bool
    scores: list[int]
    moves: list[Move]
    result: dict[str, Any] | None
    inclusion: InclusionDoc
    checkpoint: SignedRecord
    # The logged seed_commitments record (the seats' receipt) and the logged result record,
    # each with its inclusion proof against `checkpoint` (docs/fairness.md section 6).
    seed_record: SignedRecord | None = None
    seed_inclusion: InclusionDoc | None = None
    result_record: SignedRecord | None = None
    result_inclusion: InclusionDoc | None = None
    # The log's key_rotation records, in log order: from the first key in `public_keys`, each
    # announces the next key (docs/fairness.md 4.6).
    key_rotations: list[SignedRecord] = []


class Receipt(msgspec.Struct, forbid_unknown_fields=True):
    """A seat's proof, given before the server seed is revealed, that the log holds every
    seat's seed commitment for the deal (docs/fairness.md section 4.7)."""

    format: str
    deal_id: str
    record: SignedRecord  # the seed_commitments record
    inclusion: InclusionDoc
    checkpoint: SignedRecord
    checkpoint_note: str  # the same checkpoint as a C2SP signed note


def decode_receipt(data: bytes | str) -> Receipt:
    try:
        r = msgspec.json.decode(data, type=Receipt)
    except msgspec.DecodeError as exc:
        raise TranscriptError(f"invalid receipt: {exc}") from exc
    if r.format != RECEIPT_FORMAT:
        raise TranscriptError(f"unknown receipt format {r.format!r}")
    return r


def build_transcript(
    *,
    commitment: Mapping[str, Any],
    public_keys: Sequence[str],
    seed_entries: Sequence[SeedEntry],
    server_seed: bytes,
    deal: Deal,
    opener: int | None,
    first_hand: bool,
    scores: Sequence[int],
    moves: Sequence[Mapping[str, Any]],
    result: Mapping[str, Any] | None,
    leaf_index: int,
    tree_size: int,
    path: Sequence[bytes],
    checkpoint: Mapping[str, Any],
) -> Transcript:
    """Assemble a transcript from the engine's data and the log store's proof and checkpoint."""
    hands, stock = deal.as_strings()
    record = dict(commitment["record"])
    return Transcript(
        format=TRANSCRIPT_FORMAT,
        deal_id=str(record["deal_id"]),
        commitment=SignedRecord(record=record, signature=str(commitment["signature"])),
        public_keys=list(public_keys),
        player_seeds=[
            SeedDoc(seat=e.seat, commitment=e.commitment, seed=e.seed, status=e.status)
            for e in seed_entries
        ],
        server_seed=server_seed.hex(),
        deal=DealDoc(hands=hands, stock=stock),
        opener=opener,
        first_hand=first_hand,
        scores=list(scores),
        moves=[msgspec.convert(dict(m), Move) for m in moves],
        result=None if result is None else dict(result),
        inclusion=InclusionDoc(
            leaf_index=leaf_index, tree_size=tree_size, path=[p.hex() for p in path]
        ),
        checkpoint=SignedRecord(
            record=dict(checkpoint["record"]), signature=str(checkpoint["signature"])
        ),
    )


def encode_transcript(t: Transcript) -> bytes:
    return msgspec.json.format(msgspec.json.encode(t), indent=2)


def decode_transcript(data: bytes | str) -> Transcript:
    try:
        t = msgspec.json.decode(data, type=Transcript)
    except msgspec.DecodeError as exc:
        raise TranscriptError(f"invalid transcript: {exc}") from exc
    if t.format != TRANSCRIPT_FORMAT:
        raise TranscriptError(f"unknown transcript format {t.format!r}")
    return t


def decode_signed(data: bytes | str, what: str = "checkpoint") -> SignedRecord:
    try:
        return msgspec.json.decode(data, type=SignedRecord)
    except msgspec.DecodeError as exc:
        raise TranscriptError(f"invalid {what}: {exc}") from exc
