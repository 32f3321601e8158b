CREATE OR REPLACE FUNCTION ledger._lock(p_ids bigint[])
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
  -- one global order (ascending id); NO KEY UPDATE so foreign-key checks (KEY SHARE) of
  -- other transactions never wait on a poster's lock
  PERFORM id FROM ledger.accounts WHERE id = ANY(p_ids) ORDER BY id FOR NO KEY UPDATE;
END $function$;
