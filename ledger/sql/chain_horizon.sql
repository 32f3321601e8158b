CREATE OR REPLACE FUNCTION ledger.chain_horizon(p_wait boolean)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE v_last bigint; v_called boolean;
BEGIN
  -- Every poster holds this lock shared from before it draws an entry id until it commits, so
  -- once it is ours exclusively, every id up to the sequence's value is final. A transaction
  -- lock: called on its own (autocommit), it is released as soon as the call ends, and an
  -- error cannot leave it held.
  IF p_wait THEN
    PERFORM pg_advisory_xact_lock(1279607879);
  ELSIF NOT pg_try_advisory_xact_lock(1279607879) THEN
    RETURN NULL;
  END IF;
  SELECT last_value, is_called INTO v_last, v_called FROM ledger.entries_id_seq;
  RETURN CASE WHEN v_called THEN v_last ELSE 0 END;
END $function$;
