"""Gateway baseline: accounts, sessions and bearer tokens, table chat, invitations, the
staff audit log, responsible-play limits, support's disputes (with append-only notes) and
refund proposals, from `api.schema.metadata`, then the append-only triggers and the grants.

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
    "GRANT SELECT, INSERT ON gateway.invitation_players TO mesa_app",
    "GRANT UPDATE (answer, answered_at) ON gateway.invitation_players TO mesa_app",
    "GRANT SELECT, INSERT ON gateway.play_limits, gateway.play_settings TO mesa_app",
    "GRANT UPDATE (cents, pending_cents, pending_at, updated_at) ON gateway.play_limits "
    "TO mesa_app",
    "GRANT UPDATE (reminder_min, cooling_off_until, random_opponents_only, updated_at) "
    "ON gateway.play_settings "
    "TO mesa_app",
    "GRANT SELECT, INSERT ON gateway.disputes, gateway.dispute_notes, gateway.refund_proposals "
    "TO mesa_app",
    "GRANT UPDATE (status, closed_by, closed_at, close_reason) ON gateway.disputes TO mesa_app",
    "GRANT UPDATE (status, decided_by, decided_at, decision_reason, reversal_entry_id) "
    "ON gateway.refund_proposals TO mesa_app",
    "GRANT SELECT, INSERT, UPDATE ON gateway.identity_checks TO mesa_app",
    "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA gateway TO mesa_app",
    # Players' reports are append-only for the application.
    "GRANT SELECT, INSERT ON gateway.player_reports TO mesa_app",
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
    # A dispute's notes are its record: kept as written, never edited or removed.
    """CREATE FUNCTION gateway.refuse_dispute_note_change() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'dispute notes are append-only';
    END
    $$""",
    "CREATE TRIGGER dispute_notes_append_only BEFORE UPDATE OR DELETE ON gateway.dispute_notes "
    "FOR EACH ROW EXECUTE FUNCTION gateway.refuse_dispute_note_change()",
    "CREATE TRIGGER dispute_notes_no_truncate BEFORE TRUNCATE ON gateway.dispute_notes "
    "FOR EACH STATEMENT EXECUTE FUNCTION gateway.refuse_dispute_note_change()",
)


def upgrade() -> None:
    bind = op.get_bind()
    create_tables(bind, metadata)
    execute_all(bind, APPEND_ONLY)
    execute_all(bind, GRANTS)


def downgrade() -> None:
    drop_schema_objects(op.get_bind(), metadata, SCHEMA)
