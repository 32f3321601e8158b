CREATE OR REPLACE FUNCTION ledger.reverse_entry(p_key text, p_hash bytea, p_entry bigint, p_reference text)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
  v_prior jsonb; v_kind text; v_accounts bigint[]; v_amounts bigint[]; v_player text;
  v_result jsonb;
BEGIN
  v_prior := ledger._begin(p_key, p_hash);
  IF v_prior IS NOT NULL THEN RETURN v_prior; END IF;
  SELECT kind, result ->> 'player' INTO v_kind, v_player FROM ledger.entries WHERE id = p_entry;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'LD404', MESSAGE = 'unknown_entry',
      DETAIL = format('no journal entry %s', p_entry);
  END IF;
  IF v_kind NOT IN ('deposit', 'withdrawal') THEN
    RAISE EXCEPTION USING ERRCODE = 'LD422', MESSAGE = 'entry_not_reversible',
      DETAIL = format('entry %s is a %s; only cashier deposits and withdrawals are reversed '
                      '(match money is corrected by release, void and settle)', p_entry, v_kind);
  END IF;
  -- the same accounts, in the same leg order, with the amounts negated
  SELECT array_agg(account_id ORDER BY leg), array_agg(-amount ORDER BY leg)
    INTO v_accounts, v_amounts
  FROM ledger.postings WHERE entry_id = p_entry;
  PERFORM ledger._lock(v_accounts);
  -- checked under the account locks: a concurrent reversal of the same entry has committed
  -- by now (it holds the same locks) and is visible to this statement
  IF EXISTS (SELECT 1 FROM ledger.reversals WHERE reversed_entry_id = p_entry) THEN
    -- a concurrent retry of this very request may be the one that reversed it
    v_prior := ledger._replay(p_key, p_hash);
    IF v_prior IS NOT NULL THEN RETURN v_prior; END IF;
    RAISE EXCEPTION USING ERRCODE = 'LD409', MESSAGE = 'entry_already_reversed',
      DETAIL = format('entry %s was already reversed', p_entry);
  END IF;
  v_result := ledger._post('reversal', p_key, p_hash, NULL, p_reference, v_accounts, v_amounts,
                           jsonb_build_object('player', v_player, 'reverses_entry_id', p_entry,
                                              'reverses_kind', v_kind));
  INSERT INTO ledger.reversals (reversed_entry_id, reversal_entry_id)
  VALUES (p_entry, (v_result ->> 'entry_id')::bigint);
  RETURN v_result;
END $function$;
