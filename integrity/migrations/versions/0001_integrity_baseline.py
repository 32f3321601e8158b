"""Integrity baseline: alerts and their evidence, withdrawal holds, seat observations and the
scan's cursors, from `integrity.schema.metadata`, then grants.

Revision ID: 0001_integrity_baseline
Revises:
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

from integrity.schema import SCHEMA, metadata
from services.common.schema_source import create_tables, drop_schema_objects, execute_all

revision = "0001_integrity_baseline"
down_revision = None
branch_labels = None
depends_on = None

GRANTS = (
    "GRANT USAGE ON SCHEMA integrity TO mesa_app",
    "GRANT SELECT, INSERT ON integrity.alerts, integrity.alert_evidence, "
    "integrity.withdrawal_holds, integrity.seat_observations, integrity.scan_cursors TO mesa_app",
    "GRANT UPDATE (score, figures, updated_at, status, resolution, close_reason, closed_by, "
    "closed_at) ON integrity.alerts TO mesa_app",
    "GRANT UPDATE (released_by, release_reason, released_at) ON integrity.withdrawal_holds "
    "TO mesa_app",
    "GRANT UPDATE (position, updated_at) ON integrity.scan_cursors TO mesa_app",
    "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA integrity TO mesa_app",
)


def upgrade() -> None:
    bind = op.get_bind()
    create_tables(bind, metadata)
    execute_all(bind, GRANTS)


def downgrade() -> None:
    drop_schema_objects(op.get_bind(), metadata, SCHEMA)
