CREATE OR REPLACE FUNCTION ledger.void_match(p_key text, p_hash bytea, p_match text, p_reason text)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
  v_prior jsonb; p record; v_wallets bigint[]; v_amounts bigint[]; v_total bigint;
  v_result jsonb;
BEGIN
  v_prior := ledger._begin(p_key, p_hash);
  IF v_prior IS NOT NULL THEN RETURN v_prior; END IF;
  SELECT * INTO p FROM ledger._closable_pot(p_match);
  SELECT array_agg(wallet_id ORDER BY seat), array_agg(amount ORDER BY seat), sum(amount)
    INTO v_wallets, v_amounts, v_total
  FROM ledger.stakes WHERE match_id = p_match;
  PERFORM ledger._lock(v_wallets || p.account_id);
  SELECT * INTO p FROM ledger._closable_pot(p_match);
  IF p.balance <> v_total THEN
    RAISE EXCEPTION USING ERRCODE = 'LD500', MESSAGE = 'pot_mismatch',
      DETAIL = format('pot %s holds %s cents but its stakes add up to %s', p_match, p.balance,
                      v_total);
  END IF;
  v_result := ledger._post_entry('void', p_key, p_hash, p_match, p_reason,
                                 p.account_id || v_wallets, (-p.balance) || v_amounts,
                                 jsonb_build_object('pot', p.balance), ARRAY[p.account_id]);
  UPDATE ledger.pots SET status = 'voided', close_entry_id = (v_result ->> 'entry_id')::bigint,
         closed_at = now()
  WHERE match_id = p_match;
  RETURN v_result;
END $function$;
