CREATE OR REPLACE FUNCTION ledger._in_slots(p_n integer, p_slots integer[], p_results text[])
 RETURNS text[]
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
DECLARE v_out text[] := array_fill(NULL::text, ARRAY[p_n]);
BEGIN
  -- a statement's answers in their operations' slots of the batch; NULL where it took none
  FOR i IN 1 .. coalesce(cardinality(p_slots), 0) LOOP
    v_out[p_slots[i]] := p_results[i];
  END LOOP;
  RETURN v_out;
END $function$;
