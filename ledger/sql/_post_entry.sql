CREATE OR REPLACE FUNCTION ledger._post_entry(p_kind text, p_key text, p_hash bytea, p_match text, p_reference text, p_accounts bigint[], p_amounts bigint[], p_extra jsonb, p_close bigint[])
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_id bigint;
  v_now timestamptz := now();
  v_n int := cardinality(p_accounts);
  c record;
  v_result jsonb;
BEGIN
  IF v_n IS NULL OR v_n < 2 OR v_n <> cardinality(p_amounts) THEN
    RAISE EXCEPTION USING ERRCODE = 'LD500', MESSAGE = 'entry_needs_two_postings';
  END IF;
  WITH a AS MATERIALIZED (
    SELECT id, code, kind, currency, balance, version, closed_at FROM ledger.accounts
    WHERE id = ANY(p_accounts) ORDER BY id FOR NO KEY UPDATE
  ), j AS (
    SELECT a.*, x.amount, x.leg,
           a.closed_at IS NOT NULL AS closed,
           a.kind <> 'cashier' AND a.balance + x.amount < 0 AS short
    FROM a JOIN unnest(p_accounts, p_amounts) WITH ORDINALITY AS x(id, amount, leg)
      ON x.id = a.id
  )
  SELECT count(DISTINCT j.id) AS n_accounts, count(*) AS n_legs,
         count(DISTINCT j.currency) AS n_currencies, sum(j.amount) AS total,
         bool_or(j.amount IS NULL OR j.amount = 0) AS has_zero,
         -- the first account (by id) that refuses the posting
         (array_agg(j.code ORDER BY j.id) FILTER (WHERE j.closed OR j.short))[1] AS bad_code,
         (array_agg(j.closed ORDER BY j.id) FILTER (WHERE j.closed OR j.short))[1] AS bad_closed,
         (array_agg(j.balance ORDER BY j.id) FILTER (WHERE j.closed OR j.short))[1] AS bad_balance,
         (array_agg(j.amount ORDER BY j.id) FILTER (WHERE j.closed OR j.short))[1] AS bad_amount,
         jsonb_agg(jsonb_build_object(
           'leg', j.leg, 'account', j.code, 'amount', j.amount,
           'balance_after', j.balance + j.amount, 'version_after', j.version + 1)
           ORDER BY j.leg) AS postings
    INTO c
  FROM j;
  IF c.n_accounts <> v_n OR c.n_legs <> v_n THEN
    RAISE EXCEPTION USING ERRCODE = 'LD500', MESSAGE = 'account_twice_in_entry',
      DETAIL = 'every leg needs its own existing account';
  END IF;
  IF c.has_zero THEN
    RAISE EXCEPTION USING ERRCODE = 'LD500', MESSAGE = 'zero_posting';
  END IF;
  -- one currency per entry, and the postings of that currency sum to zero
  IF c.n_currencies <> 1 THEN
    RAISE EXCEPTION USING ERRCODE = 'LD422', MESSAGE = 'wrong_currency',
      DETAIL = 'all accounts of an entry must share one currency';
  END IF;
  IF c.total <> 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'LD500', MESSAGE = 'entry_not_balanced';
  END IF;
  IF c.bad_code IS NOT NULL THEN
    IF c.bad_closed THEN
      RAISE EXCEPTION USING ERRCODE = 'LD409', MESSAGE = 'account_closed',
        DETAIL = format('account %s is closed', c.bad_code);
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'LD422', MESSAGE = 'insufficient_funds',
      DETAIL = format('account %s holds %s cents, needs %s', c.bad_code, c.bad_balance,
                      -c.bad_amount);
  END IF;

  v_id := nextval('ledger.entries_id_seq');
  v_result := jsonb_build_object(
    'entry_id', v_id, 'kind', p_kind, 'idempotency_key', p_key, 'match_id', p_match,
    'reference', p_reference,
    'created_at', to_char(v_now AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'replayed', false, 'postings', c.postings) || coalesce(p_extra, '{}'::jsonb);

  -- one statement: the entry, the balances (and closures), the postings; the postings'
  -- foreign keys are checked at its end, when the entry row exists
  WITH e AS (
    INSERT INTO ledger.entries (id, kind, idempotency_key, request_hash, match_id, reference,
                                created_at, result)
    VALUES (v_id, p_kind, p_key, p_hash, p_match, p_reference, v_now, v_result)
  ), u AS (
    UPDATE ledger.accounts a
       SET balance = a.balance + x.amount,
           version = a.version + 1,
           closed_at = CASE WHEN a.id = ANY(p_close) THEN v_now ELSE a.closed_at END
      FROM unnest(p_accounts, p_amounts) WITH ORDINALITY AS x(id, amount, leg)
     WHERE a.id = x.id
    RETURNING a.id, x.leg, x.amount, a.currency, a.balance, a.version
  )
  INSERT INTO ledger.postings (entry_id, leg, account_id, amount, currency, balance_after,
                               version_after)
  SELECT v_id, u.leg, u.id, u.amount, u.currency, u.balance, u.version FROM u;

  RETURN v_result;
END $function$;
