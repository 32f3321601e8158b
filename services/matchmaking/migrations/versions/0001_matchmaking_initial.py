"""matchmaking: tables, seat reservations, idempotent requests

Revision ID: mm0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision = "mm0001"
down_revision = None
branch_labels = None
depends_on = None

STATEMENTS = [
    """
    CREATE TABLE matchmaking.tables (
        id            text PRIMARY KEY,
        kind          text NOT NULL,
        tier          text NOT NULL,
        variant       text NOT NULL,
        options       jsonb NOT NULL,
        stake_cents   bigint NOT NULL CHECK (stake_cents >= 0),
        currency      char(3) NOT NULL,
        seat_count    smallint NOT NULL CHECK (seat_count BETWEEN 2 AND 4),
        pairs         boolean NOT NULL,
        private       boolean NOT NULL,
        vs_cpu        boolean NOT NULL,
        invite_code   text UNIQUE,
        status        text NOT NULL
                      CHECK (status IN ('waiting', 'starting', 'started', 'playing', 'voided')),
        taken         smallint NOT NULL DEFAULT 0,
        match_id      text UNIQUE,
        created_ms    bigint NOT NULL,
        started_ms    bigint,
        updated_ms    bigint NOT NULL,
        CHECK (taken >= 0 AND taken <= seat_count)
    )
    """,
    """
    CREATE INDEX tables_lobby ON matchmaking.tables (kind, tier, taken DESC, created_ms)
    WHERE status = 'waiting' AND NOT private
    """,
    "CREATE INDEX tables_repair ON matchmaking.tables (updated_ms) "
    "WHERE status IN ('starting', 'started')",
    """
    CREATE TABLE matchmaking.reservations (
        id           text PRIMARY KEY,
        table_id     text NOT NULL REFERENCES matchmaking.tables (id),
        seat         smallint NOT NULL CHECK (seat >= 0 AND seat < 4),
        player_id    text NOT NULL,
        status       text NOT NULL CHECK (status IN
                     ('pending', 'seated', 'staked', 'releasing', 'released', 'failed')),
        stake_cents  bigint NOT NULL CHECK (stake_cents >= 0),
        reason       text,
        created_ms   bigint NOT NULL,
        expires_ms   bigint NOT NULL,
        updated_ms   bigint NOT NULL
    )
    """,
    # One live reservation per seat and one per player at a table: never overfilled, never twice.
    "CREATE UNIQUE INDEX reservations_seat ON matchmaking.reservations (table_id, seat) "
    "WHERE status IN ('pending', 'seated', 'staked')",
    "CREATE UNIQUE INDEX reservations_player ON matchmaking.reservations (table_id, player_id) "
    "WHERE status IN ('pending', 'seated', 'staked')",
    "CREATE INDEX reservations_by_player ON matchmaking.reservations (player_id) "
    "WHERE status IN ('pending', 'seated', 'staked')",
    "CREATE INDEX reservations_expiry ON matchmaking.reservations (expires_ms) "
    "WHERE status = 'seated'",
    "CREATE INDEX reservations_repair ON matchmaking.reservations (updated_ms) "
    "WHERE status IN ('pending', 'releasing')",
    """
    CREATE TABLE matchmaking.requests (
        player_id        text NOT NULL,
        idempotency_key  text NOT NULL,
        op               text NOT NULL,
        request_hash     bytea NOT NULL,
        table_id         text,
        reservation_ids  text[],
        response         bytea,
        response_status  integer,
        created_ms       bigint NOT NULL,
        PRIMARY KEY (player_id, idempotency_key)
    )
    """,
    "GRANT USAGE ON SCHEMA matchmaking TO mesa_app",
    "GRANT SELECT, INSERT, UPDATE ON matchmaking.tables, matchmaking.reservations, "
    "matchmaking.requests TO mesa_app",
]


def upgrade() -> None:
    for statement in STATEMENTS:
        op.execute(statement)


def downgrade() -> None:
    op.execute("DROP SCHEMA matchmaking CASCADE")
