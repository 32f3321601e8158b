"""matchmaking: a join writes its idempotency record once, complete, at its end

Revision ID: mm0009
Revises: mm0008
Create Date: 2026-11-29

The join claimed its key first (INSERT ... ON CONFLICT DO NOTHING) and filled in the table and
reservation ids at the end (an UPDATE of the same row): two writes of the record. It now
looks the key up first (an earlier request is answered as before) and inserts the complete
record at the end. Two requests with one key at once: the later INSERT waits for the first
to commit and fails on the primary key (SQLSTATE 23505); the whole statement is undone (its
seats too) and the service's retry finds the first one's record and resumes it. A refusal
still keeps nothing. `leave` keeps `matchmaking.claim`.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic import op

revision = "mm0009"
down_revision = "mm0008"
branch_labels = None
depends_on = None

_OLD_CLAIM = "    prior := matchmaking.claim(p_player, p_key, p_op, p_hash, p_now);"
_NEW_CLAIM = "    prior := matchmaking.prior_request(p_player, p_key, p_op, p_hash);"
_OLD_RECORD = """    UPDATE matchmaking.requests SET table_id = t.id, reservation_ids = p_reservation_ids
    WHERE player_id = p_player AND idempotency_key = p_key;"""
_NEW_RECORD = """    INSERT INTO matchmaking.requests (player_id, idempotency_key, op, request_hash,
        created_ms, table_id, reservation_ids)
    VALUES (p_player, p_key, p_op, p_hash, p_now, t.id, p_reservation_ids);"""

# matchmaking.claim without its INSERT: NULL when the key is new.
PRIOR_REQUEST = """
CREATE FUNCTION matchmaking.prior_request(p_player text, p_key text, p_op text, p_hash bytea)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    prior matchmaking.requests%ROWTYPE;
BEGIN
    SELECT * INTO prior FROM matchmaking.requests
    WHERE player_id = p_player AND idempotency_key = p_key;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF prior.op <> p_op OR prior.request_hash <> p_hash THEN
        RAISE EXCEPTION USING ERRCODE = 'MM409', MESSAGE = 'idempotency_key_reused',
            DETAIL = 'this idempotency key was used for another request';
    END IF;
    IF prior.response IS NOT NULL THEN
        RETURN jsonb_build_object('replay', prior.response_status,
                                  'body', convert_from(prior.response, 'UTF8'));
    END IF;
    IF prior.reservation_ids IS NOT NULL THEN
        RETURN jsonb_build_object('resume', to_jsonb(prior.reservation_ids),
                                  'table_id', prior.table_id);
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'MM503', MESSAGE = 'request_in_progress',
        DETAIL = 'the first request with this key is still running; retry';
END
$$
"""


def _mm0008_join() -> str:
    path = Path(__file__).with_name("0008_lean_join_answer.py")
    spec = importlib.util.spec_from_file_location("mm_0008_lean_join_answer", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text: str = module._mm0005_join().replace(module._OLD_RETURN, module._NEW_RETURN)
    if _OLD_CLAIM not in text or _OLD_RECORD not in text:
        raise RuntimeError("mm0008's join no longer has the key writes this migration replaces")
    return text


def upgrade() -> None:
    op.execute(PRIOR_REQUEST)
    op.execute(
        "GRANT EXECUTE ON FUNCTION matchmaking.prior_request(text, text, text, bytea) TO mesa_app"
    )
    op.execute(_mm0008_join().replace(_OLD_CLAIM, _NEW_CLAIM).replace(_OLD_RECORD, _NEW_RECORD))


def downgrade() -> None:
    op.execute(_mm0008_join())
    op.execute("DROP FUNCTION matchmaking.prior_request(text, text, text, bytea)")
