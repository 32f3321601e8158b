CREATE OR REPLACE FUNCTION ledger.post_batch(p_ops text[], p_args text[])
 RETURNS TABLE(answer text, refusal_sqlstate text, refusal text, refusal_detail text)
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
  v_n int := coalesce(cardinality(p_ops), 0);
  v_settles int;
  v_holds int;
  v_settled text[];
  v_held text[];
  v_out text[] := ARRAY[]::text[];
  v text;
  a jsonb;
  v_state text; v_message text; v_detail text;
  -- an operation's refusal, in its slot: SQLSTATE, code (the error's message) and detail
  v_states text[] := array_fill(NULL::text, ARRAY[v_n]);
  v_codes text[] := array_fill(NULL::text, ARRAY[v_n]);
  v_details text[] := array_fill(NULL::text, ARRAY[v_n]);
BEGIN
  IF v_n <> coalesce(cardinality(p_args), 0) OR v_n > 32 THEN
    RAISE EXCEPTION USING ERRCODE = 'LD400', MESSAGE = 'invalid_batch',
      DETAIL = 'a batch is 0..32 operations, one argument list each';
  END IF;
  -- The chain lock first, as every operation takes it before any row lock (see _begin).
  PERFORM pg_advisory_xact_lock_shared(1279607879);
  SELECT count(*) FILTER (WHERE o = 'settle'), count(*) FILTER (WHERE o = 'hold')
    INTO v_settles, v_holds
  FROM unnest(p_ops) o;
  IF v_settles >= 2 AND v_settles = v_n OR v_holds >= 2 AND v_holds = v_n THEN
    -- A batch of settlements only, or of holds only: one statement posts them all, locking
    -- their accounts in ascending id. Only if it takes every one of them: otherwise it is
    -- undone and they all run one at a time, in batch order, exactly as below.
    BEGIN
      IF v_settles = v_n THEN
        v_settled := ledger._settle_many(p_ops, p_args);
      ELSE
        v_held := ledger._hold_many(p_ops, p_args);
      END IF;
      IF array_position(coalesce(v_settled, v_held), NULL) IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'LD100', MESSAGE = 'batch_not_whole';
      END IF;
      RETURN QUERY SELECT u.v, NULL::text, NULL::text, NULL::text
        FROM unnest(coalesce(v_settled, v_held)) WITH ORDINALITY AS u(v, n) ORDER BY u.n;
      RETURN;
    EXCEPTION WHEN OTHERS THEN
      v_settled := NULL;
      v_held := NULL;
      v_settles := 0;
      v_holds := 0;
    END;
  END IF;
  -- Every account of every operation, locked first in ascending id. Then the
  -- settlements that can be posted as they stand, by one statement, and the holds likewise
  -- (each undone, and its operations left to run one at a time, if it fails); then the
  -- rest, one at a time, in batch order.
  PERFORM ledger._lock_batch(p_ops, p_args);
  IF v_settles >= 2 THEN
    BEGIN
      v_settled := ledger._settle_many(p_ops, p_args);
    EXCEPTION WHEN OTHERS THEN
      v_settled := NULL;
    END;
  END IF;
  IF v_holds >= 2 THEN
    BEGIN
      v_held := ledger._hold_many(p_ops, p_args);
    EXCEPTION WHEN OTHERS THEN
      v_held := NULL;
    END;
  END IF;
  FOR i IN 1 .. v_n LOOP
    v := coalesce(v_settled[i], v_held[i]);
    IF v IS NOT NULL THEN
      v_out := v_out || v;
      CONTINUE;
    END IF;
    BEGIN
      a := p_args[i]::jsonb;
      v := CASE p_ops[i]
        WHEN 'hold' THEN ledger.hold(a->>0, decode(a->>1, 'hex'), a->>2, a->>3,
                                     (a->>4)::bigint, a->>5, a->>6)
        WHEN 'release' THEN ledger.release(a->>0, decode(a->>1, 'hex'), a->>2)
        WHEN 'start' THEN ledger.start_match(
          a->>0, decode(a->>1, 'hex'), a->>2, a->>3, a->>4, a->>5,
          ARRAY(SELECT jsonb_array_elements_text(a->6)::int),
          ARRAY(SELECT jsonb_array_elements_text(a->7)),
          ARRAY(SELECT jsonb_array_elements_text(a->8)))
        WHEN 'settle' THEN ledger.settle_match(
          a->>0, decode(a->>1, 'hex'), a->>2,
          ARRAY(SELECT jsonb_array_elements_text(a->3)),
          ARRAY(SELECT jsonb_array_elements_text(a->4)::int),
          (a->>5)::int)
        WHEN 'void' THEN ledger.void_match(a->>0, decode(a->>1, 'hex'), a->>2, a->>3)
      END::text;
      IF v IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'LD400', MESSAGE = 'unknown_operation',
          DETAIL = format('no ledger operation %L', p_ops[i]);
      END IF;
    EXCEPTION WHEN OTHERS THEN
      GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT,
                              v_detail = PG_EXCEPTION_DETAIL;
      v := NULL;
      v_states[i] := v_state;
      v_codes[i] := v_message;
      v_details[i] := v_detail;
    END;
    v_out := v_out || v;
  END LOOP;
  RETURN QUERY SELECT v_out[n], v_states[n], v_codes[n], v_details[n]
    FROM generate_series(1, v_n) AS n ORDER BY n;
END $function$;
