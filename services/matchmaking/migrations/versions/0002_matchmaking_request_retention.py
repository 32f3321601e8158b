"""matchmaking: idempotency records are purged after their retention period

Revision ID: mm0002
Revises: mm0001
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision = "mm0002"
down_revision = "mm0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE INDEX requests_age ON matchmaking.requests (created_ms)")
    op.execute("GRANT DELETE ON matchmaking.requests TO mesa_app")


def downgrade() -> None:
    op.execute("REVOKE DELETE ON matchmaking.requests FROM mesa_app")
    op.execute("DROP INDEX matchmaking.requests_age")
