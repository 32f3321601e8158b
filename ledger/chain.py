"""Tamper evidence: a SHA-256 hash chain over journal entries in id order.

Posting never waits on the chain. Each poster holds a *shared* advisory lock for its
transaction; the sealer takes the same lock *exclusively* for one instant to learn the
highest entry id that is final (every transaction that drew an id up to the sequence's
current value has then committed or rolled back), releases it, and then seals the new
entries in blocks, outside any lock that posters need: each seal (`ledger/sql/seal_next.sql`) holds the
ids and hashes of its entries, in id order, and the chain hash after its last entry.

Format (``docs/explanation/ledger.md``, "Hash chain"):

    entry_hash = SHA-256(canonical(entry))
    chain_hash = SHA-256(previous chain_hash || entry_hash), starting from 32 zero bytes

where ``canonical(entry)`` is the compact JSON array
``["mesa-ledger-entry-v1", id, kind, idempotency_key, match_id, reference,
created_at_unix_microseconds, request_hash_hex, [[leg, account_id, amount, currency,
balance_after, version_after], ...]]`` (postings by leg; null for a missing match or reference).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import msgspec

from ledger.schema import CHAIN_LOCK_KEY

FORMAT = "mesa-ledger-entry-v1"
GENESIS = bytes(32)
SEALER_LOCK_KEY = CHAIN_LOCK_KEY + 1
BATCH = 2000  # entries `verify` reads a statement
# The sealer runs beside the posting path on the same cores, so it seals in small blocks, one
# statement each (`ledger.seal_next`), with a pause after each: sealing a second's worth of
# postings in one burst took a core from the posting path long enough to show in its p99
# (docs/decisions/0005-ledger-chain-sealed-in-blocks.md). The pauses bound a steady sealer to
# under 25,000 entries a second;
# a backlog beyond PACE_BACKLOG_MAX (a restart, a bulk load) is sealed without them, in larger
# blocks.
CHUNK = 50
BACKLOG_CHUNK = 1000
PACE_S = 0.002
PACE_BACKLOG_MAX = 20_000
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def unix_micros(moment: dt.datetime) -> int:
    return (moment - _EPOCH) // dt.timedelta(microseconds=1)


def canonical_entry(entry: dict[str, Any], postings: list[tuple[Any, ...]]) -> bytes:
    body = [
        FORMAT,
        int(entry["id"]),
        entry["kind"],
        entry["idempotency_key"],
        entry["match_id"],
        entry["reference"],
        unix_micros(entry["created_at"]),
        bytes(entry["request_hash"]).hex(),
        [
            [int(leg), int(account), int(amount), str(currency), int(balance), int(version)]
            for leg, account, amount, currency, balance, version in sorted(postings)
        ],
    ]
    return msgspec.json.encode(body)


def entry_hash(entry: dict[str, Any], postings: list[tuple[Any, ...]]) -> bytes:
    return hashlib.sha256(canonical_entry(entry, postings)).digest()


def link(previous: bytes, digest: bytes) -> bytes:
    return hashlib.sha256(previous + digest).digest()


# Each entry with what its canonical form needs, the postings already as their compact JSON
# array (numbers and a [A-Z]{3} currency: the same bytes msgspec writes, see `row_canonical`),
# so hashing an entry in Python is one encode and two SHA-256s (from text arrays it costs ~60 us
# per entry, on the ledger service's event loop). The postings come from a subquery per entry, so a statement
# reads only the entries it returns: as a join grouped by entry, the planner could merge-join
# the whole postings index from its first row for a wide id range (106 ms for 50 entries on a
# ledger of 780,000 postings; at that rate a backlog of 300,000 entries would take 10 minutes).
_ENTRIES_SQL = """
SELECT e.id, e.kind, e.idempotency_key, e.match_id, e.reference,
       (extract(epoch FROM e.created_at) * 1000000)::bigint AS created_us,
       encode(e.request_hash, 'hex') AS request_hash_hex,
       (SELECT '[' || coalesce(string_agg(
                 '[' || p.leg || ',' || p.account_id || ',' || p.amount || ','
                     || to_json(p.currency::text)::text || ',' || p.balance_after || ','
                     || p.version_after || ']', ',' ORDER BY p.leg), '') || ']'
        FROM ledger.postings p WHERE p.entry_id = e.id) AS postings_json
