"""The transparency log in PostgreSQL (schema `fairness`), async over SQLAlchemy 2 Core.

Append is serialized by `SELECT ... FOR UPDATE` on the single head row, which keeps the
compact range (frontier): each append costs O(log n) and also stores every perfect subtree it
completes in `fairness.nodes`, so inclusion and consistency proofs need O(log n) node reads.
The application role can only INSERT leaves, nodes, checkpoints and keys (and move the head
forward); triggers refuse UPDATE, DELETE and TRUNCATE on them for everyone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

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
    CompactRange,
    consistency_ranges,
    fold_range,
    inclusion_ranges,
    leaf_hash,
    perfect_nodes,
)

CHECKPOINT_LOCK = 0x46414952  # advisory lock key: "FAIR"
DEFAULT_CHECKPOINT_INTERVAL_S = 5.0


class LogError(Exception):
    """A record the log refuses (bad signature, unknown deal, second closing record, ...)."""


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
class DealProof:
    """What a transcript needs: the commitment leaf's inclusion against a signed checkpoint."""

    leaf_index: int
    tree_size: int
    path: list[bytes]
    checkpoint: dict[str, Any]


class LogStore:
    def __init__(self, engine: AsyncEngine, key: OperatorKey, origin: str = DEFAULT_ORIGIN) -> None:
        self.engine = engine
        self.key = key
        self.origin = origin

    # ------------------------------------------------------------------ keys

    async def register_key(self) -> None:
        """Publish the operator's current public key (idempotent)."""
        async with self.engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO fairness.keys (key_id, public_key) VALUES (:kid, :pub) "
                    "ON CONFLICT (key_id) DO NOTHING"
                ),
                {"kid": self.key.key_id, "pub": self.key.public_raw},
            )

    async def public_keys(self) -> list[dict[str, Any]]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                text("SELECT key_id, public_key, created_at FROM fairness.keys ORDER BY created_at")
            )
            return [
                {
                    "key_id": r.key_id,
                    "public_key": bytes(r.public_key).hex(),
                    "created_at": r.created_at,
                }
                for r in rows
            ]

    # ------------------------------------------------------------------ append

    async def append(self, envelope: Mapping[str, Any]) -> Appended:
        return (await self.append_many([envelope]))[0]

    async def append_many(self, envelopes: Sequence[Mapping[str, Any]]) -> list[Appended]:
        """Append signed records in one transaction, in order."""
        if not envelopes:
            return []
        keys = await self._known_keys()
        prepared = []
        for env in envelopes:
            kind = record_type(env)
            try:
                record = verify_signed(env, keys)
            except ValueError as exc:
                raise LogError(f"refused {kind} record: {exc}") from exc
            prepared.append((kind, record, leaf_bytes(env)))
        try:
            async with self.engine.begin() as conn:
                head = (
                    await conn.execute(
                        text(
                            "SELECT tree_size, frontier FROM fairness.head WHERE id = 1 FOR UPDATE"
                        )
                    )
                ).one()
                cr = CompactRange(head.tree_size, [bytes(h) for h in head.frontier])
                out = []
                for kind, record, data in prepared:
                    await self._check_deal_link(conn, kind, record)
                    index = cr.size
                    lh = leaf_hash(data)
                    nodes = cr.append(lh)
                    root = cr.root()
                    await conn.execute(
                        text(
                            "INSERT INTO fairness.leaves (idx, leaf_data, leaf_hash, type, deal_id,"
                            " commitment, root_after) VALUES (:idx, :data, :lh, :type, :deal,"
                            " :commitment, :root)"
                        ),
                        {
                            "idx": index,
                            "data": data,
                            "lh": lh,
                            "type": kind,
                            "deal": record.get("deal_id"),
                            "commitment": record.get("commitment"),
                            "root": root,
                        },
                    )
                    await conn.execute(
                        text("INSERT INTO fairness.nodes (level, idx, hash) VALUES (:l, :i, :h)"),
                        [{"l": lvl, "i": i, "h": h} for lvl, i, h in nodes],
                    )
                    if kind == "key_rotation":
                        await conn.execute(
                            text(
                                "INSERT INTO fairness.keys (key_id, public_key) VALUES (:k, :p) "
                                "ON CONFLICT (key_id) DO NOTHING"
                            ),
                            {
                                "k": record["new_key_id"],
                                "p": bytes.fromhex(record["new_public_key"]),
                            },
                        )
                    out.append(Appended(index, cr.size, root))
                await conn.execute(
                    text(
                        "UPDATE fairness.head SET tree_size = :n, frontier = :f, root_hash = :r,"
                        " updated_at = now() WHERE id = 1"
                    ),
                    {"n": cr.size, "f": cr.hashes, "r": cr.root()},
                )
                return out
        except IntegrityError as exc:
            raise LogError(f"refused: the deal already has such a record ({exc.orig})") from exc

    async def _known_keys(self) -> dict[str, bytes]:
        keys = {self.key.key_id: self.key.public_raw}
        async with self.engine.connect() as conn:
            for r in await conn.execute(text("SELECT key_id, public_key FROM fairness.keys")):
                keys[r.key_id] = bytes(r.public_key)
        return keys

    @staticmethod
    async def _check_deal_link(conn: AsyncConnection, kind: str, record: Mapping[str, Any]) -> None:
        if kind not in ("result", "void"):
            return
        row = (
            await conn.execute(
                text(
                    "SELECT commitment FROM fairness.leaves"
                    " WHERE type = 'commitment' AND deal_id = :d"
                ),
                {"d": record["deal_id"]},
            )
        ).one_or_none()
        if row is None:
            raise LogError(f"refused {kind}: no commitment for deal {record['deal_id']!r}")
        if row.commitment != record.get("commitment"):
            raise LogError(f"refused {kind}: commitment differs from the logged one")

    # ------------------------------------------------------------------ reads

    async def head(self) -> tuple[int, bytes]:
        async with self.engine.connect() as conn:
            r = (
                await conn.execute(
                    text("SELECT tree_size, root_hash FROM fairness.head WHERE id = 1")
                )
            ).one()
            return r.tree_size, bytes(r.root_hash)

    async def leaf(self, index: int) -> bytes:
        async with self.engine.connect() as conn:
            r = (
                await conn.execute(
                    text("SELECT leaf_data FROM fairness.leaves WHERE idx = :i"), {"i": index}
                )
            ).one_or_none()
        if r is None:
            raise LogError(f"no leaf {index}")
        return bytes(r.leaf_data)

    async def leaves(self, start: int, end: int) -> list[tuple[int, str, bytes]]:
        """(index, type, leaf data) for start <= index < end (auditors mirror the log)."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                text(
                    "SELECT idx, type, leaf_data FROM fairness.leaves"
                    " WHERE idx >= :a AND idx < :b ORDER BY idx"
                ),
                {"a": start, "b": end},
            )
            return [(r.idx, r.type, bytes(r.leaf_data)) for r in rows]

    async def commitment_index(self, deal_id: str) -> int:
        async with self.engine.connect() as conn:
            r = (
                await conn.execute(
                    text(
                        "SELECT idx FROM fairness.leaves WHERE type = 'commitment' AND deal_id = :d"
                    ),
                    {"d": deal_id},
                )
            ).one_or_none()
        if r is None:
            raise LogError(f"no commitment for deal {deal_id!r}")
        return int(r.idx)

    async def _range_hashes(
        self, conn: AsyncConnection, ranges: list[tuple[int, int]]
    ) -> list[bytes]:
        wanted = [perfect_nodes(a, b) for a, b in ranges]
        flat = sorted({n for group in wanted for n in group})
        if not flat:
            return []
        rows = await conn.execute(
            text(
                "SELECT n.level, n.idx, n.hash FROM fairness.nodes n"
                " JOIN unnest(CAST(:levels AS smallint[]), CAST(:idxs AS bigint[])) AS q(level, idx)"
                " ON n.level = q.level AND n.idx = q.idx"
            ),
            {"levels": [lvl for lvl, _ in flat], "idxs": [i for _, i in flat]},
        )
        found = {(r.level, r.idx): bytes(r.hash) for r in rows}
        missing = [n for n in flat if n not in found]
        if missing:
            raise LogError(f"log nodes missing: {missing[:3]}")
        return [fold_range([found[n] for n in group]) for group in wanted]

    async def inclusion_proof(
        self, index: int, tree_size: int | None = None
    ) -> tuple[int, list[bytes]]:
        """(tree_size, audit path) for leaf `index`; default size is the current head."""
        async with self.engine.connect() as conn:
            size = tree_size if tree_size is not None else (await self._size(conn))
            if not 0 <= index < size or size > await self._size(conn):
                raise LogError(f"no leaf {index} in a tree of size {size}")
            return size, await self._range_hashes(conn, inclusion_ranges(index, size))

    async def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[bytes]:
        async with self.engine.connect() as conn:
            current = await self._size(conn)
            size = current if new_size is None else new_size
            if not 0 <= old_size <= size <= current:
                raise LogError(f"no consistency proof from {old_size} to {size}")
            return await self._range_hashes(conn, consistency_ranges(old_size, size))

    @staticmethod
    async def _size(conn: AsyncConnection) -> int:
        return int(
            (
                await conn.execute(text("SELECT tree_size FROM fairness.head WHERE id = 1"))
            ).scalar_one()
        )

    # ------------------------------------------------------------------ checkpoints

    async def latest_checkpoint(self) -> dict[str, Any] | None:
        async with self.engine.connect() as conn:
            r = (
                await conn.execute(
                    text("SELECT envelope FROM fairness.checkpoints ORDER BY id DESC LIMIT 1")
                )
            ).one_or_none()
        return None if r is None else dict(json.loads(bytes(r.envelope)))

    async def checkpoint_at_least(self, tree_size: int) -> dict[str, Any] | None:
        """The earliest stored checkpoint covering `tree_size` leaves (for stable proofs)."""
        async with self.engine.connect() as conn:
            r = (
                await conn.execute(
                    text(
                        "SELECT envelope FROM fairness.checkpoints WHERE tree_size >= :n"
                        " ORDER BY id LIMIT 1"
                    ),
                    {"n": tree_size},
                )
            ).one_or_none()
        return None if r is None else dict(json.loads(bytes(r.envelope)))

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
        async with self.engine.begin() as conn:
            await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": CHECKPOINT_LOCK})
            head = (
                await conn.execute(
                    text("SELECT tree_size, root_hash FROM fairness.head WHERE id = 1")
                )
            ).one()
            last = (
                await conn.execute(
                    text(
                        "SELECT tree_size, signed_at FROM fairness.checkpoints"
                        " ORDER BY id DESC LIMIT 1"
                    )
                )
            ).one_or_none()
            if last is not None:
                if last.tree_size >= head.tree_size:
                    return None
                if not force and now - last.signed_at < timedelta(seconds=min_interval_s):
                    return None
            record = checkpoint_record(
                origin=self.origin,
                tree_size=head.tree_size,
                root_hash=bytes(head.root_hash),
                time=now,
                signing_key_id=self.key.key_id,
            )
            envelope = sign_record(self.key.private_key, record)
            await conn.execute(
                text(
                    "INSERT INTO fairness.checkpoints (tree_size, root_hash, key_id, signed_at,"
                    " envelope) VALUES (:n, :r, :k, :t, :e)"
                ),
                {
                    "n": head.tree_size,
                    "r": bytes(head.root_hash),
                    "k": self.key.key_id,
                    "t": now,
                    "e": canonical_json(envelope),
                },
            )
            return envelope

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

    async def orphans(self, older_than: datetime | None = None) -> list[Orphan]:
        """Commitments not followed by exactly one result or void record (optionally only
        those committed before `older_than`, to skip hands still in play)."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                text(
                    "SELECT c.deal_id, c.idx, c.created_at, count(r.idx) AS closing"
                    " FROM fairness.leaves c"
                    " LEFT JOIN fairness.leaves r ON r.deal_id = c.deal_id"
                    "   AND r.type IN ('result', 'void') AND r.idx > c.idx"
                    " WHERE c.type = 'commitment'"
                    "   AND (CAST(:cutoff AS timestamptz) IS NULL"
                    "        OR c.created_at < CAST(:cutoff AS timestamptz))"
                    " GROUP BY c.deal_id, c.idx, c.created_at"
                    " HAVING count(r.idx) <> 1 ORDER BY c.idx"
                ),
                {"cutoff": older_than},
            )
            return [Orphan(r.deal_id, r.idx, r.created_at, r.closing) for r in rows]
