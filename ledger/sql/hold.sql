CREATE OR REPLACE FUNCTION ledger.hold(p_key text, p_hash bytea, p_player text, p_reservation text, p_amount bigint, p_currency text, p_table text)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
  v_prior jsonb; v_wallet bigint; v_currency text; w record; v_hold bigint; v_id bigint;
  v_now timestamptz := now(); v_result jsonb;
BEGIN
  v_prior := ledger._begin(p_key, p_hash);
  IF v_prior IS NOT NULL THEN RETURN v_prior; END IF;
  IF p_amount IS NULL OR p_amount <= 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'LD400', MESSAGE = 'invalid_amount',
      DETAIL = 'amount must be a positive number of cents';
  END IF;
  IF p_reservation IS NULL OR length(p_reservation) NOT BETWEEN 1 AND 128 OR p_reservation !~ '^[A-Za-z0-9_.:-]+$' THEN
    RAISE EXCEPTION USING ERRCODE = 'LD400', MESSAGE = 'invalid_reservation',
      DETAIL = 'reservation ids are 1..128 characters of A-Z a-z 0-9 _ . : -';
  END IF;
  IF p_player IS NULL OR length(p_player) NOT BETWEEN 1 AND 64 OR p_player !~ '^[A-Za-z0-9_.@:-]+$' THEN
    RAISE EXCEPTION USING ERRCODE = 'LD400', MESSAGE = 'invalid_player',
      DETAIL = 'player ids are 1..64 characters of A-Z a-z 0-9 _ . @ : -';
  END IF;
  SELECT id, currency INTO v_wallet, v_currency FROM ledger.accounts
  WHERE code = 'wallet:' || p_player;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'LD404', MESSAGE = 'unknown_account',
      DETAIL = format('no wallet for player %s', p_player);
  END IF;
  IF p_currency IS NULL OR v_currency <> p_currency THEN
    RAISE EXCEPTION USING ERRCODE = 'LD422', MESSAGE = 'wrong_currency',
      DETAIL = format('wallet of %s is in %s, not %s', p_player, v_currency, p_currency);
  END IF;
  -- The new account is inserted before any row lock is taken (it is invisible to others
  -- until commit), already holding the stake: its first posting's balance and version.
  -- If the wallet cannot pay, the exception below rolls the insert back.
  INSERT INTO ledger.accounts (code, kind, currency, player, reservation_id, match_id,
                               balance, version)
  VALUES ('hold:' || p_reservation, 'hold', p_currency, p_player, p_reservation, p_table,
          p_amount, 1)
  ON CONFLICT (code) DO NOTHING
  RETURNING id INTO v_hold;
  IF v_hold IS NULL THEN
    -- a concurrent retry of the same request may have just committed it
    v_prior := ledger._replay(p_key, p_hash);
    IF v_prior IS NOT NULL THEN RETURN v_prior; END IF;
    RAISE EXCEPTION USING ERRCODE = 'LD409', MESSAGE = 'hold_exists',
      DETAIL = format('reservation %s already has a hold', p_reservation);
  END IF;
  -- the only existing account of the entry: nothing else is locked, so the order holds
  SELECT code, balance, version, closed_at INTO w FROM ledger.accounts
  WHERE id = v_wallet FOR NO KEY UPDATE;
  IF w.closed_at IS NOT NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'LD409', MESSAGE = 'account_closed',
      DETAIL = format('account %s is closed', w.code);
  END IF;
  IF w.balance < p_amount THEN
    RAISE EXCEPTION USING ERRCODE = 'LD422', MESSAGE = 'insufficient_funds',
      DETAIL = format('account %s holds %s cents, needs %s', w.code, w.balance, p_amount);
  END IF;
  v_id := nextval('ledger.entries_id_seq');
  v_result := jsonb_build_object(
    'entry_id', v_id, 'kind', 'hold', 'idempotency_key', p_key, 'match_id', NULL,
    'reference', p_table,
    'created_at', to_char(v_now AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'replayed', false,
    'postings', jsonb_build_array(
      jsonb_build_object('leg', 1, 'account', w.code, 'amount', -p_amount,
                         'balance_after', w.balance - p_amount,
                         'version_after', w.version + 1),
      jsonb_build_object('leg', 2, 'account', 'hold:' || p_reservation, 'amount', p_amount,
                         'balance_after', p_amount, 'version_after', 1)),
    'player', p_player, 'reservation_id', p_reservation,
    'hold_account', 'hold:' || p_reservation);
  WITH e AS (
    INSERT INTO ledger.entries (id, kind, idempotency_key, request_hash, match_id, reference,
                                created_at, result)
    VALUES (v_id, 'hold', p_key, p_hash, NULL, p_table, v_now, v_result)
  ), u AS (
    UPDATE ledger.accounts SET balance = w.balance - p_amount, version = w.version + 1
    WHERE id = v_wallet
  )
  INSERT INTO ledger.postings (entry_id, leg, account_id, amount, currency, balance_after,
                               version_after)
  VALUES (v_id, 1, v_wallet, -p_amount, p_currency, w.balance - p_amount, w.version + 1),
         (v_id, 2, v_hold, p_amount, p_currency, p_amount, 1);
  RETURN v_result;
END $function$;
