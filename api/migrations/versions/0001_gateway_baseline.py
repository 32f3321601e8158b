"""Gateway baseline: accounts, sessions and bearer tokens, table chat, invitations and the
staff audit log, from `api.schema.metadata`, then its append-only trigger and the grants.

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
    "GRANT SELECT, INSERT ON gateway.users, gateway.sessions, gateway.chat, gateway.invitations, "
    "gateway.staff_actions TO mesa_app",
    "GRANT UPDATE (display_name, password_hash, role, status, excluded_until, updated_at) "
    "ON gateway.users TO mesa_app",
    "GRANT UPDATE (revoked_at) ON gateway.sessions TO mesa_app",
    "GRANT DELETE ON gateway.sessions TO mesa_app",
    "GRANT UPDATE (status, failure, table_id, decided_at) ON gateway.invitations TO mesa_app",
    "GRANT SELECT, INSERT, UPDATE ON gateway.identity_checks TO mesa_app",
    "GRANT SELECT, INSERT ON gateway.rematches, gateway.rematch_players TO mesa_app",
    "GRANT UPDATE (status, failure, table_id, decided_at) ON gateway.rematches TO mesa_app",
    "GRANT UPDATE (answer, answered_at) ON gateway.rematch_players TO mesa_app",
    "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA gateway TO mesa_app",
)


# The staff audit log is append-only for everyone, the schema's owner included.
APPEND_ONLY = (
    """CREATE FUNCTION gateway.refuse_staff_action_change() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'the staff audit log is append-only';
    END
    $$""",
    "CREATE TRIGGER staff_actions_append_only BEFORE UPDATE OR DELETE ON gateway.staff_actions "
    "FOR EACH ROW EXECUTE FUNCTION gateway.refuse_staff_action_change()",
    "CREATE TRIGGER staff_actions_no_truncate BEFORE TRUNCATE ON gateway.staff_actions "
    "FOR EACH STATEMENT EXECUTE FUNCTION gateway.refuse_staff_action_change()",
)


def upgrade() -> None:
    bind = op.get_bind()
    create_tables(bind, metadata)
    execute_all(bind, APPEND_ONLY)
    execute_all(bind, GRANTS)


def downgrade() -> None:
    drop_schema_objects(op.get_bind(), metadata, SCHEMA)
