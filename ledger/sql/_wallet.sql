CREATE OR REPLACE FUNCTION ledger._wallet(p_player text, p_currency text, p_create boolean)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE r record;
BEGIN
  IF p_player IS NULL OR length(p_player) NOT BETWEEN 1 AND 64 OR p_player !~ '^[A-Za-z0-9_.@:-]+$' THEN
    RAISE EXCEPTION USING ERRCODE = 'LD400', MESSAGE = 'invalid_player',
      DETAIL = 'player ids are 1..64 characters of A-Z a-z 0-9 _ . @ : -';
  END IF;
  IF p_create THEN
    INSERT INTO ledger.accounts (code, kind, currency, player)
    VALUES ('wallet:' || p_player, 'wallet', p_currency, p_player)
    ON CONFLICT (code) DO NOTHING;
  END IF;
  SELECT id, currency INTO r FROM ledger.accounts WHERE code = 'wallet:' || p_player;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'LD404', MESSAGE = 'unknown_account',
      DETAIL = format('no wallet for player %s', p_player);
  END IF;
  IF p_currency IS NOT NULL AND r.currency <> p_currency THEN
    RAISE EXCEPTION USING ERRCODE = 'LD422', MESSAGE = 'wrong_currency',
      DETAIL = format('wallet of %s is in %s, not %s', p_player, r.currency, p_currency);
  END IF;
  RETURN r.id;
END $function$;
