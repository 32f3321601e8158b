CREATE OR REPLACE FUNCTION ledger._post(p_kind text, p_key text, p_hash bytea, p_match text, p_reference text, p_accounts bigint[], p_amounts bigint[], p_extra jsonb)
 RETURNS jsonb
 LANGUAGE sql
AS $function$
  SELECT ledger._post_entry(p_kind, p_key, p_hash, p_match, p_reference, p_accounts,
                            p_amounts, p_extra, NULL)
$function$;
