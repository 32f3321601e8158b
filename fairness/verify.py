"""Pure verification of a hand transcript, one named check at a time.

The replay check runs an injected `replayer` (the rules core's replay entry), so this module
never imports the engine. docs/fairness.md, "Verification", describes each check.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from fairness.commitments import (
    NO_COMMITMENT,
    NOT_REVEALED,
    REVEALED,
    canonical_json,
    checkpoint_fields,
    cpu_seed,
    key_id,
    leaf_bytes,
    player_seed_commitment,
    server_seed_commitment,
    sha256_hex,
    verify_signed,
)
from fairness.flow import DRAW_PURPOSES, draw_outcome
from fairness.merkle import leaf_hash, verify_inclusion
from fairness.shuffle import deal, parse_server_seed, validate_player_seed
from fairness.tlog import NoteError, parse_checkpoint, split_note
from fairness.transcript import InclusionDoc, Receipt, SignedRecord, Transcript

CHECKS = (
    "signature",
    "seed_commitments",
    "server_seed_opening",
    "deal_recomputation",
    "replay",
    "merkle_inclusion",
    "checkpoint_signature",
    "seed_receipt",
    "result_record",
)

Replayer = Callable[[dict[str, Any]], Mapping[str, Any]]
"""Takes a `mesa rules replay` scenario, returns its output ({"events", "result", "awaiting"})."""

PASS, FAIL, SKIPPED = "pass", "fail", "skipped"


class CheckFailed(Exception):
    """Raised inside a check with the reason it failed."""


@dataclass(frozen=True, slots=True)
class CheckResult:
    name: str
    status: str
    detail: str = ""


@dataclass(slots=True)
class VerificationReport:
    checks: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.status == PASS for c in self.checks)

    @property
    def failed(self) -> list[str]:
        return [c.name for c in self.checks if c.status != PASS]

    def status(self, name: str) -> str:
        return next(c.status for c in self.checks if c.name == name)


def _record(t: Transcript) -> dict[str, Any]:
    return t.commitment.record


def key_chain(first: Sequence[bytes], rotations: Sequence[SignedRecord]) -> dict[str, bytes]:
    """The keys trusted from the pinned `first` keys on: a key_rotation record signed by a key
    already trusted announces the next one (docs/fairness.md 4.6). A key that no such record
    announced is never trusted, however it is published."""
    keys = {key_id(k): k for k in first}
    for env in rotations:
        record = verify_signed(env.to_json(), keys)
        if record.get("type") != "key_rotation":
            raise CheckFailed("a key chain entry is not a key_rotation record")
        raw = record.get("new_public_key")
        if not isinstance(raw, str) or len(raw) != 64:
            raise CheckFailed("key_rotation names no 32-byte key")
        new = bytes.fromhex(raw)
        if key_id(new) != record.get("new_key_id"):
            raise CheckFailed("key_rotation: the new key does not hash to its key id")
        keys[key_id(new)] = new
    return keys


def _keys(t: Transcript, trusted: Sequence[bytes] | None) -> dict[str, bytes]:
    """Pinned keys (or, unpinned, the transcript's first key) and the keys their rotation
    chain announced."""
    if trusted is not None:
        first = list(trusted)
    else:
        if not t.public_keys or len(t.public_keys[0]) != 64:
            raise CheckFailed("the transcript names no first public key")
        first = [bytes.fromhex(t.public_keys[0])]
    return key_chain(first, t.key_rotations)


def _check_signature(t: Transcript, trusted: Sequence[bytes] | None) -> None:
    record = verify_signed(t.commitment.to_json(), _keys(t, trusted))
    if record.get("type") != "commitment":
        raise CheckFailed("signed record is not a commitment record")


def _check_seed_commitments(t: Transcript) -> None:
    seats = _record(t).get("seats")
    if not isinstance(seats, list) or len(t.player_seeds) != len(seats):
        raise CheckFailed("one seed entry per committed seat is required")
    for i, entry in enumerate(t.player_seeds):
        if entry.seat != i:
            raise CheckFailed(f"seed entry {i} names seat {entry.seat}")
        validate_player_seed(entry.seed)
        if entry.status == REVEALED:
            if entry.commitment is None:
                raise CheckFailed(f"seat {i}: revealed seed without a commitment")
            if not hmac.compare_digest(player_seed_commitment(entry.seed), entry.commitment):
                raise CheckFailed(f"seat {i}: SHA-256 of the seed does not match its commitment")
        elif entry.status == NO_COMMITMENT:
            if entry.commitment is not None or entry.seed != "":
                raise CheckFailed(f"seat {i}: a seat without commitment must have the empty seed")
        elif entry.status == NOT_REVEALED:
            if entry.commitment is None or len(entry.commitment) != 64 or entry.seed != "":
                raise CheckFailed(f"seat {i}: an unrevealed seat must have the empty seed")
        else:
            raise CheckFailed(f"seat {i}: unknown status {entry.status!r}")


def _check_server_seed(t: Transcript) -> None:
    seed = parse_server_seed(t.server_seed)
    if t.server_seed != seed.hex():
        raise CheckFailed("server seed must be lowercase hex")
    commitment = _record(t).get("commitment")
    if not isinstance(commitment, str) or not hmac.compare_digest(
        commitment.encode(), server_seed_commitment(seed).encode()
    ):
        raise CheckFailed("SHA-256 of the server seed is not the commitment")


def _is_draw(t: Transcript) -> bool:
    return _record(t).get("purpose") in DRAW_PURPOSES


def _check_draw(t: Transcript) -> None:
    """An opening draw deals no tiles and has no moves; its result is the recomputed draw."""
    if t.deal.hands or t.deal.stock or t.moves or t.opener is not None:
        raise CheckFailed("an opening draw deals no tiles and has no moves")
    seeds = [e.seed for e in t.player_seeds]
    expected = draw_outcome(str(_record(t)["purpose"]), t.server_seed, t.deal_id, seeds)
    if canonical_json(expected) != canonical_json(t.result):
        raise CheckFailed("the draw's result differs from the recomputed draw")


def _check_canonical_tiles(t: Transcript, tile_set: int) -> None:
    """Tiles are written `a-b` with a <= b (docs/fairness.md section 3), nothing else."""
    valid = {f"{a}-{b}" for a in range(tile_set + 1) for b in range(a, tile_set + 1)}
    for tile in [*(x for h in t.deal.hands for x in h), *t.deal.stock, *(m.tile for m in t.moves)]:
        if tile not in valid:
            raise CheckFailed(f"tile {tile!r} is not in canonical form a-b (a <= b)")


def _check_deal(t: Transcript) -> None:
    record = _record(t)
    if t.deal_id != record.get("deal_id"):
        raise CheckFailed("transcript deal id differs from the committed deal id")
    if _is_draw(t):
        _check_draw(t)
        return
    if record.get("purpose", "deal") != "deal":
        raise CheckFailed("commitment is not for a deal")
    tile_set = record.get("tile_set")
    if tile_set not in (6, 9):
        raise CheckFailed("the commitment names no tile set")
    _check_canonical_tiles(t, tile_set)
    seeds = [e.seed for e in t.player_seeds]
    if len(seeds) != len(record.get("seats", [])):
        raise CheckFailed("one seed per committed seat is required")
    expected = deal(
        t.server_seed, str(record["deal_id"]), seeds, record["tile_set"], record["hand_size"]
    )
    hands, stock = expected.as_strings()
    if t.deal.hands != hands:
        raise CheckFailed("hands differ from the recomputed deal")
    if t.deal.stock != stock:
        raise CheckFailed("stock differs from the recomputed deal")


def replay_scenario(t: Transcript) -> dict[str, Any]:
    """The `mesa rules replay` input for this hand."""
    record = _record(t)
    scenario: dict[str, Any] = {
        "variant": record["variant"],
        "options": record["options"],
        "hands": t.deal.hands,
        "stock": t.deal.stock,
        "first_hand": t.first_hand,
        "scores": t.scores,
        "moves": msgspec.to_builtins(t.moves),
    }
    if t.opener is not None:
        scenario["opener"] = t.opener
    return scenario


def _check_replay(t: Transcript, replayer: Replayer | None) -> None:
    if _is_draw(t):
        _check_draw(t)  # nothing to replay: the draw is its own outcome
        return
    if replayer is None:
        raise CheckFailed("no rules core to replay with")
    try:
        output = replayer(replay_scenario(t))
    except Exception as exc:  # the rules core reports illegal moves by raising
        raise CheckFailed(f"rules core refused the moves: {exc}") from exc
    if output.get("awaiting") is not None:
        raise CheckFailed("the moves do not finish the hand")
    got = msgspec.to_builtins(output.get("result"))
    if canonical_json(got) != canonical_json(t.result):
        raise CheckFailed("replayed result differs from the recorded result")


def _checkpoint(t: Transcript, external: SignedRecord | None) -> SignedRecord:
    return external if external is not None else t.checkpoint


def _check_inclusion(t: Transcript, external: SignedRecord | None) -> None:
    size, root = checkpoint_fields(_checkpoint(t, external).record)
    inc = t.inclusion
    if inc.tree_size != size:
        raise CheckFailed(f"proof is for tree size {inc.tree_size}, checkpoint has {size}")
    path = []
    for h in inc.path:
        if len(h) != 64:
            raise CheckFailed("proof hashes must be 64 hex digits")
        path.append(bytes.fromhex(h))
    leaf = leaf_hash(leaf_bytes(t.commitment.to_json()))
    verify_inclusion(inc.leaf_index, inc.tree_size, leaf, path, root)


def _check_checkpoint(
    t: Transcript, external: SignedRecord | None, trusted: Sequence[bytes] | None
) -> None:
    cp = _checkpoint(t, external)
    record = verify_signed(cp.to_json(), _keys(t, trusted))
    checkpoint_fields(record)


def _verify_leaf(
    envelope: SignedRecord, inc: InclusionDoc | None, checkpoint: SignedRecord, what: str
) -> None:
    if inc is None:
        raise CheckFailed(f"no inclusion proof for the {what}")
    size, root = checkpoint_fields(checkpoint.record)
    if inc.tree_size != size:
        raise CheckFailed(f"{what} proof is for tree size {inc.tree_size}, checkpoint has {size}")
    path = []
    for h in inc.path:
        if len(h) != 64:
            raise CheckFailed("proof hashes must be 64 hex digits")
        path.append(bytes.fromhex(h))
    verify_inclusion(inc.leaf_index, size, leaf_hash(leaf_bytes(envelope.to_json())), path, root)


def _check_seed_receipt(
    t: Transcript,
    external: SignedRecord | None,
    trusted: Sequence[bytes] | None,
    receipt: Receipt | None,
) -> None:
    """The seeds dealt from are exactly the ones the log recorded before any reveal: every
    seat's commitment in the logged seed_commitments record (and the player's own receipt,
    when given) equals the transcript's; a CPU seat's seed is the one its formula gives."""
    if t.seed_record is None:
        raise CheckFailed("no logged seed_commitments record: the seeds are unreceipted")
    record = verify_signed(t.seed_record.to_json(), _keys(t, trusted))
    if record.get("type") != "seed_commitments":
        raise CheckFailed("seed record is not a seed_commitments record")
    if record.get("deal_id") != t.deal_id or record.get("commitment") != _record(t).get(
        "commitment"
    ):
        raise CheckFailed("seed record is for another deal or server commitment")
    seats = record.get("seats")
    if not isinstance(seats, list) or len(seats) != len(t.player_seeds):
        raise CheckFailed("seed record has not one entry per seat")
    for i, (logged, entry) in enumerate(zip(seats, t.player_seeds, strict=True)):
        if not isinstance(logged, dict) or logged.get("seat") != i:
            raise CheckFailed(f"seed record entry {i} names another seat")
        if logged.get("commitment") != entry.commitment:
            raise CheckFailed(
                f"seat {i}: the transcript's seed commitment is not the logged one (the seed "
                "was substituted)"
            )
        if logged.get("source") == "cpu":
            if entry.status != REVEALED or entry.seed != cpu_seed(t.server_seed, t.deal_id, i):
                raise CheckFailed(f"seat {i}: the CPU seed is not the committed formula's")
        elif logged.get("source") != "player":
            raise CheckFailed(f"seat {i}: unknown seed source")
    _verify_leaf(t.seed_record, t.seed_inclusion, _checkpoint(t, external), "seed record")
    if receipt is not None:
        verify_receipt(receipt, list(_keys(t, trusted).values()))
        if canonical_json(receipt.record.to_json()) != canonical_json(t.seed_record.to_json()):
            raise CheckFailed("the transcript's seed record differs from your receipt")


def _check_result_record(
    t: Transcript, external: SignedRecord | None, trusted: Sequence[bytes] | None
) -> None:
    """The logged result record reveals the same server seed, seeds, moves and result."""
    if t.result_record is None:
        raise CheckFailed("no logged result record")
    record = verify_signed(t.result_record.to_json(), _keys(t, trusted))
    if record.get("type") != "result":
        raise CheckFailed("result record is not of type result")
    expected = {
        "deal_id": t.deal_id,
        "commitment": _record(t).get("commitment"),
        "server_seed": t.server_seed,
        "seeds": [e.seed for e in t.player_seeds],
        "moves_sha256": sha256_hex(canonical_json(msgspec.to_builtins(t.moves))),
    }
    for name, value in expected.items():
        if record.get(name) != value:
            raise CheckFailed(f"logged result record: {name} differs from the transcript")
    if canonical_json(record.get("result")) != canonical_json(t.result):
        raise CheckFailed("logged result differs from the transcript's result")
    _verify_leaf(t.result_record, t.result_inclusion, _checkpoint(t, external), "result record")


def verify_receipt(receipt: Receipt, trusted: Sequence[bytes]) -> None:
    """A seed receipt: the operator's signed seed_commitments record, included in a signed
    checkpoint (JSON and C2SP note forms agree). Raises CheckFailed."""
    keys = {key_id(k): k for k in trusted}
    record = verify_signed(receipt.record.to_json(), keys)
    if record.get("type") != "seed_commitments" or record.get("deal_id") != receipt.deal_id:
        raise CheckFailed("receipt does not hold the deal's seed_commitments record")
    verify_signed(receipt.checkpoint.to_json(), keys)
    _verify_leaf(receipt.record, receipt.inclusion, receipt.checkpoint, "receipt")
    size, root = checkpoint_fields(receipt.checkpoint.record)
    try:
        body, _ = split_note(receipt.checkpoint_note)
        note_cp = parse_checkpoint(body)
    except NoteError as exc:
        raise CheckFailed(f"receipt checkpoint note: {exc}") from exc
    if (note_cp.size, note_cp.root) != (size, root):
        raise CheckFailed("receipt checkpoint note and record disagree")


def verify_transcript(
    t: Transcript,
    *,
    public_keys: Sequence[bytes] | None = None,
    checkpoint: SignedRecord | None = None,
    replayer: Replayer | None = None,
    receipt: Receipt | None = None,
) -> VerificationReport:
    """Run every check; `public_keys` (raw 32-byte keys) pins the operator keys instead of the
    transcript's own, `checkpoint` replaces the transcript's checkpoint, `replayer` is the rules
    core (the replay check is `skipped` without one, which is not a pass)."""
    runs: list[tuple[str, Callable[[], None] | None]] = [
        ("signature", lambda: _check_signature(t, public_keys)),
        ("seed_commitments", lambda: _check_seed_commitments(t)),
        ("server_seed_opening", lambda: _check_server_seed(t)),
        ("deal_recomputation", lambda: _check_deal(t)),
        (
            "replay",
            None if replayer is None and not _is_draw(t) else (lambda: _check_replay(t, replayer)),
        ),
        ("merkle_inclusion", lambda: _check_inclusion(t, checkpoint)),
        ("checkpoint_signature", lambda: _check_checkpoint(t, checkpoint, public_keys)),
        ("seed_receipt", lambda: _check_seed_receipt(t, checkpoint, public_keys, receipt)),
        ("result_record", lambda: _check_result_record(t, checkpoint, public_keys)),
    ]
    report = VerificationReport()
    for name, run in runs:
        if run is None:
            report.checks.append(CheckResult(name, SKIPPED, "no rules core to replay with"))
            continue
        try:
            run()
        except (CheckFailed, ValueError, KeyError, TypeError, IndexError) as exc:
            report.checks.append(CheckResult(name, FAIL, str(exc) or type(exc).__name__))
        else:
            report.checks.append(CheckResult(name, PASS))
    return report
