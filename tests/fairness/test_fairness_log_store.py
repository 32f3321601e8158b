"""The transparency log on PostgreSQL: appends, proofs, checkpoints, orphans, no rewriting."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from fairness.commitments import (
    SeedRound,
    SeedRoundResult,
    checkpoint_fields,
    commitment_record,
    leaf_bytes,
    server_seed_commitment,
    verify_signed,
)
from fairness.flow import close_deal, void_deal
from fairness.keys import OperatorKey, load_operator_key, rotation_entry
from fairness.log_store import DuplicateRecord, LogError, LogStore
from fairness.merkle import MemoryTree, leaf_hash, verify_consistency, verify_inclusion
from services.common.db import asyncpg_dsn
from tests.fairness.fairness_helpers import opened_deal

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _seeds() -> SeedRoundResult:
    rnd = SeedRound(4)
    return rnd.close()


async def test_append_proofs_and_checkpoints(store: LogStore, operator_key: OperatorKey) -> None:
    size0, _ = await store.head()
    mirror = MemoryTree()
    for idx, _, data in await store.leaves(0, size0):
        assert mirror.append(data) == idx
    old_root = mirror.root()
    run = datetime.now(UTC).strftime("%H%M%S%f")
    opened = [opened_deal(operator_key, f"log/{run}/{i}") for i in range(37)]
    for o in opened[:30]:
        a = await store.append(o.commitment)
        assert a.index == mirror.append(leaf_bytes(o.commitment))
        assert a.root_hash == mirror.root()
    batch = await store.append_many([o.commitment for o in opened[30:]])
    for o, a in zip(opened[30:], batch, strict=True):
        assert a.index == mirror.append(leaf_bytes(o.commitment))
    size, root = await store.head()
    assert (size, root) == (mirror.size, mirror.root())
    for i in range(size):
        got_size, path = await store.inclusion_proof(i)
        assert path == mirror.inclusion(i)
        verify_inclusion(i, size, mirror.hashes[i], path, root)
    for m in range(size + 1):
        proof = await store.consistency_proof(m)
        assert proof == mirror.consistency(m)
        verify_consistency(m, size, mirror.root(m), root, proof)
    verify_consistency(size0, size, old_root, root, await store.consistency_proof(size0))
    # checkpoint
    cp = await store.checkpoint_if_due(force=True)
    assert cp is not None
    record = verify_signed(cp, {operator_key.key_id: operator_key.public_raw})
    assert checkpoint_fields(record) == (size, root)
    assert await store.latest_checkpoint() == cp
    assert await store.checkpoint_if_due(force=True) is None  # tree did not grow
    dp = await store.deal_proof(opened[5].deal_id)
    assert dp.checkpoint == cp
    verify_inclusion(
        dp.leaf_index,
        dp.tree_size,
        leaf_hash(leaf_bytes(opened[5].commitment)),
        dp.path,
        root,
    )


async def test_checkpoint_interval(store: LogStore, operator_key: OperatorKey) -> None:
    await store.append(
        opened_deal(operator_key, f"cp/{datetime.now(UTC).timestamp()}/a").commitment
    )
    now = datetime.now(UTC) + timedelta(hours=1)
    first = await store.checkpoint_if_due(now=now, min_interval_s=10)
    assert first is not None
    await store.append(
        opened_deal(operator_key, f"cp/{datetime.now(UTC).timestamp()}/b").commitment
    )
    assert await store.checkpoint_if_due(now=now + timedelta(seconds=3), min_interval_s=10) is None
    again = await store.checkpoint_if_due(now=now + timedelta(seconds=11), min_interval_s=10)
    assert again is not None and again["record"]["tree_size"] == first["record"]["tree_size"] + 1


async def test_results_voids_and_orphans(store: LogStore, operator_key: OperatorKey) -> None:
    run = datetime.now(UTC).timestamp()
    a, b, c = (opened_deal(operator_key, f"orph/{run}/{x}") for x in "abc")
    for o in (a, b, c):
        await store.append(o.commitment)
    await store.append(close_deal(operator_key, a, _seeds(), [], None, T0))
    await store.append(void_deal(operator_key, b, "redeal", T0))
    orphans = {o.deal_id for o in await store.orphans()}
    assert c.deal_id in orphans and a.deal_id not in orphans and b.deal_id not in orphans
    with pytest.raises(DuplicateRecord):  # a second closing record
        await store.append(void_deal(operator_key, a, "match_void", T0))
    with pytest.raises(DuplicateRecord):  # a second commitment for the deal
        await store.append(a.commitment)
    stranger = opened_deal(operator_key, f"orph/{run}/never-committed")
    with pytest.raises(LogError) as refused:
        await store.append(close_deal(operator_key, stranger, _seeds(), [], None, T0))
    assert not isinstance(refused.value, DuplicateRecord)
    forged = dict(a.commitment)
    forged["signature"] = "00" * 64
    with pytest.raises(LogError):
        await store.append(forged)
    other = load_operator_key(env={"MESA_OPERATOR_KEY": "22" * 32})
    with pytest.raises(LogError):  # signed by a key the log does not know
        await store.append(opened_deal(other, f"orph/{run}/other").commitment)
    # a rotation makes the new key known
    await store.append(rotation_entry(operator_key, other, T0))
    await store.append(opened_deal(other, f"orph/{run}/other").commitment)
    keys = {k["key_id"] for k in await store.public_keys()}
    assert {operator_key.key_id, other.key_id} <= keys


async def test_concurrent_appends_stay_consistent(
    store: LogStore, operator_key: OperatorKey
) -> None:
    run = datetime.now(UTC).timestamp()
    opened = [opened_deal(operator_key, f"conc/{run}/{i}") for i in range(20)]
    results = await asyncio.gather(*(store.append(o.commitment) for o in opened))
    assert len({r.index for r in results}) == 20
    size, root = await store.head()
    mirror = MemoryTree()
    for _, _, data in await store.leaves(0, size):
        mirror.append(data)
    assert mirror.root() == root


REWRITES = [
    "UPDATE fairness.leaves SET type = 'void' WHERE idx = 0",
    "DELETE FROM fairness.leaves WHERE idx = 0",
    "TRUNCATE fairness.leaves",
    "UPDATE fairness.nodes SET hash = hash WHERE level = 0 AND idx = 0",
    "DELETE FROM fairness.nodes",
    "TRUNCATE fairness.checkpoints",
    "DELETE FROM fairness.checkpoints",
    "UPDATE fairness.checkpoints SET tree_size = 0",
    "DELETE FROM fairness.keys",
    "DELETE FROM fairness.head",
    "UPDATE fairness.head SET tree_size = 0",
    "TRUNCATE fairness.head",
    "INSERT INTO fairness.leaves (idx, leaf_data, leaf_hash, type, deal_id, root_after)"
    " VALUES (100000, '\\x00', sha256('x'), 'void', 'gap', sha256('x'))",
]


@pytest.mark.parametrize("sql", REWRITES)
@pytest.mark.parametrize("as_app", [True, False], ids=["mesa_app", "owner"])
async def test_log_refuses_rewriting(
    store: LogStore, migrated: str, operator_key: OperatorKey, sql: str, as_app: bool
) -> None:
    await store.append(opened_deal(operator_key, f"rw/{datetime.now(UTC).timestamp()}").commitment)
    await store.checkpoint_if_due(force=True)
    settings = {"role": "mesa_app"} if as_app else {}
    conn = await asyncpg.connect(asyncpg_dsn(migrated), server_settings=settings)
    try:
        with pytest.raises(asyncpg.PostgresError):
            await conn.execute(sql)
    finally:
        await conn.close()


def test_commitment_record_needs_seats() -> None:
    with pytest.raises(ValueError):
        commitment_record(
            deal_id="d",
            table_id="t",
            variant="v",
            options={},
            tile_set=6,
            hand_size=7,
            seats=[],
            commitment=server_seed_commitment(bytes(32)),
            time=T0,
            signing_key_id="k",
        )
