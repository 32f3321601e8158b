"""matchmaking: a table whose match has ended is 'finished' and leaves the player's tables

Revision ID: mm0003
Revises: mm0002
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision = "mm0003"
down_revision = "mm0002"
branch_labels = None
depends_on = None

STATEMENTS = [
    "ALTER TABLE matchmaking.tables DROP CONSTRAINT tables_status_check",
    "ALTER TABLE matchmaking.tables ADD CONSTRAINT tables_status_check CHECK "
    "(status IN ('waiting', 'starting', 'started', 'playing', 'finished', 'voided'))",
]


def upgrade() -> None:
    for statement in STATEMENTS:
        op.execute(statement)


def downgrade() -> None:
    op.execute("UPDATE matchmaking.tables SET status = 'playing' WHERE status = 'finished'")
    op.execute("ALTER TABLE matchmaking.tables DROP CONSTRAINT tables_status_check")
    op.execute(
        "ALTER TABLE matchmaking.tables ADD CONSTRAINT tables_status_check CHECK "
        "(status IN ('waiting', 'starting', 'started', 'playing', 'voided'))"
    )
