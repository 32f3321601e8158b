"""The transparency log in PostgreSQL (schema `fairness`), over the engine's asyncpg pool.

An append is one call of the PL/pgSQL function `fairness.append_leaves` (`fairness/sql/append_leaves.sql`): it
locks the single head row (`SELECT ... FOR UPDATE`), which keeps the compact range (frontier),
checks every result/void against its deal's commitment, hashes and inserts the leaves, stores
every perfect subtree they complete in `fairness.nodes` and moves the head, so the global lock
is held only inside the database. Each leaf costs O(log n), and inclusion and consistency
proofs need O(log n) node reads. Signatures are checked here, before the call.
The application role can only INSERT leaves, nodes, checkpoints and keys (and move the head
forward); triggers refuse UPDATE, DELETE and TRUNCATE on them for everyone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from fairness.commitments import (
    DEFAULT_ORIGIN,
    canonical_json,
    checkpoint_record,
    leaf_bytes,
    record_type,
    sign_record,
    verify_signed,
)
from fairness.keys import OperatorKey
from fairness.merkle import (
    consistency_ranges,
    fold_range,
    inclusion_ranges,
    perfect_nodes,
)
from fairness.tlog import (
    MAX_ENTRY_BYTES,
    TILE_HEIGHT,
    TILE_WIDTH,
    NoteError,
    TileRef,
    checkpoint_body,
    entry_bundle,
    sign_note,
    tile_width,
    verifier_key,
)
from fairness.transcript import SignedRecord
from fairness.verify import key_chain

APPEND_SQL = (
    "SELECT out_index, out_size, out_root FROM fairness.append_leaves($1, $2, $3, $4, $5, $6)"
)
# The function refuses larger batches too; the engine's writer sends at most 64.
MAX_APPEND_BATCH = 1024
# An append waits for the head lock and one commit; far above that means a stuck database.
APPEND_TIMEOUT_S = 30.0
CHECKPOINT_LOCK = 0x46414952  # advisory lock key: "FAIR"
DEFAULT_CHECKPOINT_INTERVAL_S = 5.0
MAX_CHECKPOINTS_PAGE = 1000
MAX_ROTATIONS = 1000
MAX_COSIGNATURES = 16  # witnesses kept per checkpoint


class LogError(Exception):
    """A record the log refuses (bad signature, unknown deal, second closing record, ...)."""


class DuplicateRecord(LogError):
    """The deal already has such a record (its commitment or its closing record)."""


@dataclass(frozen=True, slots=True)
class Appended:
    index: int
    tree_size: int
    root_hash: bytes


@dataclass(frozen=True, slots=True)
class Orphan:
    deal_id: str
    index: int
    created_at: datetime
    closing_records: int


@dataclass(frozen=True, slots=True)
class StoredCheckpoint:
    """A checkpoint as a C2SP signed note, with the witnesses' cosignature lines."""

    id: int
    tree_size: int
    note: str
    cosignatures: tuple[str, ...]

    def cosigned_note(self) -> str:
        """The note with every stored cosignature line appended (signed-note allows any
        number of signature lines)."""
        return self.note + "".join(self.cosignatures)


@dataclass(frozen=True, slots=True)
class DealProof:
    """What a transcript needs: the commitment leaf's inclusion against a signed checkpoint."""

    leaf_index: int
    tree_size: int
    path: list[bytes]
    checkpoint: dict[str, Any]


