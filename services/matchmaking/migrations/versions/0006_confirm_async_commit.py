"""matchmaking: a confirm that starts nothing commits asynchronously

Revision ID: mm0006
Revises: mm0005
Create Date: 2026-11-29

Such a confirm only turns 'pending' seats 'seated'. Losing it in a server crash (asynchronous
commit: at most wal_writer_delay of commits) leaves those seats 'pending', which the sweeper
finishes by placing the same holds under the same keys (the ledger answers them again) and
confirming: no invariant depends on it being durable at once. Anything that reads the seated
row and commits synchronously (the start, a leave) flushes it first, the WAL being
sequential. A confirm that starts the table, and every other step, commits synchronously.
"""

from __future__ import annotations

from alembic import op

revision = "mm0006"
down_revision = "mm0005"
branch_labels = None
depends_on = None

LIVE = "('pending', 'seated', 'staked')"


def _confirm(async_commit: bool) -> str:
    relax = (
        """
    IF NOT started THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;"""
        if async_commit
        else ""
    )
    return f"""
CREATE OR REPLACE FUNCTION matchmaking.confirm(p_table text, p_ids text[], p_match text,
                                               p_now bigint)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    mine int := 0;
    rid text;
    started boolean := false;
BEGIN
    PERFORM 1 FROM matchmaking.tables WHERE id = p_table FOR UPDATE;
    FOREACH rid IN ARRAY p_ids LOOP
        UPDATE matchmaking.reservations SET status = 'seated', updated_ms = p_now
        WHERE id = rid AND status = 'pending';
        PERFORM 1 FROM matchmaking.reservations WHERE id = rid AND status IN {LIVE};
        IF FOUND THEN
            mine := mine + 1;
        END IF;
    END LOOP;
    IF mine = cardinality(p_ids) THEN
        started := matchmaking.start_if_full(p_table, p_match, p_now);
    END IF;{relax}
    RETURN jsonb_build_object('table', matchmaking.table_json(p_table), 'start', started,
                              'gone', mine < cardinality(p_ids))::text;
END
$$
"""


def upgrade() -> None:
    op.execute(_confirm(async_commit=True))


def downgrade() -> None:
    op.execute(_confirm(async_commit=False))
