"""SQLAlchemy Core table definitions of the integrity schema: the source of truth. The baseline
migration creates the tables from this metadata; a test checks that autogenerate finds no
drift.

- `alerts`: one row per suspicion, unique by `dedup_key` (a rescan updates the open alert's
  figures instead of adding another; a closed alert stays closed).
- `alert_evidence`: what an alert rests on, as references (a match, a deal, a ledger entry,
  a pair's flow), resolved to readable rows when a compliance officer opens the alert.
- `withdrawal_holds`: a player's withdrawals held by compliance (one open hold per player).
- `seat_observations`: at each seat of a paid match, keyed hashes of the player's address and
  device (never the raw values), for the shared-device detector.
- `scan_cursors`: where the last scan stopped in each history it reads.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import BYTEA, JSONB

SCHEMA = "integrity"
metadata = sa.MetaData(schema=SCHEMA)

ALERT_STATUSES = ("open", "closed")
RESOLUTIONS = ("dismissed", "actioned")
# The advisory lock a scan holds (session level) so only one process scans at a time.
SCAN_LOCK_KEY = 0x494E5447


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN (" + ", ".join(f"'{v}'" for v in values) + ")"


def _now() -> sa.TextClause:
    return sa.text("now()")


def _timestamp(
    name: str, *, nullable: bool = True, server_default: sa.TextClause | None = None
) -> sa.Column[datetime]:
    return sa.Column(
        name, sa.DateTime(timezone=True), nullable=nullable, server_default=server_default
    )


alerts = sa.Table(
    "alerts",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("player", sa.Text, nullable=False),
    sa.Column("counterpart", sa.Text),
    sa.Column("score", sa.Float, nullable=False),
    sa.Column("figures", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    sa.Column("dedup_key", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False, server_default=sa.text("'open'")),
    sa.Column("resolution", sa.Text),
    sa.Column("close_reason", sa.Text),
    sa.Column("closed_by", sa.Text),
    _timestamp("created_at", nullable=False, server_default=_now()),
    _timestamp("updated_at", nullable=False, server_default=_now()),
    _timestamp("closed_at"),
    sa.CheckConstraint("kind ~ '^[a-z][a-z0-9_]{0,39}$'", name="alerts_kind_check"),
    sa.CheckConstraint("length(player) >= 1 AND length(player) <= 64", name="alerts_player_check"),
    sa.CheckConstraint(
        "length(counterpart) >= 1 AND length(counterpart) <= 64", name="alerts_counterpart_check"
    ),
    sa.CheckConstraint(
        "length(dedup_key) >= 1 AND length(dedup_key) <= 200", name="alerts_dedup_key_check"
    ),
    sa.CheckConstraint("length(figures::text) <= 8000", name="alerts_figures_check"),
    sa.CheckConstraint(_in("status", ALERT_STATUSES), name="alerts_status_check"),
    sa.CheckConstraint(
        "CASE WHEN status = 'closed' THEN resolution IS NOT NULL AND close_reason IS NOT NULL "
        "AND closed_by IS NOT NULL AND closed_at IS NOT NULL "
        "ELSE resolution IS NULL AND closed_at IS NULL END",
        name="alerts_closed_check",
    ),
    sa.CheckConstraint(_in("resolution", RESOLUTIONS), name="alerts_resolution_check"),
    sa.CheckConstraint("length(close_reason) <= 1000", name="alerts_close_reason_check"),
    sa.UniqueConstraint("dedup_key", name="alerts_dedup_key_key"),
    sa.Index("alerts_status", "status", "id"),
    sa.Index("alerts_player", "player", "id"),
    sa.Index("alerts_created_at", "created_at"),
)

alert_evidence = sa.Table(
    "alert_evidence",
    metadata,
    sa.Column("alert_id", sa.BigInteger, sa.ForeignKey(f"{SCHEMA}.alerts.id"), primary_key=True),
    sa.Column("kind", sa.Text, primary_key=True),
    sa.Column("ref", sa.Text, primary_key=True),
    sa.Column("detail", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    _timestamp("added_at", nullable=False, server_default=_now()),
    sa.CheckConstraint("kind ~ '^[a-z][a-z0-9_]{0,31}$'", name="alert_evidence_kind_check"),
    sa.CheckConstraint("length(ref) >= 1 AND length(ref) <= 200", name="alert_evidence_ref_check"),
    sa.CheckConstraint("length(detail::text) <= 4000", name="alert_evidence_detail_check"),
)

withdrawal_holds = sa.Table(
    "withdrawal_holds",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
    sa.Column("player", sa.Text, nullable=False),
    sa.Column("alert_id", sa.BigInteger, sa.ForeignKey(f"{SCHEMA}.alerts.id")),
    sa.Column("placed_by", sa.Text, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    _timestamp("placed_at", nullable=False, server_default=_now()),
    sa.Column("released_by", sa.Text),
    sa.Column("release_reason", sa.Text),
    _timestamp("released_at"),
    sa.CheckConstraint(
        "length(player) >= 1 AND length(player) <= 64", name="withdrawal_holds_player_check"
    ),
    sa.CheckConstraint(
        "length(reason) >= 1 AND length(reason) <= 1000", name="withdrawal_holds_reason_check"
    ),
    sa.CheckConstraint(
        "(released_at IS NULL) = (released_by IS NULL AND release_reason IS NULL)",
        name="withdrawal_holds_released_check",
    ),
    sa.Index(
        "withdrawal_holds_one_open",
        "player",
        unique=True,
        postgresql_where=sa.text("released_at IS NULL"),
    ),
)

seat_observations = sa.Table(
    "seat_observations",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
    sa.Column("match_id", sa.Text, nullable=False),
    sa.Column("player", sa.Text, nullable=False),
    sa.Column("tier", sa.Text, nullable=False),
    sa.Column("private", sa.Boolean),  # null: the table was not found to say
    # HMAC-SHA-256 of the client address / the device cookie under the server's secret
    sa.Column("address_hash", BYTEA, nullable=False),
    sa.Column("device_hash", BYTEA),
    _timestamp("observed_at", nullable=False, server_default=_now()),
    sa.CheckConstraint(
        "length(match_id) >= 1 AND length(match_id) <= 128", name="seat_observations_match_check"
    ),
    sa.CheckConstraint(
        "length(player) >= 1 AND length(player) <= 64", name="seat_observations_player_check"
    ),
    sa.CheckConstraint(
        "length(address_hash) = 32 AND (device_hash IS NULL OR length(device_hash) = 32)",
        name="seat_observations_hash_check",
    ),
    sa.UniqueConstraint("match_id", "player", name="seat_observations_match_id_player_key"),
    sa.Index("seat_observations_observed_at", "observed_at"),
)

scan_cursors = sa.Table(
    "scan_cursors",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("position", sa.Text, nullable=False),
    _timestamp("updated_at", nullable=False, server_default=_now()),
    sa.CheckConstraint("length(name) <= 64", name="scan_cursors_name_check"),
    sa.CheckConstraint("length(position) <= 200", name="scan_cursors_position_check"),
)
