"""Ledger: `ledger.post_batch` runs several operations in one transaction (group commit).

The ledger service groups the posting requests that arrive while the database is busy and
sends them as one call. Each operation runs in its own subtransaction (a PL/pgSQL block with
an EXCEPTION clause), so each is still all or nothing: its journal entry with every posting,
or nothing at all. A refused or failed operation rolls back only its own block and reports its
error in its slot of the answer; the others commit together, and nothing is acknowledged to a
caller before that commit. What a batch saves is the per-transaction cost: one round trip,
one snapshot, one commit record and one WAL flush for the whole group instead of one each.

Cashier work (deposits, withdrawals, corrections) is rare and always runs alone.

Arguments travel as one JSON array per operation (the bytea request hash as hex), decoded
inside the operation's block so that a malformed one fails only its own slot. An answer slot
is the operation's result document, or `!` followed by a JSON object with the error's
`sqlstate`, `message` and `detail` (`!` cannot start a JSON document, so the two cannot be
confused).

At most 32 operations a call: every block that writes takes a subtransaction id, and a
backend caches only 64 of them before other sessions' snapshots must look them up in
pg_subtrans, which slows every reader.

Revision ID: 0005_ledger_post_batch
Revises: 0004_ledger_lean_posting
Create Date: 2025-01-05
"""

from __future__ import annotations

from alembic import op

revision = "0005_ledger_post_batch"
down_revision = "0004_ledger_lean_posting"
branch_labels = None
depends_on = None

MAX_BATCH = 32

