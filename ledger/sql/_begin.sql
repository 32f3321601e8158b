CREATE OR REPLACE FUNCTION ledger._begin(p_key text, p_hash bytea)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE r record;
BEGIN
  IF p_key IS NULL OR length(p_key) NOT BETWEEN 1 AND 200 THEN
    RAISE EXCEPTION USING ERRCODE = 'LD400', MESSAGE = 'invalid_idempotency_key',
      DETAIL = 'idempotency key must be 1..200 characters';
  END IF;
  -- Shared: posters never wait for each other here; the chain sealer takes it exclusively
  -- for an instant to learn which entry ids are final. Taken before any entry id is drawn.
  PERFORM pg_advisory_xact_lock_shared(1279607879);
  SELECT request_hash, result INTO r FROM ledger.entries WHERE idempotency_key = p_key;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  IF r.request_hash <> p_hash THEN
    RAISE EXCEPTION USING ERRCODE = 'LD409', MESSAGE = 'idempotency_key_reused',
      DETAIL = 'this idempotency key was already used for a different request';
  END IF;
  RETURN r.result || '{"replayed": true}'::jsonb;
END $function$;
