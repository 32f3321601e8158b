"""SQLAlchemy Core table definitions of the matchmaking schema: the source of truth.

The baseline migration creates the tables from this metadata and the functions from
`services/matchmaking/sql/` (one function per file); a test checks that Alembic's autogenerate
finds no drift between this metadata and a migrated database.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY, BYTEA, JSONB

SCHEMA = "matchmaking"
metadata = sa.MetaData(schema=SCHEMA)

TABLE_STATUSES = ("waiting", "starting", "started", "playing", "finished", "voided")
SEAT_STATUSES = ("pending", "seated", "staked", "releasing", "released", "failed")
# a seat that holds its place at the table / one whose hold is still to be settled or expired
LIVE_SEAT_STATUSES = ("pending", "seated", "staked")
OPEN_SEAT_STATUSES = ("pending", "seated", "releasing")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN (" + ", ".join(f"'{v}'" for v in values) + ")"


def _any(column: str, values: tuple[str, ...]) -> str:
    """`_in` as PostgreSQL spells it back, so autogenerate can compare a generated column."""
    return f"{column} = ANY (ARRAY[" + ", ".join(f"'{v}'::text" for v in values) + "])"


tables = sa.Table(
    "tables",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("tier", sa.Text, nullable=False),
    sa.Column("variant", sa.Text, nullable=False),
    sa.Column("options", JSONB, nullable=False),
    sa.Column("stake_cents", sa.BigInteger, nullable=False),
    sa.Column("currency", sa.CHAR(3), nullable=False),
    sa.Column("seat_count", sa.SmallInteger, nullable=False),
    sa.Column("pairs", sa.Boolean, nullable=False),
    sa.Column("private", sa.Boolean, nullable=False),
    # A player who sits only with random opponents sits here: never listed in the lobby.
    sa.Column("unlisted", sa.Boolean, nullable=False, server_default=sa.text("false")),
    sa.Column("vs_cpu", sa.Boolean, nullable=False),
    sa.Column("invite_code", sa.Text),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("taken", sa.SmallInteger, nullable=False, server_default=sa.text("0")),
    sa.Column("match_id", sa.Text),
    sa.Column("created_ms", sa.BigInteger, nullable=False),
    sa.Column("started_ms", sa.BigInteger),
    sa.Column("updated_ms", sa.BigInteger, nullable=False),
    sa.CheckConstraint("taken >= 0 AND taken <= seat_count", name="tables_check"),
    sa.CheckConstraint("seat_count >= 2 AND seat_count <= 4", name="tables_seat_count_check"),
    sa.CheckConstraint("stake_cents >= 0", name="tables_stake_cents_check"),
    sa.CheckConstraint(_in("status", TABLE_STATUSES), name="tables_status_check"),
    sa.Index(
        "tables_invite_code",
        "invite_code",
        unique=True,
        postgresql_where=sa.text("invite_code IS NOT NULL"),
    ),
    sa.Index(
        "tables_lobby",
        "kind",
        "tier",
        sa.text("taken DESC"),
        "created_ms",
        postgresql_where=sa.text("status = 'waiting' AND NOT private"),
    ),
    sa.Index(
        "tables_match_id", "match_id", unique=True, postgresql_where=sa.text("match_id IS NOT NULL")
    ),
    sa.Index(
        "tables_repair",
        "updated_ms",
        postgresql_where=sa.text(_in("status", ("starting", "started"))),
    ),
)

reservations = sa.Table(
    "reservations",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("table_id", sa.Text, sa.ForeignKey(f"{SCHEMA}.tables.id"), nullable=False),
    sa.Column("seat", sa.SmallInteger, nullable=False),
    sa.Column("player_id", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("stake_cents", sa.BigInteger, nullable=False),
    sa.Column("reason", sa.Text),
    sa.Column("created_ms", sa.BigInteger, nullable=False),
    sa.Column("expires_ms", sa.BigInteger, nullable=False),
    sa.Column("updated_ms", sa.BigInteger, nullable=False),
    # Stored flags, so the seat indexes below do not depend on `status` itself and a confirm
    # (which changes only `status` within the same flag values) stays a HOT update.
    sa.Column(
        "is_live", sa.Boolean, sa.Computed(_any("status", LIVE_SEAT_STATUSES), persisted=True)
    ),
    sa.Column(
        "is_open", sa.Boolean, sa.Computed(_any("status", OPEN_SEAT_STATUSES), persisted=True)
    ),
    sa.CheckConstraint("seat >= 0 AND seat < 4", name="reservations_seat_check"),
    sa.CheckConstraint("stake_cents >= 0", name="reservations_stake_cents_check"),
    sa.CheckConstraint(_in("status", SEAT_STATUSES), name="reservations_status_check"),
    sa.Index("reservations_expiry", "expires_ms", postgresql_where=sa.text("is_open")),
    sa.Index(
        "reservations_player",
        "player_id",
        "table_id",
        unique=True,
        postgresql_where=sa.text("is_live"),
    ),
    sa.Index("reservations_repair", "updated_ms", postgresql_where=sa.text("is_open")),
    sa.Index(
        "reservations_seat", "table_id", "seat", unique=True, postgresql_where=sa.text("is_live")
    ),
    postgresql_with={"fillfactor": "80"},
)

requests = sa.Table(
    "requests",
    metadata,
    sa.Column("player_id", sa.Text, primary_key=True),
    sa.Column("idempotency_key", sa.Text, primary_key=True),
    sa.Column("op", sa.Text, nullable=False),
    sa.Column("request_hash", BYTEA, nullable=False),
    sa.Column("table_id", sa.Text),
    sa.Column("reservation_ids", ARRAY(sa.Text)),
    sa.Column("response", BYTEA),
    sa.Column("response_status", sa.Integer),
    sa.Column("created_ms", sa.BigInteger, nullable=False),
    sa.Index("requests_age", "created_ms"),
)
