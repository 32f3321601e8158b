"""SQLAlchemy Core table definitions of the fairness schema (the transparency log): the
source of truth. The baseline migration creates the tables from this metadata and the
functions from `fairness/sql/`; a test checks that autogenerate finds no drift.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY, BYTEA

SCHEMA = "fairness"
metadata = sa.MetaData(schema=SCHEMA)

# seed_commitments: every seat's seed commitment (or its absence) for a deal, logged before
# any reveal, at most one per deal.
LEAF_TYPES = ("commitment", "seed_commitments", "result", "void", "key_rotation")
# Tables nobody may change or empty (triggers calling fairness.refuse_change); the head row
# only moves forward (fairness.check_head_forward) and is never deleted.
APPEND_ONLY = ("leaves", "nodes", "checkpoints", "keys", "cosignatures")


def _now() -> sa.TextClause:
    return sa.text("now()")


def _hash32(table: str, column: str) -> sa.CheckConstraint:
    return sa.CheckConstraint(f"length({column}) = 32", name=f"{table}_{column}_check")


leaves = sa.Table(
    "leaves",
    metadata,
    sa.Column("idx", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("leaf_data", BYTEA, nullable=False),
    sa.Column("leaf_hash", BYTEA, nullable=False),
    sa.Column("type", sa.Text, nullable=False),
    sa.Column("deal_id", sa.Text),
    sa.Column("commitment", sa.Text),
    sa.Column("root_after", BYTEA, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now()),
    sa.CheckConstraint(
        "(type = 'key_rotation') = (deal_id IS NULL)", name="leaves_deal_records_name_a_deal"
    ),
    sa.CheckConstraint("idx >= 0", name="leaves_idx_check"),
    _hash32("leaves", "leaf_hash"),
    _hash32("leaves", "root_after"),
    sa.CheckConstraint(
        "type IN (" + ", ".join(f"'{t}'" for t in LEAF_TYPES) + ")", name="leaves_type_check"
    ),
    sa.Index(
        "leaves_one_close_per_deal",
        "deal_id",
        unique=True,
        postgresql_where=sa.text("type IN ('result', 'void')"),
    ),
    sa.Index(
        "leaves_one_commitment_per_deal",
        "deal_id",
        unique=True,
        postgresql_where=sa.text("type = 'commitment'"),
    ),
    sa.Index(
        "leaves_one_seed_record_per_deal",
        "deal_id",
        unique=True,
        postgresql_where=sa.text("type = 'seed_commitments'"),
    ),
    sa.Index("leaves_type_created", "type", "created_at"),
)

# hashes of the perfect subtrees: (level, index within the level)
nodes = sa.Table(
    "nodes",
    metadata,
    sa.Column("level", sa.SmallInteger, primary_key=True, autoincrement=False),
    sa.Column("idx", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("hash", BYTEA, nullable=False),
    _hash32("nodes", "hash"),
    sa.CheckConstraint("idx >= 0", name="nodes_idx_check"),
    sa.CheckConstraint("level >= 0 AND level <= 63", name="nodes_level_check"),
)

# the single head row: tree size, compact range (frontier) and root
head = sa.Table(
    "head",
    metadata,
    sa.Column("id", sa.SmallInteger, primary_key=True, autoincrement=False),
    sa.Column("tree_size", sa.BigInteger, nullable=False),
    sa.Column("frontier", ARRAY(BYTEA), nullable=False),
    sa.Column("root_hash", BYTEA, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_now()),
    sa.CheckConstraint("id = 1", name="head_id_check"),
    _hash32("head", "root_hash"),
    sa.CheckConstraint("tree_size >= 0", name="head_tree_size_check"),
)

checkpoints = sa.Table(
    "checkpoints",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
    sa.Column("tree_size", sa.BigInteger, nullable=False),
    sa.Column("root_hash", BYTEA, nullable=False),
    sa.Column("key_id", sa.Text, nullable=False),
    sa.Column("signed_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("envelope", BYTEA, nullable=False),
    # the checkpoint as a C2SP tlog-checkpoint signed note, signed when the row is written (the
    # JSON envelope stays for the transcript format)
    sa.Column("note", sa.Text),
    _hash32("checkpoints", "root_hash"),
    sa.CheckConstraint("tree_size >= 0", name="checkpoints_tree_size_check"),
    sa.Index("checkpoints_tree_size", "tree_size"),
)

keys = sa.Table(
    "keys",
    metadata,
    sa.Column("key_id", sa.Text, primary_key=True),
    sa.Column("public_key", BYTEA, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now()),
    sa.CheckConstraint("key_id ~ '^[0-9a-f]{64}$'", name="keys_key_id_check"),
    sa.CheckConstraint("length(public_key) = 32", name="keys_public_key_check"),
)

# Witnesses' C2SP tlog-cosignature lines for a stored checkpoint.
cosignatures = sa.Table(
    "cosignatures",
    metadata,
    sa.Column(
        "checkpoint_id",
        sa.BigInteger,
        sa.ForeignKey("fairness.checkpoints.id"),
        primary_key=True,
        autoincrement=False,
    ),
    sa.Column("witness", sa.Text, primary_key=True),
    sa.Column("line", sa.Text, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now()),
    sa.CheckConstraint("length(witness) BETWEEN 1 AND 200", name="cosignatures_witness_check"),
    sa.CheckConstraint("length(line) BETWEEN 1 AND 1000", name="cosignatures_line_check"),
)
