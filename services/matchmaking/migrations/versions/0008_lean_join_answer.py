"""matchmaking: a paid join answers only its seats; the start mark commits asynchronously

Revision ID: mm0008
Revises: mm0007
Create Date: 2026-11-29

- A paid join is always followed by its holds and `confirm`, which answers with the table;
  the join's own table document (a second read of the table and its seats, built as jsonb)
  was only used to find the join's seat numbers. It now answers the table id, the stake and
  the seats it chose; free joins (which may start the table) still answer the table.
- `mark_started` ('starting' -> 'playing'/'started', seats staked) commits asynchronously.
  Losing it in a server crash leaves the table 'starting' with its seats 'seated', which the
  sweeper finishes (after `repair_after_ms`) by repeating the same pot move under the same key
  (answered again by the ledger), the engine create (idempotent on the match id) and this
  mark: nothing is charged twice and no invariant rests on it being durable at once. Every
  step after it that must be durable (a void, 'voided') commits synchronously, flushing it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic import op

revision = "mm0008"
down_revision = "mm0007"
branch_labels = None
depends_on = None

_OLD_RETURN = (
    "    RETURN jsonb_build_object('table', matchmaking.table_json(t.id), 'start', started)::text;"
)
_NEW_RETURN = (
    """    IF t.stake_cents > 0 THEN
        -- Holds and then confirm follow (confirm answers the table): only the seats here.
        RETURN jsonb_build_object('table_id', t.id, 'stake_cents', t.stake_cents,
                                  'seats', to_jsonb(seats))::text;
    END IF;
"""
    + _OLD_RETURN
)

MARK_STARTED = """
CREATE OR REPLACE FUNCTION matchmaking.mark_started(p_table text, p_match text, p_status text,
                                                    p_now bigint)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    UPDATE matchmaking.tables SET status = p_status, updated_ms = p_now,
        started_ms = coalesce(started_ms, p_now)
    WHERE id = p_table AND match_id = p_match AND status IN ('starting', 'started');
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    UPDATE matchmaking.reservations SET status = 'staked', updated_ms = p_now
    WHERE table_id = p_table AND status = 'seated';
    -- See the migration mm0008: if lost, the sweeper repeats the idempotent start.
    PERFORM set_config('synchronous_commit', 'off', true);
    RETURN matchmaking.table_json(p_table)::text;
END
$$
"""


def _load(filename: str) -> ModuleType:
    path = Path(__file__).with_name(filename)
    spec = importlib.util.spec_from_file_location(f"mm_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _mm0005_join() -> str:
    text: str = _load("0005_confirm_by_key.py")._join(indexable=True)
    if _OLD_RETURN not in text:
        raise RuntimeError("mm0005's join no longer ends the way this migration replaces")
    return text


def upgrade() -> None:
    op.execute(_mm0005_join().replace(_OLD_RETURN, _NEW_RETURN))
    op.execute(MARK_STARTED)


def downgrade() -> None:
    op.execute(_mm0005_join())
    mark: str = _load("0004_join_functions.py").MARK_STARTED
    op.execute(mark.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1))
