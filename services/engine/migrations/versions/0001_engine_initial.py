"""Engine: matches, their append-only event logs, and closings.

Revision ID: 0001_engine_initial
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision = "0001_engine_initial"
down_revision = None
branch_labels = None
depends_on = None

TABLES = """
CREATE TABLE engine.matches (
    match_id    TEXT PRIMARY KEY CHECK (length(match_id) BETWEEN 1 AND 128),
    spec        JSONB NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Every accepted action, deal and engine step of a match, in order (append-only)
CREATE TABLE engine.match_log (
    match_id    TEXT NOT NULL REFERENCES engine.matches (match_id),
    log_no      INTEGER NOT NULL CHECK (log_no >= 0),
    seq         INTEGER NOT NULL CHECK (seq >= 0),
    record      BYTEA NOT NULL CHECK (length(record) <= 65536),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (match_id, log_no)
);

-- A match that finished or was voided and needs nothing more (settled or free)
CREATE TABLE engine.match_closed (
    match_id    TEXT PRIMARY KEY REFERENCES engine.matches (match_id),
    status      TEXT NOT NULL CHECK (status IN ('finished', 'void')),
    closed_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);
"""

GRANTS = """
GRANT USAGE ON SCHEMA engine TO mesa_app;
GRANT SELECT, INSERT ON engine.matches, engine.match_log, engine.match_closed TO mesa_app;
"""


def _run(sql: str) -> None:
    for statement in sql.split(";"):
        body = "\n".join(
            line for line in statement.splitlines() if not line.strip().startswith("--")
        ).strip()
        if body:
            op.execute(body)


def upgrade() -> None:
    _run(TABLES)
    _run(GRANTS)


def downgrade() -> None:
    op.execute("DROP TABLE engine.match_closed, engine.match_log, engine.matches")