FROM ledger.entries e
WHERE e.id > $1 AND e.id <= $2
ORDER BY e.id
LIMIT $3
"""


def row_canonical(row: Any) -> bytes:
    """`canonical_entry` of a row of `_ENTRIES_SQL` (tested equal to it)."""
    return msgspec.json.encode(
        [
            FORMAT,
            row["id"],
            row["kind"],
            row["idempotency_key"],
            row["match_id"],
            row["reference"],
            row["created_us"],
            row["request_hash_hex"],
            msgspec.Raw(row["postings_json"].encode()),
        ]
    )


def row_hash(row: Any) -> bytes:
    return hashlib.sha256(row_canonical(row)).digest()


# Posters hold the chain lock shared from before they draw an entry id until they commit; the
# sealer needs it exclusively for an instant. Queueing for it would hold every new poster
# behind the sealer until the transactions in flight commit: a stall of every request, once a
# second, which showed in the ledger service's p99. So the sealer first tries without queueing,
# in the gaps between transactions, and queues only if it keeps missing them (the chain must
# not fall behind under a load without gaps).
TRY_LOCK_ATTEMPTS = 25
TRY_LOCK_PAUSE_S = 0.002


async def _horizon(conn: asyncpg.Connection) -> int:
    """The highest entry id whose transaction has certainly finished.

    One call takes the chain lock, reads the sequence and lets go (`ledger/sql/chain_horizon.sql`), so posters
    wait on the sealer for microseconds, not for round trips from the service."""
    for _ in range(TRY_LOCK_ATTEMPTS):
        found = await conn.fetchval("SELECT ledger.chain_horizon(false)")
        if found is not None:
            return int(found)
        await asyncio.sleep(TRY_LOCK_PAUSE_S)
    return int(await conn.fetchval("SELECT ledger.chain_horizon(true)"))


async def sealed_to(conn: asyncpg.Connection) -> int:
    """The last sealed entry's id (0 before the first seal): from the newest seal, by its
    primary key (seals follow one another in entry order; `max(last_entry_id)` would read
    every seal, some 50 a second of them under load)."""
    last = await conn.fetchval(
        "SELECT last_entry_id FROM ledger.chain_seals ORDER BY id DESC LIMIT 1"
    )
    return int(last) if last is not None else 0


async def seal(conn: asyncpg.Connection, max_entries: int = 50_000) -> int:
    """Seal every final, unsealed entry into the chain; returns how many were sealed."""
    if conn.is_in_transaction():
        # the horizon's lock is a transaction lock: inside a transaction block it would hold
        # every new posting until that transaction ends
        raise RuntimeError("seal the chain outside a transaction block")
    if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", SEALER_LOCK_KEY):
        return 0  # another sealer is at work
    try:
        horizon = await _horizon(conn)
        paced = horizon - await sealed_to(conn) <= PACE_BACKLOG_MAX
        chunk = CHUNK if paced else BACKLOG_CHUNK
        sealed = 0
        while sealed < max_entries:
            # one statement: read the block's entries, hash and chain them, write the seal
            # (each seal is atomic without a transaction block, which would keep PostgreSQL
            # from pruning the old versions of the rows every posting updates)
            count = await conn.fetchval(
                "SELECT ledger.seal_next($1, $2)", horizon, min(chunk, max_entries - sealed)
            )
            if not count:
                break
            sealed += int(count)
            if paced:
                await asyncio.sleep(PACE_S)
        return sealed
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", SEALER_LOCK_KEY)


@dataclass
class ChainReport:
    ok: bool
    verified: int = 0
    unsealed: int = 0
    last_sealed_entry: int = 0
    first_bad_entry: int | None = None
    problem: str = ""
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "verified": self.verified,
            "unsealed": self.unsealed,
            "last_sealed_entry": self.last_sealed_entry,
            "first_bad_entry": self.first_bad_entry,
            "problem": self.problem,
        }


_SEALS_SQL = """
SELECT id, first_entry_id, last_entry_id, entry_count, chain_hash, entry_ids, entry_hashes
FROM ledger.chain_seals WHERE id > $1 ORDER BY id LIMIT $2
"""
SEALS_A_READ = 50


async def verify(conn: asyncpg.Connection) -> ChainReport:
    """Recompute every entry's hash and the chain; name the first entry that does not match.

    Every entry is rebuilt in Python from its stored row (`row_canonical`), independently of
    the SQL that sealed it; entries are walked in id order against the seals' lists."""
    report = ChainReport(ok=True)

    def fail(entry_id: int, problem: str) -> ChainReport:
        report.ok = False
        report.first_bad_entry = entry_id
        report.problem = problem
        return report

    # The sealed entries are read ahead in statements of up to BATCH rows, across seals (a
    # statement per seal would be one per 50 entries), and handed out seal by seal.
    top = await sealed_to(conn)
    ahead: deque[Any] = deque()
    read_to = 0

    async def entries_through(last: int) -> list[Any]:
        nonlocal read_to
        while read_to < last:
            # (an altered seal may end past the newest seal's end: read up to it then)
            rows = await conn.fetch(_ENTRIES_SQL, read_to, max(top, last), BATCH)
            ahead.extend(rows)
            read_to = int(rows[-1]["id"]) if rows else last
        through = []
        while ahead and int(ahead[0]["id"]) <= last:
            through.append(ahead.popleft())
        return through

    previous = GENESIS
    verified_to = 0
    seal_cursor = 0
    while True:
        seals = await conn.fetch(_SEALS_SQL, seal_cursor, SEALS_A_READ)
        if not seals:
            break
        for sealed in seals:
            seal_cursor = int(sealed["id"])
            ids = [int(i) for i in sealed["entry_ids"]]
            hashes = bytes(sealed["entry_hashes"])
            last = int(sealed["last_entry_id"])
            if (
                not ids
                or len(ids) != sealed["entry_count"]
                or len(hashes) != 32 * len(ids)
                or ids[0] <= verified_to
                or ids != sorted(set(ids))
                or ids[-1] != last
            ):
                return fail(ids[0] if ids else last, f"seal {seal_cursor} is malformed")
            found = {int(row["id"]): row for row in await entries_through(last)}
            position = {eid: at for at, eid in enumerate(ids)}
            # in id order: an entry missing, one present but not sealed, one that changed
            for eid in sorted(found.keys() | position.keys()):
                if eid not in found:
                    return fail(eid, f"entry {eid} is in the chain but missing")
                at = position.get(eid)
                if at is None:
                    return fail(eid, f"entry {eid} is not in the chain (inserted after sealing?)")
                digest = row_hash(found[eid])
                if digest != hashes[at * 32 : at * 32 + 32]:
                    return fail(eid, f"entry {eid}: content does not match its sealed hash")
                previous = link(previous, digest)
                report.verified += 1
            if previous != bytes(sealed["chain_hash"]):
                return fail(last, f"seal {seal_cursor} does not match the chain at entry {last}")
            verified_to = last
            report.last_sealed_entry = last
    report.unsealed = int(
        await conn.fetchval("SELECT count(*) FROM ledger.entries WHERE id > $1", verified_to)
    )
    return report
