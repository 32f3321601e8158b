CREATE OR REPLACE FUNCTION ledger.start_match(p_key text, p_hash bytea, p_match text, p_tier text, p_variant text, p_currency text, p_seats integer[], p_players text[], p_reservations text[])
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
  v_prior jsonb; v_n int := cardinality(p_seats); v_pot bigint; v_bad record;
  v_holds bigint[]; v_wallets bigint[]; v_amounts bigint[]; v_total bigint; v_result jsonb;
  v_entry bigint;
BEGIN
  v_prior := ledger._begin(p_key, p_hash);
  IF v_prior IS NOT NULL THEN RETURN v_prior; END IF;
  IF p_match IS NULL OR length(p_match) NOT BETWEEN 1 AND 128 OR p_match !~ '^[A-Za-z0-9_.:-]+$' THEN
    RAISE EXCEPTION USING ERRCODE = 'LD400', MESSAGE = 'invalid_match_id';
  END IF;
  IF v_n IS NULL OR v_n < 2 OR v_n <> cardinality(p_players)
     OR v_n <> cardinality(p_reservations)
     OR (SELECT count(DISTINCT s) FROM unnest(p_seats) s WHERE s >= 0) <> v_n
     OR (SELECT count(DISTINCT p) FROM unnest(p_players) p) <> v_n
     OR (SELECT count(DISTINCT r) FROM unnest(p_reservations) r) <> v_n THEN
    RAISE EXCEPTION USING ERRCODE = 'LD400', MESSAGE = 'invalid_seats',
      DETAIL = 'a match needs two or more seats with distinct seat numbers, players and reservations';
  END IF;
  IF EXISTS (SELECT 1 FROM ledger.pots WHERE match_id = p_match) THEN
    RAISE EXCEPTION USING ERRCODE = 'LD409', MESSAGE = 'match_already_started',
      DETAIL = format('match %s was already started', p_match);
  END IF;
  -- every hold must exist, belong to the seated player and be in the match's currency
  SELECT d.reservation, d.player, h.id AS hold_id, h.player AS hold_player, h.currency
    INTO v_bad
  FROM unnest(p_reservations, p_players) AS d(reservation, player)
  LEFT JOIN LATERAL (
    SELECT a.id, a.player, a.currency FROM ledger.accounts a
    WHERE a.code = 'hold:' || d.reservation AND a.kind = 'hold' LIMIT 1
  ) h ON true
  WHERE h.id IS NULL OR h.player <> d.player OR h.currency <> p_currency
  LIMIT 1;
  IF FOUND THEN
    IF v_bad.hold_id IS NULL THEN
      RAISE EXCEPTION USING ERRCODE = 'LD404', MESSAGE = 'unknown_hold',
        DETAIL = format('no hold for reservation %s', v_bad.reservation);
    ELSIF v_bad.hold_player <> v_bad.player THEN
      RAISE EXCEPTION USING ERRCODE = 'LD422', MESSAGE = 'hold_player_mismatch',
        DETAIL = format('reservation %s is held for %s, not %s', v_bad.reservation,
                        v_bad.hold_player, v_bad.player);
    ELSE
      RAISE EXCEPTION USING ERRCODE = 'LD422', MESSAGE = 'wrong_currency',
        DETAIL = format('hold %s is in %s, not %s', v_bad.reservation, v_bad.currency,
                        p_currency);
    END IF;
  END IF;
  INSERT INTO ledger.accounts (code, kind, currency, match_id)
  VALUES ('pot:' || p_match, 'pot', p_currency, p_match)
  ON CONFLICT (code) DO NOTHING
  RETURNING id INTO v_pot;
  IF v_pot IS NULL THEN
    v_prior := ledger._replay(p_key, p_hash);
    IF v_prior IS NOT NULL THEN RETURN v_prior; END IF;
    RAISE EXCEPTION USING ERRCODE = 'LD409', MESSAGE = 'match_already_started',
      DETAIL = format('match %s was already started', p_match);
  END IF;
  SELECT array_agg(h.id ORDER BY d.ord) INTO v_holds
  FROM unnest(p_reservations) WITH ORDINALITY AS d(reservation, ord),
  LATERAL (SELECT a.id FROM ledger.accounts a WHERE a.code = 'hold:' || d.reservation LIMIT 1) h;
  PERFORM ledger._lock(v_holds || v_pot);
  -- all or nothing: every hold still open and funded
  SELECT a.code INTO v_bad FROM ledger.accounts a
  WHERE a.id = ANY(v_holds) AND (a.closed_at IS NOT NULL OR a.balance <= 0) ORDER BY a.id LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'LD409', MESSAGE = 'hold_closed',
      DETAIL = format('%s was already released or staked', v_bad.code);
  END IF;
  SELECT array_agg(-h.balance ORDER BY d.ord), sum(h.balance),
         array_agg(w.id ORDER BY d.ord)
    INTO v_amounts, v_total, v_wallets
  FROM unnest(v_holds) WITH ORDINALITY AS d(hold_id, ord),
  LATERAL (SELECT a.balance, a.player FROM ledger.accounts a WHERE a.id = d.hold_id LIMIT 1) h,
  LATERAL (SELECT a.id FROM ledger.accounts a WHERE a.code = 'wallet:' || h.player LIMIT 1) w;
  v_result := ledger._post_entry('start', p_key, p_hash, p_match, NULL,
                                 v_holds || v_pot, v_amounts || v_total,
                                 jsonb_build_object('pot_account', 'pot:' || p_match,
                                                    'pot', v_total, 'tier', p_tier,
                                                    'variant', p_variant),
                                 v_holds);
  v_entry := (v_result ->> 'entry_id')::bigint;
  INSERT INTO ledger.pots (match_id, account_id, tier, variant, currency, status, stake_total,
                           start_entry_id, started_at)
  VALUES (p_match, v_pot, p_tier, p_variant, p_currency, 'open', v_total, v_entry, now());
  INSERT INTO ledger.stakes (match_id, seat, player, wallet_id, hold_id, amount)
  SELECT p_match, d.seat, d.player, d.wallet_id, d.hold_id, -d.amount
  FROM unnest(p_seats, p_players, v_wallets, v_holds, v_amounts)
       AS d(seat, player, wallet_id, hold_id, amount);
  RETURN v_result;
END $function$;
