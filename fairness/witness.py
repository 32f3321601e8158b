"""Watching the public log from outside: `mesa audit checkpoint`.

It fetches `/log/checkpoint`, checks the log's signature and the quorum of witness
cosignatures its policy names, remembers the last checkpoint it accepted (a file in its state
folder) and accepts a new one only when the log's own tiles prove it consistent with that one
(RFC 6962 consistency, the proof computed from the hash tiles). An inconsistent checkpoint (a
rollback, another root for the same size, a fork) is a split view: both notes are kept as
evidence and the command fails. Witnesses themselves are `mesa audit witness serve`
(fairness.witness_server): the log pushes its checkpoints to them (C2SP tlog-witness).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fairness.merkle import (
    EMPTY_ROOT,
    ProofError,
    consistency_ranges,
    fold_range,
    node_hash,
    perfect_nodes,
    verify_consistency,
)
from fairness.tlog import (
    ALG_COSIGNATURE_V1,
    ALG_ED25519,
    TILE_HEIGHT,
    TILE_WIDTH,
    Checkpoint,
    NoteError,
    Verifier,
    open_checkpoint,
    parse_checkpoint,
    tile_path,
    verify_note,
)

STATE_FILE = "checkpoint"
MAX_TILE_BYTES = TILE_WIDTH * 32

Fetch = Callable[[str], bytes]
"""Reads a path under the log's `/log/` (e.g. `checkpoint`, `tile/0/000.p/3`)."""


class SplitView(Exception):
    """Two checkpoints of the log that cannot both be true; `evidence` is where both are."""

    def __init__(self, message: str, evidence: Path) -> None:
        super().__init__(f"{message} (evidence kept in {evidence})")
        self.evidence = evidence


@dataclass
class TileHashes:
    """Node hashes of a tree of `size` leaves, read from its hash tiles (height 8)."""

    fetch: Fetch
    size: int
    _tiles: dict[tuple[int, int], bytes] = field(default_factory=dict)

    def _tile(self, level: int, index: int) -> bytes:
        key = (level, index)
        if key not in self._tiles:
            nodes = self.size >> (TILE_HEIGHT * level)
            width = min(TILE_WIDTH, nodes - index * TILE_WIDTH)
            if width <= 0:
                raise NoteError(f"no tile {level}/{index} in a tree of {self.size}")
            data = self.fetch(tile_path(level, index, width))
            if len(data) != width * 32:
                raise NoteError(f"tile {level}/{index} has {len(data)} bytes, not {width * 32}")
            self._tiles[key] = data
        return self._tiles[key]

    def node(self, level: int, index: int) -> bytes:
        """Hash of the perfect subtree of 2**level leaves starting at leaf index * 2**level."""
        base, k = divmod(level, TILE_HEIGHT)
        first = index << k
        hashes = []
        for i in range(first, first + (1 << k)):
            tile = self._tile(base, i // TILE_WIDTH)
            off = (i % TILE_WIDTH) * 32
            hashes.append(tile[off : off + 32])
        while len(hashes) > 1:
            hashes = [node_hash(hashes[j], hashes[j + 1]) for j in range(0, len(hashes), 2)]
        return hashes[0]

    def range_hash(self, start: int, end: int) -> bytes:
        return fold_range([self.node(lvl, i) for lvl, i in perfect_nodes(start, end)])

    def root(self, size: int | None = None) -> bytes:
        n = self.size if size is None else size
        return EMPTY_ROOT if n == 0 else self.range_hash(0, n)

    def consistency(self, old_size: int) -> list[bytes]:
        return [self.range_hash(a, b) for a, b in consistency_ranges(old_size, self.size)]


def check_from_tiles(fetch: Fetch, cp: Checkpoint, old: Checkpoint | None) -> None:
    """The tiles give the checkpoint's root, and prove it consistent with `old`."""
    tiles = TileHashes(fetch, cp.size)
    if tiles.root() != cp.root:
        raise ProofError("the hash tiles do not give the checkpoint's root")
    if old is None:
        return
    if cp.size < old.size:
        raise ProofError(f"the log shrank from {old.size} to {cp.size} entries")
    verify_consistency(old.size, cp.size, old.root, cp.root, tiles.consistency(old.size))


@dataclass
class Accepted:
    checkpoint: Checkpoint
    note: str
    cosigned_by: list[str]


def _evidence(state: Path, old_note: str, new_note: str) -> Path:
    folder = state / f"split-view-{int(time.time())}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "remembered.checkpoint").write_text(old_note)
    (folder / "offered.checkpoint").write_text(new_note)
    return folder


def _remember(state: Path, note: str) -> None:
    tmp = state / (STATE_FILE + ".tmp")
    tmp.write_text(note)
    os.replace(tmp, state / STATE_FILE)


def accept_checkpoint(
    fetch: Fetch,
    log_key: Verifier,
    state: Path,
    witnesses: Sequence[Verifier] = (),
    quorum: int = 0,
    also: Sequence[Verifier] = (),
) -> Accepted:
    """Fetch, check and remember the log's latest checkpoint (see the module docstring).
    `also`: later log keys, announced by rotation records from `log_key` on.
    Raises NoteError (bad or under-cosigned note), ProofError or SplitView."""
    state.mkdir(parents=True, exist_ok=True)
    note = fetch("checkpoint").decode()
    cp = _open(note, log_key, also)
    cosigners: list[str] = []
    if witnesses:
        try:
            _, signed = verify_note(note, list(witnesses))
        except NoteError:
            signed = []  # none of the policy's witnesses cosigned it
        cosigners = [v.name for v in signed if v.alg == ALG_COSIGNATURE_V1]
    if len(cosigners) < quorum:
        raise NoteError(f"checkpoint has {len(cosigners)} of the {quorum} cosignatures required")
    remembered = state / STATE_FILE
    old_note = remembered.read_text() if remembered.exists() else None
    old = _open(old_note, log_key, also) if old_note is not None else None
    try:
        check_from_tiles(fetch, cp, old)
    except ProofError as exc:
        if old_note is None:
            raise
        raise SplitView(f"split view: {exc}", _evidence(state, old_note, note)) from exc
    if old is None or cp.size >= old.size:
        _remember(state, note)
    return Accepted(cp, note, cosigners)


def _open(note: str, log_key: Verifier, also: Sequence[Verifier]) -> Checkpoint:
    """A checkpoint signed by the pinned log key or a key its rotation chain announced."""
    if not also:
        return open_checkpoint(note, log_key)
    body, _ = verify_note(note, [log_key, *also])
    cp = parse_checkpoint(body)
    if cp.origin != log_key.name:
        raise NoteError("checkpoint origin is not the log key's name")
    return cp


def log_keys_from_chain(
    log_key: Verifier, rotations: Sequence[Mapping[str, Any]]
) -> list[Verifier]:
    """The note keys of every operator key the rotation records announced from the pinned
    `log_key` on (each record signed by a key already trusted); a broken chain raises."""
    from fairness.transcript import SignedRecord
    from fairness.verify import CheckFailed, key_chain

    try:
        chain = key_chain([log_key.public_raw], [SignedRecord(**dict(r)) for r in rotations])
    except (CheckFailed, TypeError, ValueError) as exc:
        raise NoteError(f"the log's key chain does not verify: {exc}") from None
    return [Verifier(log_key.name, ALG_ED25519, raw) for raw in chain.values()]
