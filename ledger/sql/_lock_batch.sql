CREATE OR REPLACE FUNCTION ledger._lock_batch(p_ops text[], p_args text[])
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE v_ids bigint[];
BEGIN
  -- Every existing account of every operation, in ascending id: the batch takes its row
  -- locks in the one global order, as a single operation does, so batches cannot deadlock
  -- with each other or with single operations over accounts. (The operations' own _lock
  -- calls are then no-ops.) One statement for the whole batch: what each operation finds
  -- before its own _lock. A missing id costs no correctness, since each operation still
  -- locks what it posts to.
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
            lpad((get_byte(sha256(convert_to(x.a->>2, 'UTF8')), 0) % 16)::text, 2, '0')) c
    WHERE x.op = 'settle'
    UNION ALL
    SELECT s.wallet_id FROM x, LATERAL (
      SELECT wallet_id, player FROM ledger.stakes WHERE match_id = x.a->>2) s
    WHERE x.op = 'void'
       OR (x.op = 'settle' AND s.player IN (SELECT jsonb_array_elements_text(x.a->3)))
  )
  SELECT id FROM ids);
  PERFORM 1 FROM ledger.accounts WHERE id = ANY(v_ids) ORDER BY id FOR NO KEY UPDATE;
END $function$;
