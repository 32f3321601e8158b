"""Commitments, canonical encoding, Ed25519 signatures, log records, checkpoints, player seeds.

All pure (no I/O, no clock: callers pass times in). The byte-exact format is in
docs/fairness.md; this module is its reference implementation.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from fairness.shuffle import (
    ALGORITHM,
    FairnessInputError,
    parse_server_seed,
    validate_deal_id,
    validate_player_seed,
    validate_tile_set,
)

RECORD_VERSION = 1
MAX_SAFE_INT = 2**53 - 1
DEFAULT_ORIGIN = "mesa-fairness-log"
RECORD_TYPES = ("commitment", "seed_commitments", "result", "void", "key_rotation")
SEED_SOURCES = ("player", "cpu")
CPU_SEED_PREFIX = "mesa-cpu-seed-v1"
PURPOSES = ("deal", "cuban_draw", "pares_o_nones")
# Why a deal was not played out. Never the deal's content on the house's initiative: `redeal`
# is a human seat's request under the rules (the house's CPU seats never ask for one).
VOID_CAUSES = ("redeal", "match_void", "engine_error")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX128 = re.compile(r"[0-9a-f]{128}")
_TIME_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")

JSON = Any


class CanonicalEncodingError(ValueError):
    """A value that has no canonical encoding (float, non-ASCII key, huge integer, ...)."""


class SignatureError(ValueError):
    """An Ed25519 signature that does not verify, or a key id that does not match its key."""


class RecordError(ValueError):
    """A log record or checkpoint that is malformed."""


# --------------------------------------------------------------------------- canonical JSON


def _check_canonical(value: JSON, path: str) -> None:
    if value is None or isinstance(value, bool | str):
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise CanonicalEncodingError(f"{path}: string is not valid Unicode") from exc
        return
    if isinstance(value, int):
        if not -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
            raise CanonicalEncodingError(f"{path}: integer outside +-(2**53-1)")
        return
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_canonical(item, f"{path}[{i}]")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str) or not key.isascii():
                raise CanonicalEncodingError(f"{path}: object keys must be ASCII strings")
            _check_canonical(item, f"{path}.{key}")
        return
    raise CanonicalEncodingError(f"{path}: {type(value).__name__} has no canonical encoding")


def canonical_json(value: JSON) -> bytes:
    """UTF-8 JSON, keys sorted by code point, no whitespace, integers only (RFC 8785 subset)."""
    _check_canonical(value, "$")
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def format_time(moment: datetime) -> str:
    """UTC time as `YYYY-MM-DDTHH:MM:SS.mmmZ` (what JavaScript's toISOString prints)."""
    if moment.tzinfo is None:
        raise RecordError("times must be timezone-aware")
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def parse_time(text: str) -> datetime:
    if not isinstance(text, str) or _TIME_RE.fullmatch(text) is None:
        raise RecordError(f"time {text!r} is not YYYY-MM-DDTHH:MM:SS.mmmZ")
    return datetime.strptime(text[:-1] + "000", "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=UTC)


# --------------------------------------------------------------------------- keys and signatures


def raw_public_key(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def key_id(public_key: Ed25519PublicKey | bytes) -> str:
    """Lowercase hex SHA-256 of the 32-byte raw public key."""
    raw = public_key if isinstance(public_key, bytes) else raw_public_key(public_key)
    return sha256_hex(raw)


def load_public_key(raw: bytes | str) -> Ed25519PublicKey:
    if isinstance(raw, str):
        if _HEX64.fullmatch(raw) is None:
            raise SignatureError("public key must be 64 lowercase hex digits")
        raw = bytes.fromhex(raw)
    if len(raw) != 32:
        raise SignatureError("Ed25519 public key must be 32 bytes")
    return Ed25519PublicKey.from_public_bytes(raw)


def sign_record(private_key: Ed25519PrivateKey, record: Mapping[str, JSON]) -> dict[str, JSON]:
    """Signed envelope `{"record": R, "signature": hex(Ed25519(canonical_json(R)))}`."""
    sig = private_key.sign(canonical_json(record))
    return {"record": dict(record), "signature": sig.hex()}


def verify_signed(
    envelope: Mapping[str, JSON], public_keys: Mapping[str, Ed25519PublicKey | bytes]
) -> dict[str, JSON]:
    """Check an envelope's signature with the key named by its record's `key_id`; return R."""
    record = envelope.get("record")
    sig_hex = envelope.get("signature")
    if not isinstance(record, Mapping) or not isinstance(sig_hex, str):
        raise SignatureError("envelope needs an object `record` and a string `signature`")
    if _HEX128.fullmatch(sig_hex) is None:
        raise SignatureError("signature must be 128 lowercase hex digits")
    kid = record.get("key_id")
    if not isinstance(kid, str) or kid not in public_keys:
        raise SignatureError(f"record is signed by unknown key id {kid!r}")
    pub = public_keys[kid]
    if key_id(pub) != kid:
        raise SignatureError("public key does not hash to its key id")
    pub_key = load_public_key(pub) if isinstance(pub, bytes) else pub
    try:
        pub_key.verify(bytes.fromhex(sig_hex), canonical_json(record))
    except InvalidSignature as exc:
        raise SignatureError("Ed25519 signature does not verify") from exc
    return dict(record)


def leaf_bytes(envelope: Mapping[str, JSON]) -> bytes:
    """The log leaf data of a signed record: canonical_json(envelope)."""
    return canonical_json({"record": envelope["record"], "signature": envelope["signature"]})


# --------------------------------------------------------------------------- records


def server_seed_commitment(server_seed: bytes | str) -> str:
    """Commitment = lowercase hex SHA-256 of the 32 raw server-seed bytes."""
    return sha256_hex(parse_server_seed(server_seed))


def player_seed_commitment(seed: str) -> str:
    """A seat's commitment = lowercase hex SHA-256 of the seed's ASCII bytes."""
    return sha256_hex(validate_player_seed(seed).encode("ascii"))


def commitment_record(
    *,
    deal_id: str,
    table_id: str,
    variant: str,
    options: Mapping[str, JSON],
    tile_set: int,
    hand_size: int,
    seats: Sequence[str | None],
    commitment: str,
    time: datetime,
    signing_key_id: str,
    purpose: str = "deal",
) -> dict[str, JSON]:
    """The record published (signed, logged) before any player seed is accepted."""
    validate_deal_id(deal_id)
    validate_tile_set(tile_set)
    if purpose not in PURPOSES:
        raise RecordError(f"unknown purpose {purpose!r}")
    if _HEX64.fullmatch(commitment) is None:
        raise RecordError("commitment must be 64 lowercase hex digits")
    if not seats:
        raise RecordError("a commitment needs at least one seat")
    if hand_size < 0 or hand_size * len(seats) > (tile_set + 1) * (tile_set + 2) // 2:
        raise RecordError("hand size does not fit the tile set")
    record = {
        "type": "commitment",
        "v": RECORD_VERSION,
        "algorithm": ALGORITHM,
        "purpose": purpose,
        "deal_id": deal_id,
        "table_id": table_id,
        "variant": variant,
        "options": dict(options),
        "tile_set": tile_set,
        "hand_size": hand_size,
        "seats": [{"seat": i, "player": p} for i, p in enumerate(seats)],
        "commitment": commitment,
        "time": format_time(time),
        "key_id": signing_key_id,
    }
    canonical_json(record)
    return record


def result_record(
    *,
    deal_id: str,
    commitment: str,
    server_seed: bytes | str,
    seeds: Sequence[str],
    moves: Sequence[Mapping[str, JSON]],
    result: Mapping[str, JSON] | None,
    time: datetime,
    signing_key_id: str,
) -> dict[str, JSON]:
    """Closes a commitment: reveals the server seed and fixes the moves and the result."""
    validate_deal_id(deal_id)
    return {
        "type": "result",
        "v": RECORD_VERSION,
        "deal_id": deal_id,
        "commitment": commitment,
        "server_seed": parse_server_seed(server_seed).hex(),
        "seeds": [validate_player_seed(s) for s in seeds],
        "moves_sha256": sha256_hex(canonical_json([dict(m) for m in moves])),
        "result": None if result is None else dict(result),
        "time": format_time(time),
        "key_id": signing_key_id,
    }


def void_record(
    *,
    deal_id: str,
    commitment: str,
    reason: str,
    server_seed: bytes | str | None,
    time: datetime,
    signing_key_id: str,
    seeds: Sequence[str] | None = None,
    deal: Mapping[str, JSON] | None = None,
) -> dict[str, JSON]:
    """Closes a commitment whose deal was not played. `reason` is a cause from VOID_CAUSES;
    once the seeds are known, `seeds` and the revealed `deal` ({"hands", "stock"}) are logged
    too, so anyone sees what was voided."""
    validate_deal_id(deal_id)
    if reason not in VOID_CAUSES:
        raise RecordError(f"void cause {reason!r} is not one of {', '.join(VOID_CAUSES)}")
    record: dict[str, JSON] = {
        "type": "void",
        "v": RECORD_VERSION,
        "deal_id": deal_id,
        "commitment": commitment,
        "reason": reason,
        "server_seed": None if server_seed is None else parse_server_seed(server_seed).hex(),
        "time": format_time(time),
        "key_id": signing_key_id,
    }
    if seeds is not None:
        record["seeds"] = [validate_player_seed(s) for s in seeds]
        record["deal"] = None if deal is None else dict(deal)
    return record


def cpu_seed(server_seed: bytes | str, deal_id: str, seat: int) -> str:
    """The seed of a seat the house plays: hex(HMAC-SHA256(server_seed,
    "mesa-cpu-seed-v1|<deal_id>|<seat>")). Fixed by the server-seed commitment, logged before
    any player reveals, and checkable once the server seed is revealed."""

    msg = f"{CPU_SEED_PREFIX}|{validate_deal_id(deal_id)}|{seat}".encode()
    return hmac.new(parse_server_seed(server_seed), msg, hashlib.sha256).hexdigest()


def seed_commitments_record(
    *,
    deal_id: str,
    commitment: str,
    seats: Sequence[tuple[str, str | None]],
    time: datetime,
    signing_key_id: str,
) -> dict[str, JSON]:
    """Every seat's seed commitment for a deal, logged when the commit phase closes and before
    any reveal: `seats[i]` is (source "player" or "cpu", commitment hex or None for a seat
    that sent none in time). Signed and logged, it is each seat's receipt."""
    validate_deal_id(deal_id)
    if _HEX64.fullmatch(commitment) is None:
        raise RecordError("commitment must be 64 lowercase hex digits")
    out = []
    for i, (source, c) in enumerate(seats):
        if source not in SEED_SOURCES:
            raise RecordError(f"unknown seed source {source!r}")
        if c is not None and _HEX64.fullmatch(c) is None:
            raise RecordError("a seat's commitment must be 64 lowercase hex digits")
        if source == "cpu" and c is None:
            raise RecordError("a CPU seat always commits")
        out.append({"seat": i, "source": source, "commitment": c})
    return {
        "type": "seed_commitments",
        "v": RECORD_VERSION,
        "deal_id": deal_id,
        "commitment": commitment,
        "seats": out,
        "time": format_time(time),
        "key_id": signing_key_id,
    }


def key_rotation_record(
    *, old_key_id: str, new_public_key: Ed25519PublicKey | bytes, time: datetime
) -> dict[str, JSON]:
    """Names the next operator key; it must be signed by the old key (key_id = old)."""
    raw = new_public_key if isinstance(new_public_key, bytes) else raw_public_key(new_public_key)
    return {
        "type": "key_rotation",
        "v": RECORD_VERSION,
        "new_public_key": raw.hex(),
        "new_key_id": key_id(raw),
        "time": format_time(time),
        "key_id": old_key_id,
    }


def record_type(envelope: Mapping[str, JSON]) -> str:
    record = envelope.get("record")
    if not isinstance(record, Mapping) or record.get("type") not in RECORD_TYPES:
        raise RecordError("not a log record")
    return str(record["type"])


# --------------------------------------------------------------------------- checkpoints


def checkpoint_record(
    *, origin: str, tree_size: int, root_hash: bytes, time: datetime, signing_key_id: str
) -> dict[str, JSON]:
    if tree_size < 0 or len(root_hash) != 32:
        raise RecordError("checkpoint needs tree_size >= 0 and a 32-byte root")
    return {
        "type": "checkpoint",
        "v": RECORD_VERSION,
        "origin": origin,
        "tree_size": tree_size,
        "root_hash": root_hash.hex(),
        "time": format_time(time),
        "key_id": signing_key_id,
    }


def checkpoint_fields(record: Mapping[str, JSON]) -> tuple[int, bytes]:
    """(tree_size, root_hash) of a checkpoint record, validated."""
    if record.get("type") != "checkpoint":
        raise RecordError("not a checkpoint")
    size, root = record.get("tree_size"), record.get("root_hash")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise RecordError("checkpoint tree_size must be a non-negative integer")
    if not isinstance(root, str) or _HEX64.fullmatch(root) is None:
        raise RecordError("checkpoint root_hash must be 64 lowercase hex digits")
    return size, bytes.fromhex(root)


# --------------------------------------------------------------------------- player seeds


class SeedPhaseError(RuntimeError):
    """An action at the wrong time (commit after the commit phase, double reveal, ...)."""


class SeedRevealMismatch(ValueError):
    """A revealed seed whose SHA-256 is not the seat's commitment; the reveal is refused."""


REVEALED = "revealed"
NO_COMMITMENT = "no_commitment"
NOT_REVEALED = "not_revealed"


@dataclass(frozen=True, slots=True)
class SeedEntry:
    seat: int
    commitment: str | None
    seed: str
    status: str  # revealed | no_commitment | not_revealed

    def to_json(self) -> dict[str, JSON]:
        return {
            "seat": self.seat,
            "commitment": self.commitment,
            "seed": self.seed,
            "status": self.status,
        }


@dataclass(frozen=True, slots=True)
class SeedRoundResult:
    seeds: tuple[str, ...]
    entries: tuple[SeedEntry, ...]

    @property
    def defaulted(self) -> tuple[int, ...]:
        return tuple(e.seat for e in self.entries if e.status != REVEALED)


class SeedRound:
    """Two-phase player seeds for one deal, driven by the engine.

    commit(seat, hex) during the commit phase; open_reveals() once every seat committed or the
    commit deadline passed; reveal(seat, seed) during the reveal phase; close() after every
    committed seat revealed or the reveal deadline passed. A seat that gave nothing gets the
    empty seed, recorded with its status. The engine must not disclose any commitment or seed
    to other seats before open_reveals().
    """

    def __init__(self, seats: int) -> None:
        if seats < 1:
            raise FairnessInputError("a seed round needs at least one seat")
        self.seats = seats
        self.phase = "commit"
        self._commitments: dict[int, str] = {}
        self._seeds: dict[int, str] = {}

    def _seat(self, seat: int) -> int:
        if isinstance(seat, bool) or not isinstance(seat, int) or not 0 <= seat < self.seats:
            raise FairnessInputError(f"no seat {seat!r} at this table")
        return seat

    def commit(self, seat: int, commitment_hex: str) -> None:
        self._seat(seat)
        if self.phase != "commit":
            raise SeedPhaseError("the commit phase is over")
        if seat in self._commitments:
            raise SeedPhaseError(f"seat {seat} already committed")
        if not isinstance(commitment_hex, str) or _HEX64.fullmatch(commitment_hex.lower()) is None:
            raise FairnessInputError("seed commitment must be 64 hexadecimal digits")
        self._commitments[seat] = commitment_hex.lower()

    @property
    def all_committed(self) -> bool:
        return len(self._commitments) == self.seats

    @property
    def all_revealed(self) -> bool:
        return self.phase == "reveal" and len(self._seeds) == len(self._commitments)

    def commitments(self) -> dict[int, str]:
        """Commitments so far; publish only after open_reveals()."""
        return dict(self._commitments)

    def open_reveals(self) -> None:
        if self.phase != "commit":
            raise SeedPhaseError("reveals are already open")
        self.phase = "reveal"

    def reveal(self, seat: int, seed: str) -> None:
        self._seat(seat)
        if self.phase != "reveal":
            raise SeedPhaseError("not in the reveal phase")
        if seat not in self._commitments:
            raise SeedPhaseError(f"seat {seat} made no commitment and cannot reveal")
        if seat in self._seeds:
            raise SeedPhaseError(f"seat {seat} already revealed")
        validate_player_seed(seed)
        if player_seed_commitment(seed) != self._commitments[seat]:
            raise SeedRevealMismatch(
                f"seat {seat}: SHA-256 of the revealed seed is not its commitment"
            )
        self._seeds[seat] = seed

    def close(self) -> SeedRoundResult:
        if self.phase == "commit":
            self.open_reveals()
        self.phase = "closed"
        entries = []
        for seat in range(self.seats):
            c = self._commitments.get(seat)
            if c is None:
                entries.append(SeedEntry(seat, None, "", NO_COMMITMENT))
            elif seat in self._seeds:
                entries.append(SeedEntry(seat, c, self._seeds[seat], REVEALED))
            else:
                entries.append(SeedEntry(seat, c, "", NOT_REVEALED))
        return SeedRoundResult(tuple(e.seed for e in entries), tuple(entries))
