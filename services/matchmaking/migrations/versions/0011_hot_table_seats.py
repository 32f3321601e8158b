"""matchmaking: a join's or a leave's `taken` change on its table is a HOT update

Revision ID: mm0011
Revises: mm0010
Create Date: 2026-11-29

Every join and leave sets its table's `taken` and `updated_ms`. `taken` was a key of
`tables_lobby` (kind, tier, taken DESC, created_ms) and `updated_ms` the key of
`tables_repair`, so each of those updates wrote a new primary-key and lobby entry.

- `tables_lobby` keys on (kind, tier, created_ms): the waiting public tables of one kind and
  tier are few (a table fills in seconds under load, and an emptied one is refilled first by
  quick join), so ordering them by `taken` after the index scan is a small sort.
- `tables_repair` keys on `id` over the same predicate (tables 'starting' or 'started': the
  ones in flight between the filling seat and the engine); the sweeper sorts that small set
  by `updated_ms`.
- `fillfactor = 70` leaves room on a table row's page for its HOT versions.

The table's status changes (starting, started, playing) stay non-HOT: `status` is in the
predicates, as it must be for the lobby and the sweeper.
"""

from __future__ import annotations

from alembic import op

revision = "mm0011"
down_revision = "mm0010"
branch_labels = None
depends_on = None

UPGRADE = [
    "ALTER TABLE matchmaking.tables SET (fillfactor = 70)",
    "DROP INDEX matchmaking.tables_lobby",
    "DROP INDEX matchmaking.tables_repair",
    "CREATE INDEX tables_lobby ON matchmaking.tables (kind, tier, created_ms) "
    "WHERE status = 'waiting' AND NOT private",
    "CREATE INDEX tables_repair ON matchmaking.tables (id) WHERE status IN ('starting', 'started')",
]

DOWNGRADE = [
    "DROP INDEX matchmaking.tables_lobby",
    "DROP INDEX matchmaking.tables_repair",
    "CREATE INDEX tables_lobby ON matchmaking.tables (kind, tier, taken DESC, created_ms) "
    "WHERE status = 'waiting' AND NOT private",
    "CREATE INDEX tables_repair ON matchmaking.tables (updated_ms) "
    "WHERE status IN ('starting', 'started')",
    "ALTER TABLE matchmaking.tables RESET (fillfactor)",
]


def upgrade() -> None:
    for statement in UPGRADE:
        op.execute(statement)


def downgrade() -> None:
    for statement in DOWNGRADE:
        op.execute(statement)
