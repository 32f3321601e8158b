CREATE OR REPLACE FUNCTION ledger._replay(p_key text, p_hash bytea)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE r record;
BEGIN
  SELECT request_hash, result INTO r FROM ledger.entries WHERE idempotency_key = p_key;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  IF r.request_hash <> p_hash THEN
    RAISE EXCEPTION USING ERRCODE = 'LD409', MESSAGE = 'idempotency_key_reused',
      DETAIL = 'this idempotency key was already used for a different request';
  END IF;
  RETURN r.result || jsonb_build_object('replayed', true);
END $function$;
