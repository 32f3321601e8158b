CREATE OR REPLACE FUNCTION ledger._closable_pot(p_match text, OUT account_id bigint, OUT balance bigint)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
DECLARE p record;
BEGIN
  SELECT pt.account_id, pt.status, a.balance, a.closed_at INTO p
  FROM ledger.pots pt JOIN ledger.accounts a ON a.id = pt.account_id
  WHERE pt.match_id = p_match;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'LD404', MESSAGE = 'unknown_match',
      DETAIL = format('match %s has no pot', p_match);
  END IF;
  IF p.status <> 'open' OR p.closed_at IS NOT NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'LD409',
      MESSAGE = CASE p.status WHEN 'settled' THEN 'match_already_settled'
                              ELSE 'match_already_voided' END,
      DETAIL = format('the pot of match %s is closed (%s)', p_match, p.status);
  END IF;
  account_id := p.account_id;
  balance := p.balance;
END $function$;
