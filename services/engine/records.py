"""The match log's records: one msgspec tagged union, JSON in `engine.match_log.record`.

Every change to a match is one record, written before it is applied; a match is restored by
applying its records in order (services.engine.runtime). `t` names the record kind, `at_ms`
is the server time it was written at (UTC milliseconds): every time the match uses comes from
its records, never from the clock at restore.
"""

from __future__ import annotations

from typing import Any

import msgspec

from services.engine.rules import Action


class _Record(msgspec.Struct, frozen=True, kw_only=True, tag_field="t", forbid_unknown_fields=True):
    at_ms: int


class Open(_Record, frozen=True, tag="open"):
    """A committed random draw opens: the deal, the Cuban draw or pares o nones. The server
    seed is secret until the draw is revealed (the log is the engine's own)."""

    purpose: str
    deal_id: str
    server_seed: str  # hex
    commitment: dict[str, Any]  # the signed envelope logged in the transparency log


class Commit(_Record, frozen=True, tag="commit"):
    seat: int
    commitment: str  # SHA-256 of the seat's seed, hex


class Reveal(_Record, frozen=True, tag="reveal"):
    seat: int
    seed: str


class CloseCommit(_Record, frozen=True, tag="close_commit"):
    """The seed-commit deadline passed: reveals open with the commitments given."""


class CloseReveal(_Record, frozen=True, tag="close_reveal"):
    """The seed-reveal deadline passed: the draw closes with the seeds revealed."""


class Act(_Record, frozen=True, tag="act"):
    seat: int
    action: Action
    by: str = "player"  # "player" | "bot" | "timeout"


class Claim(_Record, frozen=True, tag="claim"):
    seat: int


class Leave(_Record, frozen=True, tag="leave"):
    seat: int
    why: str = "left"  # "left" | "abandoned"


class Void(_Record, frozen=True, tag="void"):
    reason: str


class Settled(_Record, frozen=True, tag="settled"):
    """The ledger acknowledged the settlement (or void) of a paid match."""


Record = Open | Commit | Reveal | CloseCommit | CloseReveal | Act | Claim | Leave | Void | Settled

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Record)


def encode(record: Record) -> bytes:
    return _encoder.encode(record)


def decode(data: bytes) -> Record:
    """One stored record; raises msgspec.ValidationError / DecodeError on anything else."""
    return _decoder.decode(data)
