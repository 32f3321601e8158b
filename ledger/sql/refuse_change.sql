CREATE OR REPLACE FUNCTION ledger.refuse_change()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'LD403', MESSAGE = 'append_only',
    DETAIL = format('%s on ledger.%s is not allowed; post a reversing entry instead',
                    TG_OP, TG_TABLE_NAME);
END $function$;
