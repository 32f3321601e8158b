CREATE OR REPLACE FUNCTION ledger.settle_match(p_key text, p_hash bytea, p_match text, p_winners text[], p_shares integer[], p_rate_bp integer)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
  v_prior jsonb; v_n int := cardinality(p_winners); p record; v_balance bigint;
  v_closed boolean; v_missing text; v_wallets bigint[]; v_shares int[]; v_players text[];
  v_split bigint[]; v_accounts bigint[]; v_amounts bigint[]; v_result jsonb; v_payouts jsonb;
  i int;
BEGIN
  v_prior := ledger._begin(p_key, p_hash);
  IF v_prior IS NOT NULL THEN RETURN v_prior; END IF;
  IF v_n IS NULL OR v_n < 1 OR v_n <> cardinality(p_shares)
     OR (SELECT count(DISTINCT w) <> v_n OR bool_or(s IS NULL OR s <= 0)
         FROM unnest(p_winners, p_shares) AS t(w, s)) THEN
    RAISE EXCEPTION USING ERRCODE = 'LD400', MESSAGE = 'invalid_winners',
      DETAIL = 'name one or more distinct winners, each with a positive share';
  END IF;
  IF p_rate_bp IS NULL OR p_rate_bp NOT BETWEEN 0 AND 10000 THEN
    RAISE EXCEPTION USING ERRCODE = 'LD400', MESSAGE = 'invalid_rate';
  END IF;
  -- the pot and its commission shard
  SELECT pt.account_id, pt.status, sh.id AS shard INTO p
  FROM ledger.pots pt, LATERAL (
    SELECT a.id FROM ledger.accounts a
    WHERE a.code = 'house:commission:' ||
          lpad((get_byte(sha256(convert_to(p_match, 'UTF8')), 0) % 16)::text, 2, '0')
  ) sh
  WHERE pt.match_id = p_match;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'LD404', MESSAGE = 'unknown_match',
      DETAIL = format('match %s has no pot', p_match);
  END IF;
  IF p.status <> 'open' THEN
    RAISE EXCEPTION USING ERRCODE = 'LD409',
      MESSAGE = CASE p.status WHEN 'settled' THEN 'match_already_settled'
                              ELSE 'match_already_voided' END,
      DETAIL = format('the pot of match %s is closed (%s)', p_match, p.status);
  END IF;
  -- the winners in seat order (the odd cent goes to the lower seat); each must have played
  SELECT array_agg(s.wallet_id ORDER BY s.seat), array_agg(d.share ORDER BY s.seat),
         array_agg(s.player ORDER BY s.seat),
         (array_agg(d.player ORDER BY d.ord) FILTER (WHERE s.player IS NULL))[1]
    INTO v_wallets, v_shares, v_players, v_missing
  FROM unnest(p_winners, p_shares) WITH ORDINALITY AS d(player, share, ord)
  LEFT JOIN ledger.stakes s ON s.match_id = p_match AND s.player = d.player;
  IF v_missing IS NOT NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'LD422', MESSAGE = 'winner_not_in_match',
      DETAIL = format('%s did not play match %s', v_missing, p_match);
  END IF;
  -- lock every account of the entry (ascending id) and read the pot under its lock: a
  -- settlement or void that committed meanwhile has closed it, so this applies at most once
  -- (an aggregate, so every row is locked: plpgsql stops a plain SELECT INTO at its first row)
  SELECT max(l.balance) FILTER (WHERE l.id = p.account_id),
         bool_or(l.closed_at IS NOT NULL) FILTER (WHERE l.id = p.account_id)
    INTO v_balance, v_closed
  FROM (SELECT id, balance, closed_at FROM ledger.accounts
        WHERE id = ANY(v_wallets || p.account_id || p.shard) ORDER BY id FOR NO KEY UPDATE) l;
  IF v_closed THEN
    SELECT status INTO p.status FROM ledger.pots WHERE match_id = p_match;
    RAISE EXCEPTION USING ERRCODE = 'LD409',
      MESSAGE = CASE p.status WHEN 'settled' THEN 'match_already_settled'
                              ELSE 'match_already_voided' END,
      DETAIL = format('the pot of match %s is closed (%s)', p_match, p.status);
  END IF;
  IF v_n = 1 THEN
    -- split_pot for one winner: commission = pot * rate_bp // 10000, the rest to the winner
    v_split := ARRAY[(v_balance * p_rate_bp) / 10000, v_balance - (v_balance * p_rate_bp) / 10000];
  ELSE
    v_split := ledger.split_pot(v_balance, p_rate_bp, v_shares);
  END IF;
  v_accounts := ARRAY[p.account_id];
  v_amounts := ARRAY[-v_balance];
  IF v_split[1] > 0 THEN
    v_accounts := v_accounts || p.shard;
    v_amounts := v_amounts || v_split[1];
  END IF;
  v_payouts := '[]'::jsonb;
  FOR i IN 1..v_n LOOP
    IF v_split[i + 1] > 0 THEN
      v_accounts := v_accounts || v_wallets[i];
      v_amounts := v_amounts || v_split[i + 1];
    END IF;
    v_payouts := v_payouts || jsonb_build_object('player', v_players[i], 'amount', v_split[i + 1]);
  END LOOP;
  v_result := ledger._post_entry('settle', p_key, p_hash, p_match, NULL, v_accounts, v_amounts,
                                 jsonb_build_object('pot', v_balance, 'commission', v_split[1],
                                                    'commission_rate_bp', p_rate_bp,
                                                    'payouts', v_payouts),
                                 ARRAY[p.account_id]);
  UPDATE ledger.pots SET status = 'settled', close_entry_id = (v_result ->> 'entry_id')::bigint,
         commission_rate_bp = p_rate_bp, commission = v_split[1],
         commission_account_id = p.shard, closed_at = now()
  WHERE match_id = p_match;
  RETURN v_result;
END $function$;
