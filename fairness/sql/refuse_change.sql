CREATE OR REPLACE FUNCTION fairness.refuse_change()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
  RAISE EXCEPTION 'fairness.%: the transparency log is append-only (% refused)',
    TG_TABLE_NAME, TG_OP USING ERRCODE = 'insufficient_privilege';
END $function$;
