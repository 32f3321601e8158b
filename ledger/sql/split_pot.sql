CREATE OR REPLACE FUNCTION ledger.split_pot(p_pot bigint, p_rate_bp integer, p_shares integer[])
 RETURNS bigint[]
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
DECLARE
  v_commission bigint; v_rest bigint; v_weight bigint; v_n int := cardinality(p_shares);
  v_base bigint[]; v_rem bigint[]; v_left bigint; r record;
BEGIN
  IF p_pot < 0 OR p_rate_bp NOT BETWEEN 0 AND 10000 OR v_n IS NULL OR v_n < 1
     OR EXISTS (SELECT 1 FROM unnest(p_shares) s WHERE s IS NULL OR s <= 0) THEN
    RAISE EXCEPTION USING ERRCODE = 'LD400', MESSAGE = 'invalid_split';
  END IF;
  v_commission := (p_pot * p_rate_bp) / 10000;
  v_rest := p_pot - v_commission;
  SELECT sum(s) INTO v_weight FROM unnest(p_shares) s;
  SELECT array_agg((v_rest * s) / v_weight ORDER BY o), array_agg((v_rest * s) % v_weight ORDER BY o)
    INTO v_base, v_rem
  FROM unnest(p_shares) WITH ORDINALITY AS t(s, o);
  v_left := v_rest - (SELECT sum(b) FROM unnest(v_base) b);
  FOR r IN SELECT o FROM unnest(v_rem) WITH ORDINALITY AS t(rem, o) ORDER BY rem DESC, o
           LIMIT v_left LOOP
    v_base[r.o] := v_base[r.o] + 1;
  END LOOP;
  RETURN v_commission || v_base;
END $function$;
