"""Fairness: append-only transparency log (leaves, perfect-subtree nodes), head, checkpoints, keys.

Revision ID: 0001_fairness_initial
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

from alembic import op

revision = "0001_fairness_initial"
down_revision = None
branch_labels = None
depends_on = None

TABLES = """
CREATE TABLE fairness.leaves (
    idx         BIGINT PRIMARY KEY CHECK (idx >= 0),
    leaf_data   BYTEA NOT NULL,
    leaf_hash   BYTEA NOT NULL CHECK (length(leaf_hash) = 32),
    type        TEXT NOT NULL CHECK (type IN ('commitment', 'result', 'void', 'key_rotation')),
    deal_id     TEXT,
    commitment  TEXT,
    root_after  BYTEA NOT NULL CHECK (length(root_after) = 32),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT leaves_deal_records_name_a_deal
        CHECK ((type = 'key_rotation') = (deal_id IS NULL))
);
-- one commitment per deal, and at most one closing record (result or void) per deal
CREATE UNIQUE INDEX leaves_one_commitment_per_deal ON fairness.leaves (deal_id)
    WHERE type = 'commitment';
CREATE UNIQUE INDEX leaves_one_close_per_deal ON fairness.leaves (deal_id)
    WHERE type IN ('result', 'void');
CREATE INDEX leaves_type_created ON fairness.leaves (type, created_at);

-- hash of every perfect subtree: (level, idx) covers leaves [idx * 2^level, (idx+1) * 2^level)
CREATE TABLE fairness.nodes (
    level   SMALLINT NOT NULL CHECK (level BETWEEN 0 AND 63),
    idx     BIGINT NOT NULL CHECK (idx >= 0),
    hash    BYTEA NOT NULL CHECK (length(hash) = 32),
    PRIMARY KEY (level, idx)
);

-- the single head row: tree size, compact range (frontier) and root
CREATE TABLE fairness.head (
    id          SMALLINT PRIMARY KEY CHECK (id = 1),
    tree_size   BIGINT NOT NULL CHECK (tree_size >= 0),
    frontier    BYTEA[] NOT NULL,
    root_hash   BYTEA NOT NULL CHECK (length(root_hash) = 32),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
INSERT INTO fairness.head (id, tree_size, frontier, root_hash)
VALUES (1, 0, '{}', sha256(''::bytea));

CREATE TABLE fairness.checkpoints (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tree_size   BIGINT NOT NULL CHECK (tree_size >= 0),
    root_hash   BYTEA NOT NULL CHECK (length(root_hash) = 32),
    key_id      TEXT NOT NULL,
    signed_at   TIMESTAMPTZ NOT NULL,
    envelope    BYTEA NOT NULL
);
CREATE INDEX checkpoints_tree_size ON fairness.checkpoints (tree_size);

CREATE TABLE fairness.keys (
    key_id      TEXT PRIMARY KEY CHECK (key_id ~ '^[0-9a-f]{64}$'),
    public_key  BYTEA NOT NULL CHECK (length(public_key) = 32),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
"""

FUNCTIONS = """
CREATE FUNCTION fairness.refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'fairness.%: the transparency log is append-only (% refused)',
    TG_TABLE_NAME, TG_OP USING ERRCODE = 'insufficient_privilege';
END $$;

-- leaves arrive in order, without gaps, and only together with the head moving forward
CREATE FUNCTION fairness.check_leaf_order() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE expected BIGINT;
BEGIN
  SELECT coalesce(max(idx) + 1, 0) INTO expected FROM fairness.leaves;
  IF NEW.idx <> expected THEN
    RAISE EXCEPTION 'fairness.leaves: leaf % out of order (next is %)', NEW.idx, expected;
  END IF;
  RETURN NEW;
END $$;

CREATE FUNCTION fairness.check_head_forward() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.tree_size < OLD.tree_size THEN
    RAISE EXCEPTION 'fairness.head: the tree never shrinks (% -> %)', OLD.tree_size, NEW.tree_size;
  END IF;
  IF NEW.tree_size <> (SELECT coalesce(max(idx) + 1, 0) FROM fairness.leaves) THEN
    RAISE EXCEPTION 'fairness.head: tree size % does not match the leaves', NEW.tree_size;
  END IF;
  RETURN NEW;
END $$;
"""

APPEND_ONLY = ("leaves", "nodes", "checkpoints", "keys")

GRANTS = """
GRANT USAGE ON SCHEMA fairness TO mesa_app;
GRANT SELECT ON ALL TABLES IN SCHEMA fairness TO mesa_app;
GRANT INSERT ON fairness.leaves, fairness.nodes, fairness.checkpoints, fairness.keys TO mesa_app;
GRANT UPDATE (tree_size, frontier, root_hash, updated_at) ON fairness.head TO mesa_app;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA fairness TO mesa_app;
"""


def _run(sql: str) -> None:
    for statement in _split(sql):
        op.execute(statement)


def _split(sql: str) -> list[str]:
    """Split on `;` at line ends outside dollar-quoted bodies."""
    out, buf, in_body = [], [], False
    for line in sql.splitlines():
        buf.append(line)
        if line.count("$$") % 2 == 1:
            in_body = not in_body
        if not in_body and line.rstrip().endswith(";"):
            statement = "\n".join(buf).strip()
            if statement and not all(s.strip().startswith("--") for s in buf if s.strip()):
                out.append(statement)
            buf = []
    return out


def upgrade() -> None:
    _run(TABLES)
    _run(FUNCTIONS)
    for table in APPEND_ONLY:
        op.execute(
            f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON fairness.{table} "
            "FOR EACH ROW EXECUTE FUNCTION fairness.refuse_change()"
        )
        op.execute(
            f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON fairness.{table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION fairness.refuse_change()"
        )
    op.execute(
        "CREATE TRIGGER leaves_in_order BEFORE INSERT ON fairness.leaves "
        "FOR EACH ROW EXECUTE FUNCTION fairness.check_leaf_order()"
    )
    op.execute(
        "CREATE TRIGGER head_forward BEFORE UPDATE ON fairness.head "
        "FOR EACH ROW EXECUTE FUNCTION fairness.check_head_forward()"
    )
    op.execute(
        "CREATE TRIGGER head_no_delete BEFORE DELETE ON fairness.head "
        "FOR EACH ROW EXECUTE FUNCTION fairness.refuse_change()"
    )
    op.execute(
        "CREATE TRIGGER head_no_truncate BEFORE TRUNCATE ON fairness.head "
        "FOR EACH STATEMENT EXECUTE FUNCTION fairness.refuse_change()"
    )
    op.execute("REVOKE ALL ON ALL TABLES IN SCHEMA fairness FROM PUBLIC")
    _run(GRANTS)


def downgrade() -> None:
    op.execute("DROP SCHEMA fairness CASCADE")
