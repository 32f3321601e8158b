CREATE OR REPLACE FUNCTION ledger.open_wallet(p_player text, p_currency text)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE v_id bigint; v_currency text;
BEGIN
  IF p_player IS NULL OR length(p_player) NOT BETWEEN 1 AND 64
     OR p_player !~ '^[A-Za-z0-9_.@:-]+$' THEN
    RAISE EXCEPTION USING ERRCODE = 'LD400', MESSAGE = 'invalid_player',
      DETAIL = 'player ids are 1..64 characters of A-Z a-z 0-9 _ . @ : -';
  END IF;
  -- only a currency the ledger keeps (it has a cashier account in it)
  PERFORM ledger._cashier(p_currency);
  INSERT INTO ledger.accounts (code, kind, currency, player)
  VALUES ('wallet:' || p_player, 'wallet', p_currency, p_player)
  ON CONFLICT (code) DO NOTHING
  RETURNING id INTO v_id;
  IF v_id IS NOT NULL THEN
    RETURN jsonb_build_object('player', p_player, 'account', 'wallet:' || p_player,
                              'currency', p_currency, 'opened', true);
  END IF;
  SELECT currency INTO v_currency FROM ledger.accounts WHERE code = 'wallet:' || p_player;
  IF v_currency <> p_currency THEN
    RAISE EXCEPTION USING ERRCODE = 'LD422', MESSAGE = 'wrong_currency',
      DETAIL = format('wallet of %s is in %s, not %s', p_player, v_currency, p_currency);
  END IF;
  RETURN jsonb_build_object('player', p_player, 'account', 'wallet:' || p_player,
                            'currency', v_currency, 'opened', false);
END $function$;
