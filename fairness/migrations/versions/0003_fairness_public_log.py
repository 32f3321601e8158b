"""Fairness: signed-note checkpoints (C2SP), seat-seed records, witness cosignatures.

- `checkpoints.note`: the checkpoint as a C2SP tlog-checkpoint signed note, signed when the
  row is written (the JSON envelope stays for the transcript format).
- leaf type `seed_commitments`: every seat's seed commitment (or its absence) for a deal,
  logged before the reveal; at most one per deal.
- `cosignatures`: witnesses' C2SP tlog-cosignature lines for a stored checkpoint.

Revision ID: 0003_fairness_public_log
Revises: 0002_fairness_append_function
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0003_fairness_public_log"
down_revision = "0002_fairness_append_function"
branch_labels = None
depends_on = None

STATEMENTS = (
    "ALTER TABLE fairness.checkpoints ADD COLUMN note TEXT",
    "ALTER TABLE fairness.leaves DROP CONSTRAINT leaves_type_check",
    "ALTER TABLE fairness.leaves ADD CONSTRAINT leaves_type_check CHECK (type IN "
    "('commitment', 'seed_commitments', 'result', 'void', 'key_rotation'))",
    "CREATE UNIQUE INDEX leaves_one_seed_record_per_deal ON fairness.leaves (deal_id)"
    " WHERE type = 'seed_commitments'",
    """CREATE TABLE fairness.cosignatures (
    checkpoint_id  BIGINT NOT NULL REFERENCES fairness.checkpoints (id),
    witness        TEXT NOT NULL CHECK (length(witness) BETWEEN 1 AND 200),
    line           TEXT NOT NULL CHECK (length(line) BETWEEN 1 AND 1000),
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (checkpoint_id, witness)
)""",
    "CREATE TRIGGER cosignatures_append_only BEFORE UPDATE OR DELETE ON fairness.cosignatures"
    " FOR EACH ROW EXECUTE FUNCTION fairness.refuse_change()",
    "CREATE TRIGGER cosignatures_no_truncate BEFORE TRUNCATE ON fairness.cosignatures"
    " FOR EACH STATEMENT EXECUTE FUNCTION fairness.refuse_change()",
    "REVOKE ALL ON fairness.cosignatures FROM PUBLIC",
    "GRANT SELECT, INSERT ON fairness.cosignatures TO mesa_app",
)


def upgrade() -> None:
    for statement in STATEMENTS:
        op.execute(statement)


def downgrade() -> None:
    op.execute("DROP TABLE fairness.cosignatures")
    op.execute("DROP INDEX fairness.leaves_one_seed_record_per_deal")
    op.execute("ALTER TABLE fairness.checkpoints DROP COLUMN note")
