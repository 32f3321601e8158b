"""Engine baseline: matches, their append-only event logs, and closings, from
`services.engine.schema.metadata`, then grants.

Revision ID: 0001_engine_baseline
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

from services.common.schema_source import create_tables, drop_schema_objects, execute_all
from services.engine.schema import SCHEMA, metadata

revision = "0001_engine_baseline"
down_revision = None
branch_labels = None
depends_on = None

GRANTS = (
    "GRANT USAGE ON SCHEMA engine TO mesa_app",
    "GRANT SELECT, INSERT ON engine.matches, engine.match_log, engine.match_closed TO mesa_app",
)


def upgrade() -> None:
    bind = op.get_bind()
    create_tables(bind, metadata)
    execute_all(bind, GRANTS)


def downgrade() -> None:
    drop_schema_objects(op.get_bind(), metadata, SCHEMA)
