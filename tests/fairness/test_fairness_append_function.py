"""`fairness.append_leaves` (PL/pgSQL) builds byte for byte the tree of `fairness/merkle.py`."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from itertools import count

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairness.commitments import SeedRound, sign_record
from fairness.flow import close_deal
from fairness.keys import OperatorKey, load_operator_key, rotation_entry
from fairness.log_store import APPEND_SQL, LogError, LogStore
from fairness.merkle import CompactRange, MemoryTree
from services.common.db import app_server_settings, asyncpg_dsn, create_pool
from tests.fairness.fairness_helpers import example_key, opened_deal

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
_deal_numbers = count()


async def _check_batches(url: str, batches: list[list[bytes]]) -> None:
    """Append the batches through the function as `mesa_app`, then compare everything the
    database holds with the pure Python model built from the same leaves."""
    conn = await asyncpg.connect(asyncpg_dsn(url), server_settings=app_server_settings("prop"))
    pool = await create_pool(url, application_name="prop-proofs", max_size=2)
    store = LogStore(pool, example_key())
    try:
        rows = await conn.fetch("SELECT leaf_data FROM fairness.leaves ORDER BY idx")
        mirror = MemoryTree()
        cr = CompactRange()
        expected_nodes: dict[tuple[int, int], bytes] = {}
        for r in rows:
            mirror.append(bytes(r["leaf_data"]))
            for lvl, i, h in cr.append(mirror.hashes[-1]):
                expected_nodes[(lvl, i)] = h
        sizes = [mirror.size]
        for datas in batches:
            n = len(datas)
            deals = [f"prop/{next(_deal_numbers)}" for _ in datas]
            got = await conn.fetch(
                APPEND_SQL, ["commitment"] * n, datas, deals, [None] * n, [None] * n, [None] * n
            )
            assert len(got) == n
            for data, row in zip(datas, got, strict=True):
                index = mirror.append(data)
                for lvl, i, h in cr.append(mirror.hashes[-1]):
                    expected_nodes[(lvl, i)] = h
                assert (row["out_index"], row["out_size"]) == (index, mirror.size)
                assert bytes(row["out_root"]) == mirror.root()
            sizes.append(mirror.size)
            head = await conn.fetchrow(
                "SELECT tree_size, frontier, root_hash FROM fairness.head WHERE id = 1"
            )
            assert head["tree_size"] == cr.size == mirror.size
            assert [bytes(h) for h in head["frontier"]] == cr.hashes
            assert bytes(head["root_hash"]) == cr.root() == mirror.root()
        leaves = await conn.fetch("SELECT idx, leaf_hash, root_after FROM fairness.leaves")
        assert len(leaves) == mirror.size
        for r in leaves:
            assert bytes(r["leaf_hash"]) == mirror.hashes[r["idx"]]
            assert bytes(r["root_after"]) == mirror.root(r["idx"] + 1)
        nodes = await conn.fetch("SELECT level, idx, hash FROM fairness.nodes")
        assert {(r["level"], r["idx"]): bytes(r["hash"]) for r in nodes} == expected_nodes
        # proofs read from the stored nodes equal the recursive RFC 9162 definitions
        size = mirror.size
        probes = {0, size - 1, size // 2, *(s - 1 for s in sizes if s > 0)}
        for i in sorted(p for p in probes if 0 <= p < size):
            for at in {size, i + 1, *(s for s in sizes if s > i)}:
                assert (await store.inclusion_proof(i, at))[1] == mirror.inclusion(i, at)
        for old in sizes:
            for new in sizes:
                if old <= new:
                    assert await store.consistency_proof(old, new) == mirror.consistency(old, new)
    finally:
        await conn.close()
        await store.aclose()
        await pool.close()


# Batch sizes up to 70 over many examples grow one tree past several powers of two
# (the module's database starts empty), checked after every batch.
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    batches=st.lists(
        st.lists(st.binary(min_size=0, max_size=40), min_size=1, max_size=70),
        min_size=1,
        max_size=4,
    )
)
def test_function_builds_the_python_tree(migrated: str, batches: list[list[bytes]]) -> None:
    asyncio.run(_check_batches(migrated, batches))


def test_function_at_powers_of_two(migrated: str) -> None:
    """Explicitly walk the sizes around 2^k up to 1,025 in batches that end on 2^k - 1, 2^k
    and 2^k + 1."""

    async def run() -> None:
        conn = await asyncpg.connect(asyncpg_dsn(migrated))
        size = int(await conn.fetchval("SELECT tree_size FROM fairness.head"))
        await conn.close()
        ends = sorted({e for k in range(11) for e in (2**k - 1, 2**k, 2**k + 1) if e > size})
        batches, at = [], size
        for end in ends:
            batches.append([f"leaf {i}".encode() for i in range(at, end)])
            at = end
        await _check_batches(migrated, [b for b in batches if b])

    asyncio.run(run())


async def test_batch_links_and_rotations(store: LogStore, operator_key: OperatorKey) -> None:
    """A result may close a deal committed earlier in the same batch; a rotation makes its
    key usable by the records after it in the batch; a refused batch appends nothing."""
    run = datetime.now(UTC).timestamp()
    a = opened_deal(operator_key, f"fn/{run}/a")
    result = close_deal(operator_key, a, SeedRound(4).close(), [], None, T0)
    size0, _ = await store.head()
    out = await store.append_many([a.commitment, result])
    assert [x.index for x in out] == [size0, size0 + 1]

    other = load_operator_key(env={"MESA_OPERATOR_KEY": "33" * 32})
    b = opened_deal(other, f"fn/{run}/b")
    stranger = opened_deal(operator_key, f"fn/{run}/never")
    bad = close_deal(operator_key, stranger, SeedRound(4).close(), [], None, T0)
    with pytest.raises(LogError, match="no commitment for deal"):
        await store.append_many([rotation_entry(operator_key, other, T0), b.commitment, bad])
    assert (await store.head())[0] == size0 + 2  # nothing of the refused batch
    with pytest.raises(LogError, match="unknown key id"):
        await store.append(b.commitment)  # the rotation was not logged
    await store.append_many([rotation_entry(operator_key, other, T0), b.commitment])
    assert (await store.head())[0] == size0 + 4

    # another replica (its own cache) learns the rotated key from fairness.keys
    fresh = LogStore(store.pool, operator_key)
    try:
        c = opened_deal(other, f"fn/{run}/c")
        assert (await fresh.append(c.commitment)).index == size0 + 4
        forged = dict(opened_deal(other, f"fn/{run}/d").commitment)
        forged["record"] = {**forged["record"], "commitment": "00" * 32}
        with pytest.raises(LogError, match="signature"):
            await fresh.append(forged)
        differs = dict(close_deal(operator_key, a, SeedRound(4).close(), [], None, T0))
        differs["record"] = {**differs["record"], "commitment": "11" * 32}
        with pytest.raises(LogError, match="commitment differs"):
            await fresh.append(sign_record(operator_key.private_key, differs["record"]))
    finally:
        await fresh.aclose()
