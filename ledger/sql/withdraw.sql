CREATE OR REPLACE FUNCTION ledger.withdraw(p_key text, p_hash bytea, p_player text, p_amount bigint, p_currency text, p_reference text)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE v_prior jsonb; v_cashier bigint; v_wallet bigint;
BEGIN
  v_prior := ledger._begin(p_key, p_hash);
  IF v_prior IS NOT NULL THEN RETURN v_prior; END IF;
  PERFORM ledger._check_amount(p_amount);
  v_cashier := ledger._cashier(p_currency);
  v_wallet := ledger._wallet(p_player, p_currency, false);
  RETURN ledger._post_entry('withdrawal', p_key, p_hash, NULL, p_reference,
                            ARRAY[v_wallet, v_cashier], ARRAY[-p_amount, p_amount],
                            jsonb_build_object('player', p_player), NULL);
END $function$;
