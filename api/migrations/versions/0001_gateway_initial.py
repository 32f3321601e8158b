"""Gateway: accounts, roles, sessions and bearer tokens, table chat.

Revision ID: 0001_gateway_initial
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision = "0001_gateway_initial"
down_revision = None
branch_labels = None
depends_on = None

SQL = """
CREATE TABLE gateway.users (
    id             TEXT PRIMARY KEY CHECK (id ~ '^[a-z0-9_.-]{3,32}$'),
    display_name   TEXT NOT NULL CHECK (length(display_name) BETWEEN 1 AND 40),
    password_hash  TEXT NOT NULL CHECK (length(password_hash) BETWEEN 20 AND 400),
    role           TEXT NOT NULL CHECK (role IN ('player', 'auditor', 'finance', 'admin')),
    status         TEXT NOT NULL DEFAULT 'active'
        CHECK (status IN ('active', 'locked', 'self_excluded')),
    excluded_until TIMESTAMPTZ,
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at     TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE gateway.sessions (
    token_hash   BYTEA PRIMARY KEY CHECK (length(token_hash) = 32),
    user_id      TEXT NOT NULL REFERENCES gateway.users (id),
    kind         TEXT NOT NULL CHECK (kind IN ('cookie', 'bearer')),
    csrf_token   TEXT NOT NULL,
    label        TEXT NOT NULL DEFAULT '' CHECK (length(label) <= 64),
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at   TIMESTAMPTZ NOT NULL,
    revoked_at   TIMESTAMPTZ
);
CREATE INDEX sessions_user ON gateway.sessions (user_id);

CREATE TABLE gateway.chat (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    match_id   TEXT NOT NULL CHECK (length(match_id) BETWEEN 1 AND 128),
    seat       SMALLINT NOT NULL CHECK (seat BETWEEN 0 AND 15),
    kind       TEXT NOT NULL CHECK (kind IN ('phrase', 'reaction')),
    code       TEXT NOT NULL CHECK (code ~ '^[a-z_]{1,32}$'),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX chat_match ON gateway.chat (match_id, id);

GRANT USAGE ON SCHEMA gateway TO mesa_app;
GRANT SELECT, INSERT ON gateway.users, gateway.sessions, gateway.chat TO mesa_app;
GRANT UPDATE (display_name, password_hash, role, status, excluded_until, updated_at)
    ON gateway.users TO mesa_app;
GRANT UPDATE (revoked_at) ON gateway.sessions TO mesa_app;
GRANT DELETE ON gateway.sessions TO mesa_app;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA gateway TO mesa_app;
"""


def upgrade() -> None:
    for statement in SQL.split(";\n"):
        if statement.strip():
            op.execute(statement)


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS gateway.chat, gateway.sessions, gateway.users CASCADE")
