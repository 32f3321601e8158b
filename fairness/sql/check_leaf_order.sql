CREATE OR REPLACE FUNCTION fairness.check_leaf_order()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE expected BIGINT;
BEGIN
  SELECT coalesce(max(idx) + 1, 0) INTO expected FROM fairness.leaves;
  IF NEW.idx <> expected THEN
    RAISE EXCEPTION 'fairness.leaves: leaf % out of order (next is %)', NEW.idx, expected;
  END IF;
  RETURN NEW;
END $function$;
