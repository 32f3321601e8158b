CREATE OR REPLACE FUNCTION ledger.refuse_closed_day()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE v_through date; v_first timestamptz;
BEGIN
  -- Once per INSERT statement, not per row: a batch's entries go in one statement
  -- (docs/explanation/daily-close.md has the cost). Days close in order, so the newest
  -- closed day bounds them all.
  SELECT max(c.day) INTO v_through FROM ledger.day_closes c WHERE c.status = 'closed';
  IF v_through IS NULL THEN
    RETURN NULL;
  END IF;
  SELECT min(n.created_at) INTO v_first FROM new_entries n;
  IF (v_first AT TIME ZONE 'UTC')::date <= v_through THEN
    RAISE EXCEPTION USING ERRCODE = 'LD409', MESSAGE = 'day_closed',
      DETAIL = format('the books are closed through %s; a correction posts in an open day',
                      v_through);
  END IF;
  RETURN NULL;
END $function$;
