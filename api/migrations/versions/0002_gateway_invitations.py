"""Gateway: invitations to sit as someone's partner (nothing is seated or held until accepted).

Revision ID: 0002_gateway_invitations
Revises: 0001_gateway_initial
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0002_gateway_invitations"
down_revision = "0001_gateway_initial"
branch_labels = None
depends_on = None

SQL = """
CREATE TABLE gateway.invitations (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    inviter         TEXT NOT NULL REFERENCES gateway.users (id),
    invitee         TEXT NOT NULL REFERENCES gateway.users (id),
    op              TEXT NOT NULL CHECK (op IN ('quick', 'private', 'code')),
    kind            TEXT CHECK (kind ~ '^[a-z0-9-]{1,40}$'),
    tier            TEXT CHECK (tier IN ('free', '10', '20', '40', '80')),
    invite_code     TEXT CHECK (invite_code ~ '^[A-Z0-9]{4,16}$'),
    status          TEXT NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'accepted', 'declined', 'cancelled', 'expired', 'failed')),
    failure         TEXT CHECK (failure ~ '^[a-z_]{1,64}$'),
    table_id        TEXT CHECK (length(table_id) BETWEEN 1 AND 64),
    idempotency_key TEXT NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 100),
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at      TIMESTAMPTZ NOT NULL,
    decided_at      TIMESTAMPTZ,
    CHECK (inviter <> invitee),
    CHECK (expires_at > created_at),
    CHECK (CASE WHEN op = 'code'
                THEN invite_code IS NOT NULL AND kind IS NULL AND tier IS NULL
                ELSE invite_code IS NULL AND kind IS NOT NULL AND tier IS NOT NULL END),
    UNIQUE (inviter, idempotency_key)
);
CREATE INDEX invitations_inviter ON gateway.invitations (inviter, status);
CREATE INDEX invitations_invitee ON gateway.invitations (invitee, status);

GRANT SELECT, INSERT ON gateway.invitations TO mesa_app;
GRANT UPDATE (status, failure, table_id, decided_at) ON gateway.invitations TO mesa_app;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA gateway TO mesa_app;
"""


def upgrade() -> None:
    for statement in SQL.split(";\n"):
        if statement.strip():
            op.execute(statement)


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS gateway.invitations")