class LogStore:
    def __init__(self, pool: asyncpg.Pool, key: OperatorKey, origin: str = DEFAULT_ORIGIN) -> None:
        self.pool = pool
        self.key = key
        self.origin = origin
        # keys trusted for signatures: the operator's own, plus those read from fairness.keys
        # (re-read when a record names an unknown key id)
        self._keys: dict[str, bytes] = {key.key_id: key.public_raw}

    # ------------------------------------------------------------------ keys

    async def register_key(self) -> bool:
        """Publish the operator's current public key (idempotent). True when verifiers will
        trust it: it is the log's first key, or a key_rotation in the log announced it. An
        unannounced key is stored but never trusted (docs/fairness.md 4.6)."""
        await self.pool.execute(
            "INSERT INTO fairness.keys (key_id, public_key) VALUES ($1, $2) "
            "ON CONFLICT (key_id) DO NOTHING",
            self.key.key_id,
            self.key.public_raw,
        )
        first, rotations = await self.key_chain()
        try:
            chain = key_chain([first], [SignedRecord(**r) for r in rotations])
        except ValueError as exc:
            raise LogError(f"the log's key chain is broken: {exc}") from exc
        return self.key.key_id in chain

    async def key_chain(self) -> tuple[bytes, list[dict[str, Any]]]:
        """The log's first key (pinned by auditors) and its key_rotation records, in order."""
        async with self.pool.acquire() as conn:
            first = await conn.fetchval(
                "SELECT public_key FROM fairness.keys ORDER BY created_at, key_id LIMIT 1"
            )
            if first is None:
                raise LogError("the log has no key")
            rows = await conn.fetch(
                "SELECT leaf_data FROM fairness.leaves WHERE type = 'key_rotation'"
                " ORDER BY idx LIMIT $1",
                MAX_ROTATIONS,
            )
        return bytes(first), [dict(json.loads(bytes(r["leaf_data"]))) for r in rows]

    async def public_keys(self) -> list[dict[str, Any]]:
        rows = await self.pool.fetch(
            "SELECT key_id, public_key, created_at FROM fairness.keys ORDER BY created_at"
        )
        return [
            {
                "key_id": r["key_id"],
                "public_key": bytes(r["public_key"]).hex(),
                "created_at": r["created_at"],
            }
            for r in rows
        ]

    # ------------------------------------------------------------------ append

    async def append(self, envelope: Mapping[str, Any]) -> Appended:
        return (await self.append_many([envelope]))[0]

    async def append_many(self, envelopes: Sequence[Mapping[str, Any]]) -> list[Appended]:
        """Append signed records in one transaction, in order: one call of
        `fairness.append_leaves` (one round trip, autocommit), which takes the head row's lock
        inside the database and releases it at its commit."""
        if not envelopes:
            return []
        if len(envelopes) > MAX_APPEND_BATCH:
            raise LogError(f"refused: a batch holds at most {MAX_APPEND_BATCH} records")
        prepared, keys = await self._verified(envelopes)
        for kind, _, data in prepared:
            if len(data) > MAX_ENTRY_BYTES:
                # an entry bundle (C2SP tlog-tiles) prefixes each entry with a uint16 length
                raise LogError(f"refused {kind} record: longer than {MAX_ENTRY_BYTES} bytes")
        args: tuple[list[Any], ...] = ([], [], [], [], [], [])
        for kind, record, data in prepared:
            rotation = kind == "key_rotation"
            for column, value in zip(
                args,
                (
                    kind,
                    data,
                    record.get("deal_id"),
                    record.get("commitment"),
                    record["new_key_id"] if rotation else None,
                    bytes.fromhex(record["new_public_key"]) if rotation else None,
                ),
                strict=True,
            ):
                column.append(value)
        try:
            rows = await self._call_append(args)
        except asyncpg.UniqueViolationError as exc:
            raise DuplicateRecord(f"refused: the deal already has such a record ({exc})") from exc
        except asyncpg.PostgresError as exc:
            refusal = self._refusal(exc, prepared)
            if refusal is None:
                raise
            raise refusal from exc
        if len(rows) != len(prepared):
            raise LogError(f"append returned {len(rows)} rows for {len(prepared)} records")
        self._keys = keys  # rotations in this batch are now in the log
        return [Appended(int(r[0]), int(r[1]), bytes(r[2])) for r in rows]

    async def _verified(
        self, envelopes: Sequence[Mapping[str, Any]]
    ) -> tuple[list[tuple[str, dict[str, Any], bytes]], dict[str, bytes]]:
        """Check every signature against the cached key set, re-read from `fairness.keys`
        when a record names a key id the cache lacks. A rotation makes its new key usable by
        the records after it; the returned key set replaces the cache once the batch is in."""
        keys = dict(self._keys)
        refreshed = False
        prepared = []
        for env in envelopes:
            kind = record_type(env)
            record = env.get("record")
            kid = record.get("key_id") if isinstance(record, Mapping) else None
            if isinstance(kid, str) and kid not in keys and not refreshed:
                keys.update(await self._known_keys())
                refreshed = True
            try:
                verified = verify_signed(env, keys)
            except ValueError as exc:
                raise LogError(f"refused {kind} record: {exc}") from exc
            if kind == "key_rotation":
                try:
                    keys[str(verified["new_key_id"])] = bytes.fromhex(
                        str(verified["new_public_key"])
                    )
                except (KeyError, ValueError) as exc:
                    raise LogError(f"refused key_rotation record: {exc}") from exc
            prepared.append((kind, verified, leaf_bytes(env)))
        return prepared, keys

    @staticmethod
    def _refusal(
        exc: asyncpg.PostgresError, prepared: Sequence[tuple[str, Mapping[str, Any], bytes]]
    ) -> LogError | None:
        """The function's refusals (SQLSTATE FL404/FL409, DETAIL = 1-based position) as the
        same LogError messages the checks in Python gave; None for other errors (re-raised)."""
        code = getattr(exc, "sqlstate", None)
        detail = str(getattr(exc, "detail", "") or "")
        if code not in ("FL404", "FL409") or not detail.isdigit():
            return None
        position = int(detail) - 1
        if not 0 <= position < len(prepared):
            return None
        kind, record, _ = prepared[position]
        if code == "FL404":
            return LogError(f"refused {kind}: no commitment for deal {record.get('deal_id')!r}")
        return LogError(f"refused {kind}: commitment differs from the logged one")

    async def _call_append(self, args: tuple[list[Any], ...]) -> list[Any]:
        """Run `fairness.append_leaves`: one autocommit statement on a pooled connection, so
        an append is exactly one round trip (asyncpg's checkout sends nothing)."""
        return list(await self.pool.fetch(APPEND_SQL, *args, timeout=APPEND_TIMEOUT_S))

    async def aclose(self) -> None:
        """Nothing to return: the store holds no connection between calls (the pool's owner
        closes the pool)."""

    async def _known_keys(self) -> dict[str, bytes]:
        keys = {self.key.key_id: self.key.public_raw}
        for r in await self.pool.fetch("SELECT key_id, public_key FROM fairness.keys"):
            keys[r["key_id"]] = bytes(r["public_key"])
        return keys

    # ------------------------------------------------------------------ reads

    async def head(self) -> tuple[int, bytes]:
        r = await self.pool.fetchrow("SELECT tree_size, root_hash FROM fairness.head WHERE id = 1")
        if r is None:
            raise LogError("the log has no head row")
        return r["tree_size"], bytes(r["root_hash"])

    async def leaf(self, index: int) -> bytes:
        data = await self.pool.fetchval(
            "SELECT leaf_data FROM fairness.leaves WHERE idx = $1", index
        )
        if data is None:
            raise LogError(f"no leaf {index}")
        return bytes(data)

    async def leaves(self, start: int, end: int) -> list[tuple[int, str, bytes]]:
        """(index, type, leaf data) for start <= index < end (auditors mirror the log)."""
        rows = await self.pool.fetch(
            "SELECT idx, type, leaf_data FROM fairness.leaves"
            " WHERE idx >= $1 AND idx < $2 ORDER BY idx",
            start,
            end,
        )
        return [(r["idx"], r["type"], bytes(r["leaf_data"])) for r in rows]

    async def commitment_index(self, deal_id: str) -> int:
        idx = await self.pool.fetchval(
            "SELECT idx FROM fairness.leaves WHERE type = 'commitment' AND deal_id = $1", deal_id
        )
        if idx is None:
            raise LogError(f"no commitment for deal {deal_id!r}")
        return int(idx)

    async def _range_hashes(
        self, conn: asyncpg.Connection, ranges: list[tuple[int, int]]
    ) -> list[bytes]:
        wanted = [perfect_nodes(a, b) for a, b in ranges]
        flat = sorted({n for group in wanted for n in group})
        if not flat:
            return []
        rows = await conn.fetch(
            "SELECT n.level, n.idx, n.hash FROM fairness.nodes n"
            " JOIN unnest(CAST($1 AS smallint[]), CAST($2 AS bigint[])) AS q(level, idx)"
            " ON n.level = q.level AND n.idx = q.idx",
            [lvl for lvl, _ in flat],
            [i for _, i in flat],
        )
        found = {(r["level"], r["idx"]): bytes(r["hash"]) for r in rows}
        missing = [n for n in flat if n not in found]
        if missing:
            raise LogError(f"log nodes missing: {missing[:3]}")
        return [fold_range([found[n] for n in group]) for group in wanted]

    async def inclusion_proof(
        self, index: int, tree_size: int | None = None
    ) -> tuple[int, list[bytes]]:
        """(tree_size, audit path) for leaf `index`; default size is the current head."""
        async with self.pool.acquire() as conn:
            current = await self._size(conn)
            size = current if tree_size is None else tree_size
            if not 0 <= index < size <= current:
                raise LogError(f"no leaf {index} in a tree of size {size}")
            return size, await self._range_hashes(conn, inclusion_ranges(index, size))

    async def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[bytes]:
        async with self.pool.acquire() as conn:
            current = await self._size(conn)
            size = current if new_size is None else new_size
            if not 0 <= old_size <= size <= current:
                raise LogError(f"no consistency proof from {old_size} to {size}")
            return await self._range_hashes(conn, consistency_ranges(old_size, size))

    @staticmethod
    async def _size(conn: asyncpg.Connection) -> int:
        size = await conn.fetchval("SELECT tree_size FROM fairness.head WHERE id = 1")
        if size is None:
            raise LogError("the log has no head row")
        return int(size)

    # ------------------------------------------------------------------ checkpoints

    async def latest_checkpoint(self) -> dict[str, Any] | None:
        envelope = await self.pool.fetchval(
            "SELECT envelope FROM fairness.checkpoints ORDER BY id DESC LIMIT 1"
        )
        return None if envelope is None else dict(json.loads(bytes(envelope)))

    async def checkpoint_at_least(self, tree_size: int) -> dict[str, Any] | None:
        """The earliest stored checkpoint covering `tree_size` leaves (for stable proofs)."""
        envelope = await self.pool.fetchval(
            "SELECT envelope FROM fairness.checkpoints WHERE tree_size >= $1 ORDER BY id LIMIT 1",
            tree_size,
        )
        return None if envelope is None else dict(json.loads(bytes(envelope)))

    async def checkpoint_if_due(
        self,
        min_interval_s: float = DEFAULT_CHECKPOINT_INTERVAL_S,
        now: datetime | None = None,
        force: bool = False,
    ) -> dict[str, Any] | None:
        """Sign a checkpoint when the tree grew since the last one and that one is at least
        `min_interval_s` old (or `force`). Call it every few seconds; replicas may race, an
        advisory lock makes one of them sign. Returns the new signed checkpoint or None."""
        now = now or datetime.now(UTC)
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", CHECKPOINT_LOCK)
            head = await conn.fetchrow(
                "SELECT tree_size, root_hash FROM fairness.head WHERE id = 1"
            )
            if head is None:
                raise LogError("the log has no head row")
            last = await conn.fetchrow(
                "SELECT tree_size, signed_at FROM fairness.checkpoints ORDER BY id DESC LIMIT 1"
            )
            if last is not None:
                if last["tree_size"] >= head["tree_size"]:
                    return None
                if not force and now - last["signed_at"] < timedelta(seconds=min_interval_s):
                    return None
            record = checkpoint_record(
                origin=self.origin,
                tree_size=head["tree_size"],
                root_hash=bytes(head["root_hash"]),
                time=now,
                signing_key_id=self.key.key_id,
            )
            envelope = sign_record(self.key.private_key, record)
            note = sign_note(
                checkpoint_body(self.origin, head["tree_size"], bytes(head["root_hash"])),
                self.origin,
                self.key.private_key,
            )
            await conn.execute(
                "INSERT INTO fairness.checkpoints (tree_size, root_hash, key_id, signed_at,"
                " envelope, note) VALUES ($1, $2, $3, $4, $5, $6)",
                head["tree_size"],
                bytes(head["root_hash"]),
                self.key.key_id,
                now,
                canonical_json(envelope),
                note,
            )
            return envelope

    # ------------------------------------------------------------------ C2SP views

    def verifier_key(self) -> str:
        """The log key as a signed-note verifier key; its name is the log's origin."""
        return verifier_key(self.origin, self.key.public_raw)

    async def checkpoint_notes(
        self, after_id: int = 0, limit: int = MAX_CHECKPOINTS_PAGE, latest: bool = False
    ) -> list[StoredCheckpoint]:
        """Signed-note checkpoints in signing order (ids after `after_id`), or only the latest
        one, each with its cosignature lines."""
        limit = max(1, min(limit, MAX_CHECKPOINTS_PAGE))
        async with self.pool.acquire() as conn:
            if latest:
                rows = await conn.fetch(
                    "SELECT id, tree_size, note FROM fairness.checkpoints"
                    " WHERE note IS NOT NULL AND id > $1 ORDER BY id DESC LIMIT 1",
                    after_id,
                )
            else:
                rows = await conn.fetch(
                    "SELECT id, tree_size, note FROM fairness.checkpoints"
                    " WHERE note IS NOT NULL AND id > $1 ORDER BY id LIMIT $2",
                    after_id,
                    limit,
                )
            ids = [int(r["id"]) for r in rows]
            cosigs: dict[int, list[str]] = {i: [] for i in ids}
            if ids:
                for c in await conn.fetch(
                    "SELECT checkpoint_id, line FROM fairness.cosignatures"
                    " WHERE checkpoint_id = ANY($1::bigint[]) ORDER BY created_at, witness",
                    ids,
                ):
                    cosigs[int(c["checkpoint_id"])].append(str(c["line"]))
        return [
            StoredCheckpoint(
                int(r["id"]), int(r["tree_size"]), str(r["note"]), tuple(cosigs[int(r["id"])])
            )
            for r in rows
        ]

    async def checkpoint_note_for(self, tree_size: int) -> StoredCheckpoint | None:
        found_id = await self.pool.fetchval(
            "SELECT id FROM fairness.checkpoints WHERE note IS NOT NULL"
            " AND tree_size = $1 ORDER BY id DESC LIMIT 1",
            tree_size,
        )
        if found_id is None:
            return None
        found = await self.checkpoint_notes(after_id=int(found_id) - 1, limit=1)
        return found[0] if found else None

    async def add_cosignature(self, checkpoint_id: int, witness: str, line: str) -> bool:
        """Keep a witness's (already verified) cosignature line; False when the checkpoint
        has as many witnesses as allowed. A second line by the same witness is ignored."""
        async with self.pool.acquire() as conn, conn.transaction():
            count = await conn.fetchval(
                "SELECT count(*) FROM fairness.cosignatures WHERE checkpoint_id = $1",
                checkpoint_id,
            )
            if count >= MAX_COSIGNATURES:
                return False
            await conn.execute(
                "INSERT INTO fairness.cosignatures (checkpoint_id, witness, line)"
                " VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                checkpoint_id,
                witness,
                line,
            )
        return True

    async def tile(self, ref: TileRef) -> bytes | None:
        """A hash tile (concatenated 32-byte node hashes at level 8*L) or an entry bundle, of
        exactly `ref.width` items; None while the log is too small for it."""
        size = await self.checkpointed_size()
        if ref.width > TILE_WIDTH or tile_width(size, ref.level, ref.index) < ref.width:
            return None
        first = ref.index * TILE_WIDTH
        if ref.level is None:
            rows = await self.pool.fetch(
                "SELECT leaf_data FROM fairness.leaves WHERE idx >= $1 AND idx < $2 ORDER BY idx",
                first,
                first + ref.width,
            )
            if len(rows) != ref.width:
                return None
            try:
                return entry_bundle([bytes(r["leaf_data"]) for r in rows])
            except NoteError as exc:
                raise LogError(str(exc)) from exc
        rows = await self.pool.fetch(
            "SELECT hash FROM fairness.nodes WHERE level = $1 AND idx >= $2 AND idx < $3"
            " ORDER BY idx",
            ref.level * TILE_HEIGHT,
            first,
            first + ref.width,
        )
        if len(rows) != ref.width:
            return None
        return b"".join(bytes(r["hash"]) for r in rows)

    async def checkpointed_size(self) -> int:
        """Tree size of the newest signed-note checkpoint (0 without one): tiles are served
        up to it, so every tile a client fetches is covered by a checkpoint it can get."""
        size = await self.pool.fetchval(
            "SELECT max(tree_size) FROM fairness.checkpoints WHERE note IS NOT NULL"
        )
        return int(size or 0)

    async def record_index(self, deal_id: str, kind: str) -> int | None:
        """Index of the deal's record of `kind` (commitment, seed_commitments, result, void)."""
        idx = await self.pool.fetchval(
            "SELECT idx FROM fairness.leaves WHERE type = $1 AND deal_id = $2", kind, deal_id
        )
        return None if idx is None else int(idx)

    async def covering_checkpoint(self, index: int) -> dict[str, Any]:
        """The latest checkpoint, signing one now if it does not cover leaf `index` yet."""
        cp = await self.latest_checkpoint()
        if cp is None or cp["record"]["tree_size"] <= index:
            cp = await self.checkpoint_if_due(force=True) or await self.latest_checkpoint()
        if cp is None or cp["record"]["tree_size"] <= index:
            raise LogError("no checkpoint covers the record")
        return cp

    async def proofs_at(self, indexes: Sequence[int], tree_size: int) -> list[list[bytes]]:
        return [(await self.inclusion_proof(i, tree_size))[1] for i in indexes]

    async def deal_proof(self, deal_id: str) -> DealProof:
        """Inclusion of the deal's commitment against the latest checkpoint (signing one now if
        none covers it yet)."""
        index = await self.commitment_index(deal_id)
        cp = await self.latest_checkpoint()
        if cp is None or cp["record"]["tree_size"] <= index:
            cp = await self.checkpoint_if_due(force=True) or await self.latest_checkpoint()
        if cp is None:
            raise LogError("no checkpoint")
        size = int(cp["record"]["tree_size"])
        _, path = await self.inclusion_proof(index, size)
        return DealProof(index, size, path, cp)

    # ------------------------------------------------------------------ audits

    async def void_counts(self, days: int = 366) -> list[tuple[str, str, int]]:
        """(UTC day, cause, voided deals) for the last `days` days, newest first."""
        rows = await self.pool.fetch(
            "SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day,"
            " convert_from(leaf_data, 'UTF8')::jsonb -> 'record' ->> 'reason' AS cause,"
            " count(*) AS n FROM fairness.leaves"
            " WHERE type = 'void' AND created_at >= now() - make_interval(days => $1)"
            " GROUP BY 1, 2 ORDER BY 1 DESC, 2",
            max(1, min(days, 3660)),
        )
        return [(str(r["day"]), str(r["cause"]), int(r["n"])) for r in rows]

    async def orphans(self, older_than: datetime | None = None) -> list[Orphan]:
        """Commitments not followed by exactly one result or void record (optionally only
        those committed before `older_than`, to skip hands still in play)."""
        rows = await self.pool.fetch(
            "SELECT c.deal_id, c.idx, c.created_at, count(r.idx) AS closing"
            " FROM fairness.leaves c"
            " LEFT JOIN fairness.leaves r ON r.deal_id = c.deal_id"
            "   AND r.type IN ('result', 'void') AND r.idx > c.idx"
            " WHERE c.type = 'commitment'"
            "   AND (CAST($1 AS timestamptz) IS NULL OR c.created_at < CAST($1 AS timestamptz))"
            " GROUP BY c.deal_id, c.idx, c.created_at"
            " HAVING count(r.idx) <> 1 ORDER BY c.idx",
            older_than,
        )
        return [Orphan(r["deal_id"], r["idx"], r["created_at"], r["closing"]) for r in rows]