POST_BATCH = r"""
CREATE FUNCTION ledger.post_batch(p_ops text[], p_args text[]) RETURNS text[]
LANGUAGE plpgsql AS $$
DECLARE
  v_n int := coalesce(cardinality(p_ops), 0);
  v_out text[] := ARRAY[]::text[];
  v text;
  a jsonb;
  v_ids bigint[];
  v_state text; v_message text; v_detail text;
BEGIN
  IF v_n <> coalesce(cardinality(p_args), 0) OR v_n > __MAX_BATCH__ THEN
    RAISE EXCEPTION USING ERRCODE = 'LD400', MESSAGE = 'invalid_batch',
      DETAIL = 'a batch is 0..__MAX_BATCH__ operations, one argument list each';
  END IF;
  -- The chain lock first, as every operation takes it before any row lock (see _begin).
  PERFORM pg_advisory_xact_lock_shared(__CHAIN_LOCK__);
  -- Then every existing account of every operation, in ascending id: the batch takes its
  -- row locks in the one global order, as a single operation does, so batches cannot
  -- deadlock with each other or with single operations over accounts. (The operations'
  -- own _lock calls are then no-ops.) The arguments come from the service's own encoder;
  -- a malformed list fails the whole call, and the service then runs each operation alone.
  -- (One statement for the whole batch: what each operation finds before its own _lock.
  -- A missing id costs no correctness, since each operation still locks what it posts to.)
  v_ids := ARRAY(
  WITH x AS MATERIALIZED (
    SELECT u.op, u.a::jsonb AS a FROM unnest(p_ops, p_args) AS u(op, a)
  ), ids AS (
    SELECT w.id FROM x, LATERAL (
      SELECT id FROM ledger.accounts WHERE code = 'wallet:' || (x.a->>2)) w
    WHERE x.op = 'hold'
    UNION ALL
    SELECT v.id FROM x, LATERAL (
      SELECT h.id AS hold_id, w.id AS wallet_id FROM ledger.accounts h
      JOIN ledger.accounts w ON w.code = 'wallet:' || h.player
      WHERE h.code = 'hold:' || (x.a->>2)) hw, LATERAL (VALUES (hw.hold_id), (hw.wallet_id)) v(id)
    WHERE x.op = 'release'
    UNION ALL
    SELECT h.id FROM x, LATERAL (
      SELECT id FROM ledger.accounts
      WHERE code = ANY(ARRAY(SELECT 'hold:' || r FROM jsonb_array_elements_text(x.a->8) r))) h
    WHERE x.op = 'start'
    UNION ALL
    SELECT p.account_id FROM x, LATERAL (
      SELECT account_id FROM ledger.pots WHERE match_id = x.a->>2) p
    WHERE x.op IN ('settle', 'void')
    UNION ALL
    SELECT c.id FROM x, LATERAL (
      SELECT id FROM ledger.accounts
      WHERE code = 'house:commission:' ||
            lpad((get_byte(sha256(convert_to(x.a->>2, 'UTF8')), 0) % __SHARDS__)::text, 2, '0')) c
    WHERE x.op = 'settle'
    UNION ALL
    SELECT s.wallet_id FROM x, LATERAL (
      SELECT wallet_id, player FROM ledger.stakes WHERE match_id = x.a->>2) s
    WHERE x.op = 'void'
       OR (x.op = 'settle' AND s.player IN (SELECT jsonb_array_elements_text(x.a->3)))
  )
  SELECT id FROM ids);
  PERFORM 1 FROM ledger.accounts WHERE id = ANY(v_ids) ORDER BY id FOR NO KEY UPDATE;
  FOR i IN 1 .. v_n LOOP
    BEGIN
      a := p_args[i]::jsonb;
      v := CASE p_ops[i]
        WHEN 'hold' THEN ledger.hold(a->>0, decode(a->>1, 'hex'), a->>2, a->>3,
                                     (a->>4)::bigint, a->>5, a->>6)
        WHEN 'release' THEN ledger.release(a->>0, decode(a->>1, 'hex'), a->>2)
        WHEN 'start' THEN ledger.start_match(
          a->>0, decode(a->>1, 'hex'), a->>2, a->>3, a->>4, a->>5,
          ARRAY(SELECT jsonb_array_elements_text(a->6)::int),
          ARRAY(SELECT jsonb_array_elements_text(a->7)),
          ARRAY(SELECT jsonb_array_elements_text(a->8)))
        WHEN 'settle' THEN ledger.settle_match(
          a->>0, decode(a->>1, 'hex'), a->>2,
          ARRAY(SELECT jsonb_array_elements_text(a->3)),
          ARRAY(SELECT jsonb_array_elements_text(a->4)::int),
          (a->>5)::int)
        WHEN 'void' THEN ledger.void_match(a->>0, decode(a->>1, 'hex'), a->>2, a->>3)
      END::text;
      IF v IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'LD400', MESSAGE = 'unknown_operation',
          DETAIL = format('no ledger operation %L', p_ops[i]);
      END IF;
    EXCEPTION WHEN OTHERS THEN
      GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT,
                              v_detail = PG_EXCEPTION_DETAIL;
      v := '!' || json_build_object('sqlstate', v_state, 'message', v_message,
                                    'detail', v_detail)::text;
    END;
    v_out := v_out || v;
  END LOOP;
  RETURN v_out;
END $$
"""


CHAIN_LOCK_KEY = 0x4C454447  # as in 0004
COMMISSION_SHARDS = 16  # as in 0004


def upgrade() -> None:
    op.execute(
        POST_BATCH.replace("__MAX_BATCH__", str(MAX_BATCH))
        .replace("__CHAIN_LOCK__", str(CHAIN_LOCK_KEY))
        .replace("__SHARDS__", str(COMMISSION_SHARDS))
    )
    # as for every operation (0001): plan the statements once per session, not per call
    op.execute(
        "ALTER FUNCTION ledger.post_batch(text[], text[]) SET plan_cache_mode = force_generic_plan"
    )
    op.execute("REVOKE ALL ON FUNCTION ledger.post_batch(text[], text[]) FROM PUBLIC")
    op.execute("GRANT EXECUTE ON FUNCTION ledger.post_batch(text[], text[]) TO mesa_app")


def downgrade() -> None:
    op.execute("DROP FUNCTION ledger.post_batch(text[], text[])")
