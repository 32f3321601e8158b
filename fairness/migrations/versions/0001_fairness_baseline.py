"""Fairness baseline: tables from `fairness.schema.metadata`, functions from `fairness/sql/`,
then the append-only and order triggers, the empty tree's head row and grants.

Revision ID: 0001_fairness_baseline
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

from pathlib import Path

from alembic import op

from fairness.schema import APPEND_ONLY, SCHEMA, metadata
from services.common.schema_source import (
    apply_functions,
    create_tables,
    drop_schema_objects,
    execute_all,
)

revision = "0001_fairness_baseline"
down_revision = None
branch_labels = None
depends_on = None

FUNCTIONS = Path(__file__).resolve().parents[2] / "sql"

TRIGGERS = tuple(
    statement
    for table in APPEND_ONLY
    for statement in (
        f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON fairness.{table} "
        "FOR EACH ROW EXECUTE FUNCTION fairness.refuse_change()",
        f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON fairness.{table} "
        "FOR EACH STATEMENT EXECUTE FUNCTION fairness.refuse_change()",
    )
) + (
    # leaves arrive in order, without gaps; the head only moves forward, with the leaves
    "CREATE TRIGGER leaves_in_order BEFORE INSERT ON fairness.leaves "
    "FOR EACH ROW EXECUTE FUNCTION fairness.check_leaf_order()",
    "CREATE TRIGGER head_forward BEFORE UPDATE ON fairness.head "
    "FOR EACH ROW EXECUTE FUNCTION fairness.check_head_forward()",
    "CREATE TRIGGER head_no_delete BEFORE DELETE ON fairness.head "
    "FOR EACH ROW EXECUTE FUNCTION fairness.refuse_change()",
    "CREATE TRIGGER head_no_truncate BEFORE TRUNCATE ON fairness.head "
    "FOR EACH STATEMENT EXECUTE FUNCTION fairness.refuse_change()",
)

SEED = (
    "INSERT INTO fairness.head (id, tree_size, frontier, root_hash) "
    "VALUES (1, 0, '{}', sha256(''::bytea))",
)

GRANTS = (
    "REVOKE ALL ON ALL TABLES IN SCHEMA fairness FROM PUBLIC",
    "GRANT USAGE ON SCHEMA fairness TO mesa_app",
    "GRANT SELECT ON ALL TABLES IN SCHEMA fairness TO mesa_app",
    "GRANT INSERT ON fairness.leaves, fairness.nodes, fairness.checkpoints, fairness.keys, "
    "fairness.cosignatures TO mesa_app",
    "GRANT UPDATE (tree_size, frontier, root_hash, updated_at) ON fairness.head TO mesa_app",
    "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA fairness TO mesa_app",
    # the log is appended through this function only (one round trip per batch)
    "REVOKE ALL ON FUNCTION fairness.append_leaves(text[], bytea[], text[], text[], text[], "
    "bytea[]) FROM PUBLIC",
    "GRANT EXECUTE ON FUNCTION fairness.append_leaves(text[], bytea[], text[], text[], text[], "
    "bytea[]) TO mesa_app",
)


def upgrade() -> None:
    bind = op.get_bind()
    create_tables(bind, metadata)
    apply_functions(bind, FUNCTIONS, SCHEMA)
    execute_all(bind, TRIGGERS + SEED + GRANTS)


def downgrade() -> None:
    drop_schema_objects(op.get_bind(), metadata, SCHEMA)
