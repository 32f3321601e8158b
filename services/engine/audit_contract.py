"""The engine's read-only audit API over the fairness log (what the gateway serves to auditors).

Routes (all under the service credential):
- GET /internal/audit/transcripts?match_id=M&player=P&after=I&limit=N -> TranscriptList
      (newest first; `after`: a page's `next`, the leaf index the listing continues below)
- GET /internal/audit/transcripts/{deal_id}                 -> the transcript document
      (`fairness.transcript.Transcript`; 404 unknown_deal while the hand is live)
- GET /internal/audit/checkpoint                             -> SignedEnvelope (latest)
- GET /internal/audit/proofs/inclusion?leaf_index=I&tree_size=N -> InclusionProof
- GET /internal/audit/proofs/deal/{deal_id}?tree_size=N      -> InclusionProof (its commitment)
- GET /internal/audit/proofs/consistency?first=M&second=N    -> ConsistencyProof
- GET /internal/audit/keys                                   -> KeyList
- GET /internal/audit/orphans                                -> OrphanList
- GET /internal/audit/leaves?start=A&end=B                   -> LeafList (at most 1000;
      `next`: the `start` of the following page, null at the log's end)
- GET /internal/audit/log/key                                -> LogText (signed-note verifier key)
- GET /internal/audit/log/checkpoint                         -> LogText (C2SP checkpoint, cosigned)
- GET /internal/audit/log/checkpoints?after=I&limit=N        -> CheckpointNotes (history)
- GET /internal/audit/log/tile?path=tile/L/N[.p/W]           -> LogBlob (C2SP tlog-tiles)
- GET /internal/audit/receipts/{deal_id}                     -> the seed receipt document
- GET /internal/audit/voids?days=N                           -> VoidCounts (by UTC day and cause)

Hashes, keys and leaf data are lowercase hex. Errors: 400 invalid_request / bad_range /
bad_tile, 404 unknown_deal / no_checkpoint / no_tile.
"""

from __future__ import annotations

from typing import Any

import msgspec

MAX_LEAVES_PAGE = 1000
MAX_TRANSCRIPTS_PAGE = 200


class TranscriptSummary(msgspec.Struct, frozen=True):
    deal_id: str
    match_id: str | None
    table_id: str | None
    variant: str
    players: list[str | None]
    leaf_index: int
    closed: bool


class TranscriptList(msgspec.Struct, frozen=True):
    transcripts: list[TranscriptSummary]
    next: int | None = None  # `after` for the next (older) page; null on the last


class SignedEnvelope(msgspec.Struct, frozen=True):
    record: dict[str, Any]
    signature: str


class InclusionProof(msgspec.Struct, frozen=True):
    leaf_index: int
    tree_size: int
    path: list[str]
    leaf_hash: str | None = None


class ConsistencyProof(msgspec.Struct, frozen=True):
    first: int
    second: int
    path: list[str]


class PublicKey(msgspec.Struct, frozen=True):
    key_id: str
    public_key: str
    pem: str


class KeyList(msgspec.Struct, frozen=True):
    keys: list[PublicKey]
    # the log's key_rotation records in log order: from the first key, each signed by a key
    # already trusted (verifiers follow them from the first key they pinned)
    key_rotations: list[dict[str, Any]] = []


class OrphanOut(msgspec.Struct, frozen=True):
    deal_id: str
    leaf_index: int
    created_at: str
    closing_records: int


class OrphanList(msgspec.Struct, frozen=True):
    orphans: list[OrphanOut]


class LeafOut(msgspec.Struct, frozen=True):
    index: int
    type: str
    leaf_data: str


class LeafList(msgspec.Struct, frozen=True):
    tree_size: int
    leaves: list[LeafOut]
    next: int | None = None  # `start` of the next page; null when the page reached the end


class LogText(msgspec.Struct, frozen=True):
    text: str


class LogBlob(msgspec.Struct, frozen=True):
    data: bytes  # base64 in JSON
    full: bool  # a full tile never changes; a partial one is replaced by wider ones


class CheckpointNote(msgspec.Struct, frozen=True):
    id: int
    tree_size: int
    note: str  # the signed note, cosignature lines included


class CheckpointNotes(msgspec.Struct, frozen=True):
    checkpoints: list[CheckpointNote]


MAX_WITNESS_NOTE = 8192


class VoidCount(msgspec.Struct, frozen=True):
    day: str  # UTC, YYYY-MM-DD
    cause: str  # one of fairness.commitments.VOID_CAUSES
    count: int


class VoidCounts(msgspec.Struct, frozen=True):
    voids: list[VoidCount]
