CREATE OR REPLACE FUNCTION ledger._cashier(p_currency text)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE v_id bigint;
BEGIN
  SELECT id INTO v_id FROM ledger.accounts WHERE kind = 'cashier' AND currency = p_currency;
  IF v_id IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'LD422', MESSAGE = 'unsupported_currency',
      DETAIL = format('the ledger has no cashier account in %s', p_currency);
  END IF;
  RETURN v_id;
END $function$;
