"""matchmaking: fewer index entries per seat; confirm reads its table row once

Revision ID: mm0007
Revises: mm0006
Create Date: 2026-11-29

Measured with `BENCH_MATCHMAKING_PG_PROFILE=1 python -m bench matchmaking`: PostgreSQL is most
of the CPU a seat costs, and every status change of a reservation or a table is a non-HOT
update (status is in the partial indexes' predicates, `taken` and `updated_ms` are index
keys), so each one writes an entry into every index whose predicate the new row meets.

- `reservations_player` (table_id, player_id) and `reservations_by_player` (player_id), both
  over live seats, become one unique index (player_id, table_id): the same uniqueness (one
  live seat per player at a table) and it serves the by-player lookups. One index entry less
  per reservation version (a paid seat has three: pending, seated, staked).
- `invite_code` and `match_id` were plain UNIQUE columns, so every table row version, NULLs
  included, got an entry in both; only non-NULL values need one (lookups are by equality,
  which implies NOT NULL, so the partial indexes serve them).
- `requests_age` stays a btree: a BRIN index would be cheaper to insert into, but its block
  ranges keep the oldest time they ever held after the purge empties them, so every purge
  would read every page the table ever filled.
- `confirm` locks the table reading its row once, counts a seat as live from the UPDATE that
  seated it (only a seat it did not change is looked up again), and counts the table's seats
  only when `taken` (maintained under the same lock) says it may be full.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from alembic import op

revision = "mm0007"
down_revision = "mm0006"
branch_labels = None
depends_on = None

LIVE = "('pending', 'seated', 'staked')"

CONFIRM = f"""
CREATE OR REPLACE FUNCTION matchmaking.confirm(p_table text, p_ids text[], p_match text,
                                               p_now bigint)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    t matchmaking.tables%ROWTYPE;
    mine int := 0;
    rid text;
    live int;
    seated int;
    started boolean := false;
BEGIN
    SELECT * INTO t FROM matchmaking.tables WHERE id = p_table FOR UPDATE;
    FOREACH rid IN ARRAY p_ids LOOP
        UPDATE matchmaking.reservations SET status = 'seated', updated_ms = p_now
        WHERE id = rid AND status = 'pending';
        IF NOT FOUND THEN
            PERFORM 1 FROM matchmaking.reservations WHERE id = rid AND status IN {LIVE};
        END IF;
        IF FOUND THEN
            mine := mine + 1;
        END IF;
    END LOOP;
    -- `taken` counts the live seats under this lock: below the seat count the table cannot
    -- be full, and the seats need not be counted (a CPU table starts with free seats).
    IF mine = cardinality(p_ids) AND t.status = 'waiting'
       AND (t.taken >= t.seat_count OR t.vs_cpu) THEN
        SELECT count(*), count(*) FILTER (WHERE r.status = 'seated') INTO live, seated
        FROM matchmaking.reservations r WHERE r.table_id = p_table AND r.status IN {LIVE};
        IF live > 0 AND seated = live AND (live = t.seat_count OR t.vs_cpu) THEN
            IF t.stake_cents > 0 THEN
                UPDATE matchmaking.tables SET status = 'starting', match_id = p_match,
                    updated_ms = p_now
                WHERE id = p_table;
            ELSE
                UPDATE matchmaking.tables SET status = 'started', match_id = p_match,
                    updated_ms = p_now, started_ms = p_now
                WHERE id = p_table;
                UPDATE matchmaking.reservations SET status = 'staked', updated_ms = p_now
                WHERE table_id = p_table AND status = 'seated';
            END IF;
            started := true;
        END IF;
    END IF;
    -- See mm0006: a confirm that starts nothing may be lost in a crash; the sweeper repairs it.
    IF NOT started THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    RETURN jsonb_build_object('table', matchmaking.table_json(p_table), 'start', started,
                              'gone', mine < cardinality(p_ids))::text;
END
$$
"""

UPGRADE = [
    f"CREATE UNIQUE INDEX reservations_player_table ON matchmaking.reservations "
    f"(player_id, table_id) WHERE status IN {LIVE}",
    "DROP INDEX matchmaking.reservations_player",
    "DROP INDEX matchmaking.reservations_by_player",
    "ALTER INDEX matchmaking.reservations_player_table RENAME TO reservations_player",
    "ALTER TABLE matchmaking.tables DROP CONSTRAINT tables_invite_code_key",
    "ALTER TABLE matchmaking.tables DROP CONSTRAINT tables_match_id_key",
    "CREATE UNIQUE INDEX tables_invite_code ON matchmaking.tables (invite_code) "
    "WHERE invite_code IS NOT NULL",
    "CREATE UNIQUE INDEX tables_match_id ON matchmaking.tables (match_id) "
    "WHERE match_id IS NOT NULL",
    CONFIRM,
]

DOWNGRADE = [
    "DROP INDEX matchmaking.tables_match_id",
    "DROP INDEX matchmaking.tables_invite_code",
    "ALTER TABLE matchmaking.tables ADD CONSTRAINT tables_match_id_key UNIQUE (match_id)",
    "ALTER TABLE matchmaking.tables ADD CONSTRAINT tables_invite_code_key UNIQUE (invite_code)",
    f"CREATE INDEX reservations_by_player ON matchmaking.reservations (player_id) "
    f"WHERE status IN {LIVE}",
    "ALTER INDEX matchmaking.reservations_player RENAME TO reservations_player_table",
    f"CREATE UNIQUE INDEX reservations_player ON matchmaking.reservations "
    f"(table_id, player_id) WHERE status IN {LIVE}",
    "DROP INDEX matchmaking.reservations_player_table",
]


def _mm0006_confirm() -> str:
    path = Path(__file__).with_name("0006_confirm_async_commit.py")
    spec = importlib.util.spec_from_file_location("mm0006_confirm_async_commit", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text: str = module._confirm(async_commit=True)
    return text


def upgrade() -> None:
    for statement in UPGRADE:
        op.execute(statement)


def downgrade() -> None:
    for statement in DOWNGRADE:
        op.execute(statement)
    op.execute(_mm0006_confirm())
