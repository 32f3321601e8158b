CREATE OR REPLACE FUNCTION ledger.refuse_closed_day()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE v_through date;
BEGIN
  -- Days close in order, so the newest closed day bounds them all: one read of the primary
  -- key's last entries (at most one proposed day sits after it).
  SELECT max(c.day) INTO v_through FROM ledger.day_closes c WHERE c.status = 'closed';
  IF v_through IS NOT NULL AND (NEW.created_at AT TIME ZONE 'UTC')::date <= v_through THEN
    RAISE EXCEPTION USING ERRCODE = 'LD409', MESSAGE = 'day_closed',
      DETAIL = format('the books are closed through %s; a correction posts in an open day',
                      v_through);
  END IF;
  RETURN NEW;
END $function$;
