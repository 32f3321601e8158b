CREATE OR REPLACE FUNCTION ledger.release(p_key text, p_hash bytea, p_reservation text)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE v_prior jsonb; h record; v_wallet bigint;
BEGIN
  v_prior := ledger._begin(p_key, p_hash);
  IF v_prior IS NOT NULL THEN RETURN v_prior; END IF;
  SELECT id, player, currency INTO h FROM ledger.accounts
  WHERE code = 'hold:' || p_reservation AND kind = 'hold';
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'LD404', MESSAGE = 'unknown_hold',
      DETAIL = format('no hold for reservation %s', p_reservation);
  END IF;
  v_wallet := ledger._wallet(h.player, h.currency, false);
  PERFORM ledger._lock(ARRAY[v_wallet, h.id]);
  SELECT id, balance, closed_at INTO h FROM ledger.accounts WHERE id = h.id;
  IF h.closed_at IS NOT NULL OR h.balance = 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'LD409', MESSAGE = 'hold_closed',
      DETAIL = format('the hold for reservation %s was already released or staked',
                      p_reservation);
  END IF;
  RETURN ledger._post_entry('release', p_key, p_hash, NULL, NULL,
                            ARRAY[h.id, v_wallet], ARRAY[-h.balance, h.balance],
                            jsonb_build_object('reservation_id', p_reservation,
                                               'hold_account', 'hold:' || p_reservation),
                            ARRAY[h.id]);
END $function$;
