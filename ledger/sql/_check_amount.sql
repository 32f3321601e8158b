CREATE OR REPLACE FUNCTION ledger._check_amount(p_amount bigint)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
  IF p_amount IS NULL OR p_amount <= 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'LD400', MESSAGE = 'invalid_amount',
      DETAIL = 'amount must be a positive number of cents';
  END IF;
END $function$;
