"""Gateway baseline: accounts, sessions and bearer tokens, table chat, invitations, from
`api.schema.metadata`, then grants.

Revision ID: 0001_gateway_baseline
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

from api.schema import SCHEMA, metadata
from services.common.schema_source import create_tables, drop_schema_objects, execute_all

revision = "0001_gateway_baseline"
down_revision = None
branch_labels = None
depends_on = None

GRANTS = (
    "GRANT USAGE ON SCHEMA gateway TO mesa_app",
    "GRANT SELECT, INSERT ON gateway.users, gateway.sessions, gateway.chat, gateway.invitations "
    "TO mesa_app",
    "GRANT UPDATE (display_name, password_hash, role, status, excluded_until, updated_at) "
    "ON gateway.users TO mesa_app",
    "GRANT UPDATE (revoked_at) ON gateway.sessions TO mesa_app",
    "GRANT DELETE ON gateway.sessions TO mesa_app",
    "GRANT UPDATE (status, failure, table_id, decided_at) ON gateway.invitations TO mesa_app",
    "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA gateway TO mesa_app",
)


def upgrade() -> None:
    bind = op.get_bind()
    create_tables(bind, metadata)
    execute_all(bind, GRANTS)


def downgrade() -> None:
    drop_schema_objects(op.get_bind(), metadata, SCHEMA)
