"""SQLAlchemy Core table definitions of the engine schema: the source of truth. The baseline
migration creates the tables from this metadata; a test checks that autogenerate finds no
drift.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import BYTEA, JSONB

SCHEMA = "engine"
metadata = sa.MetaData(schema=SCHEMA)

MAX_RECORD_BYTES = 65536

matches = sa.Table(
    "matches",
    metadata,
    sa.Column("match_id", sa.Text, primary_key=True),
    sa.Column("spec", JSONB, nullable=False),
    sa.Column(
        "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()")
    ),
    sa.CheckConstraint(
        "length(match_id) >= 1 AND length(match_id) <= 128", name="matches_match_id_check"
    ),
)

# Every accepted action, deal and engine step of a match, in order (append-only)
match_log = sa.Table(
    "match_log",
    metadata,
    sa.Column("match_id", sa.Text, sa.ForeignKey(f"{SCHEMA}.matches.match_id"), primary_key=True),
    sa.Column("log_no", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("record", BYTEA, nullable=False),
    sa.Column(
        "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()")
    ),
    sa.CheckConstraint("log_no >= 0", name="match_log_log_no_check"),
    sa.CheckConstraint(f"length(record) <= {MAX_RECORD_BYTES}", name="match_log_record_check"),
    sa.CheckConstraint("seq >= 0", name="match_log_seq_check"),
)

# A match that finished or was voided and needs nothing more (settled or free)
match_closed = sa.Table(
    "match_closed",
    metadata,
    sa.Column("match_id", sa.Text, sa.ForeignKey(f"{SCHEMA}.matches.match_id"), primary_key=True),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column(
        "closed_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()")
    ),
    sa.CheckConstraint("status IN ('finished', 'void')", name="match_closed_status_check"),
    # The integrity feed pages finished matches by (closed_at, match_id), either way round.
    sa.Index(
        "match_closed_finished_at",
        "closed_at",
        "match_id",
        postgresql_where=sa.text("status = 'finished'"),
    ),
)
