"""matchmaking: confirm marks each seat through its primary key; quick join's search indexable

Revision ID: mm0005
Revises: mm0004
Create Date: 2026-11-29

`id = ANY($ids) AND status = 'pending'` under a generic plan could be planned as a bitmap AND
of the partial status indexes, reading every pending row; one primary-key lookup per seat
(a join has one or two) costs the same whatever the table sizes.

Quick join compared `taken` with the row's own `seat_count - n`, which the lobby index
(kind, tier, taken DESC, created_ms) cannot use: every full table still waiting for its last
hold was read and dropped first. The kind's seat count is passed in, so the bound is a
constant and the index scan starts at the first table with room.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from alembic import op

revision = "mm0005"
down_revision = "mm0004"
branch_labels = None
depends_on = None

LIVE = "('pending', 'seated', 'staked')"


def _confirm(per_seat: bool) -> str:
    if per_seat:
        mark = f"""
    FOREACH rid IN ARRAY p_ids LOOP
        UPDATE matchmaking.reservations SET status = 'seated', updated_ms = p_now
        WHERE id = rid AND status = 'pending';
        PERFORM 1 FROM matchmaking.reservations WHERE id = rid AND status IN {LIVE};
        IF FOUND THEN
            mine := mine + 1;
        END IF;
    END LOOP;"""
    else:
        mark = f"""
    UPDATE matchmaking.reservations SET status = 'seated', updated_ms = p_now
    WHERE id = ANY (p_ids) AND status = 'pending';
    SELECT count(*) INTO mine FROM matchmaking.reservations
    WHERE id = ANY (p_ids) AND status IN {LIVE};"""
    return f"""
CREATE OR REPLACE FUNCTION matchmaking.confirm(p_table text, p_ids text[], p_match text,
                                               p_now bigint)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    mine int := 0;
    rid text;
    started boolean := false;
BEGIN
    PERFORM 1 FROM matchmaking.tables WHERE id = p_table FOR UPDATE;{mark}
    IF mine = cardinality(p_ids) THEN
        started := matchmaking.start_if_full(p_table, p_match, p_now);
    END IF;
    RETURN jsonb_build_object('table', matchmaking.table_json(p_table), 'start', started,
                              'gone', mine < cardinality(p_ids))::text;
END
$$
"""


_OLD_BOUND = "AND x.taken <= x.seat_count - n"
_NEW_BOUND = "AND x.taken <= p_seat_count - n"


def _join(indexable: bool) -> str:
    """mm0004's join, with the quick-join bound on the kind's seat count (or back)."""
    path = Path(__file__).with_name("0004_join_functions.py")
    spec = importlib.util.spec_from_file_location("mm0004_join_functions", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text: str = module.JOIN
    if _OLD_BOUND not in text:
        raise RuntimeError("mm0004's join no longer has the bound this migration replaces")
    text = text.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
    return text.replace(_OLD_BOUND, _NEW_BOUND) if indexable else text


def upgrade() -> None:
    op.execute(_confirm(per_seat=True))
    op.execute(_join(indexable=True))


def downgrade() -> None:
    op.execute(_confirm(per_seat=False))
    op.execute(_join(indexable=False))
