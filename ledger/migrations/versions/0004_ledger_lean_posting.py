"""Ledger: a leaner posting path (fewer statements and row versions per operation).

Same guarantees, same results and refusals; less work per call (measured with
pg_stat_statements and pgbench, see docs/decisions/0003-ledger-lean-posting-functions.md):

* `_begin` looks the idempotency key up itself (no nested `_replay` call).
* `_post_entry` (the new core of `_post`) locks the entry's accounts in ascending id order and
  reads them in the same statement that runs every check (all found, one currency, sum zero,
  no zero leg, no closed account, no balance below zero) and builds the postings document; then
  one statement writes the entry, moves the balances (closing the accounts in `p_close` in the
  same row update) and writes the postings. Before: ten statements and a second UPDATE (a
  second row version) for every account closed by a release, start, settlement or void.
* `hold` creates the hold account already holding the stake (balance and version of its first
  posting), so the new row is written once instead of inserted and then updated; it locks the
  one existing account (the wallet) itself.
* `settle_match` reads pot, commission shard and winners in two statements, checks the pot
  under its row lock from the locked row, and pays a single winner without `split_pot` (the
  same formula: commission = pot * rate_bp // 10000, the rest to the winner).

Revision ID: 0004_ledger_lean_posting
Revises: 0003_ledger_lock_no_key_update
Create Date: 2025-01-04
"""

from __future__ import annotations

from alembic import op

revision = "0004_ledger_lean_posting"
down_revision = "0003_ledger_lock_no_key_update"
branch_labels = None
depends_on = None

CHAIN_LOCK_KEY = 0x4C454447
COMMISSION_SHARDS = 16

FUNCTIONS = [
    r"""
CREATE OR REPLACE FUNCTION ledger._begin(p_key text, p_hash bytea) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
  IF p_key IS NULL OR length(p_key) NOT BETWEEN 1 AND 200 THEN
    RAISE EXCEPTION USING ERRCODE = 'LD400', MESSAGE = 'invalid_idempotency_key',
      DETAIL = 'idempotency key must be 1..200 characters';
  END IF;
  -- Shared: posters never wait for each other here; the chain sealer takes it exclusively
  -- for an instant to learn which entry ids are final. Taken before any entry id is drawn.
  PERFORM pg_advisory_xact_lock_shared(__CHAIN_LOCK__);
  SELECT request_hash, result INTO r FROM ledger.entries WHERE idempotency_key = p_key;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  IF r.request_hash <> p_hash THEN
    RAISE EXCEPTION USING ERRCODE = 'LD409', MESSAGE = 'idempotency_key_reused',
      DETAIL = 'this idempotency key was already used for a different request';
  END IF;
  RETURN r.result || '{"replayed": true}'::jsonb;
END $$
""",
    r"""
-- Post one journal entry: lock the accounts (ascending id, the one global order; a no-op for
-- rows this transaction already locked), check them, write the entry, move the balances
-- (closing the accounts in p_close in the same row update) and write the postings.
CREATE FUNCTION ledger._post_entry(
  p_kind text, p_key text, p_hash bytea, p_match text, p_reference text,
  p_accounts bigint[], p_amounts bigint[], p_extra jsonb, p_close bigint[]
) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  v_id bigint;
  v_now timestamptz := now();
  v_n int := cardinality(p_accounts);
  c record;
  v_result jsonb;
BEGIN
  IF v_n IS NULL OR v_n < 2 OR v_n <> cardinality(p_amounts) THEN
    RAISE EXCEPTION USING ERRCODE = 'LD500', MESSAGE = 'entry_needs_two_postings';
  END IF;
  WITH a AS MATERIALIZED (
    SELECT id, code, kind, currency, balance, version, closed_at FROM ledger.accounts
    WHERE id = ANY(p_accounts) ORDER BY id FOR NO KEY UPDATE
  ), j AS (
    SELECT a.*, x.amount, x.leg,
           a.closed_at IS NOT NULL AS closed,
           a.kind <> 'cashier' AND a.balance + x.amount < 0 AS short
    FROM a JOIN unnest(p_accounts, p_amounts) WITH ORDINALITY AS x(id, amount, leg)
      ON x.id = a.id
  )
  SELECT count(DISTINCT j.id) AS n_accounts, count(*) AS n_legs,
         count(DISTINCT j.currency) AS n_currencies, sum(j.amount) AS total,
         bool_or(j.amount IS NULL OR j.amount = 0) AS has_zero,
         -- the first account (by id) that refuses the posting
         (array_agg(j.code ORDER BY j.id) FILTER (WHERE j.closed OR j.short))[1] AS bad_code,
         (array_agg(j.closed ORDER BY j.id) FILTER (WHERE j.closed OR j.short))[1] AS bad_closed,
         (array_agg(j.balance ORDER BY j.id) FILTER (WHERE j.closed OR j.short))[1] AS bad_balance,
         (array_agg(j.amount ORDER BY j.id) FILTER (WHERE j.closed OR j.short))[1] AS bad_amount,
         jsonb_agg(jsonb_build_object(
           'leg', j.leg, 'account', j.code, 'amount', j.amount,
           'balance_after', j.balance + j.amount, 'version_after', j.version + 1)
           ORDER BY j.leg) AS postings
    INTO c
  FROM j;
  IF c.n_accounts <> v_n OR c.n_legs <> v_n THEN
    RAISE EXCEPTION USING ERRCODE = 'LD500', MESSAGE = 'account_twice_in_entry',
      DETAIL = 'every leg needs its own existing account';
  END IF;
  IF c.has_zero THEN
    RAISE EXCEPTION USING ERRCODE = 'LD500', MESSAGE = 'zero_posting';
  END IF;
  -- one currency per entry, and the postings of that currency sum to zero
  IF c.n_currencies <> 1 THEN
    RAISE EXCEPTION USING ERRCODE = 'LD422', MESSAGE = 'wrong_currency',
      DETAIL = 'all accounts of an entry must share one currency';
  END IF;
  IF c.total <> 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'LD500', MESSAGE = 'entry_not_balanced';
  END IF;
  IF c.bad_code IS NOT NULL THEN
    IF c.bad_closed THEN
      RAISE EXCEPTION USING ERRCODE = 'LD409', MESSAGE = 'account_closed',
        DETAIL = format('account %s is closed', c.bad_code);
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'LD422', MESSAGE = 'insufficient_funds',
      DETAIL = format('account %s holds %s cents, needs %s', c.bad_code, c.bad_balance,
                      -c.bad_amount);
  END IF;

  v_id := nextval('ledger.entries_id_seq');
  v_result := jsonb_build_object(
    'entry_id', v_id, 'kind', p_kind, 'idempotency_key', p_key, 'match_id', p_match,
    'reference', p_reference,
    'created_at', to_char(v_now AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'replayed', false, 'postings', c.postings) || coalesce(p_extra, '{}'::jsonb);

  -- one statement: the entry, the balances (and closures), the postings; the postings'
  -- foreign keys are checked at its end, when the entry row exists
  WITH e AS (
    INSERT INTO ledger.entries (id, kind, idempotency_key, request_hash, match_id, reference,
                                created_at, result)
    VALUES (v_id, p_kind, p_key, p_hash, p_match, p_reference, v_now, v_result)
  ), u AS (
    UPDATE ledger.accounts a
       SET balance = a.balance + x.amount,
           version = a.version + 1,
           closed_at = CASE WHEN a.id = ANY(p_close) THEN v_now ELSE a.closed_at END
      FROM unnest(p_accounts, p_amounts) WITH ORDINALITY AS x(id, amount, leg)
     WHERE a.id = x.id
    RETURNING a.id, x.leg, x.amount, a.currency, a.balance, a.version
  )
  INSERT INTO ledger.postings (entry_id, leg, account_id, amount, currency, balance_after,
                               version_after)
  SELECT v_id, u.leg, u.id, u.amount, u.currency, u.balance, u.version FROM u;

  RETURN v_result;
END $$
""",
    r"""
CREATE OR REPLACE FUNCTION ledger._post(
  p_kind text, p_key text, p_hash bytea, p_match text, p_reference text,
  p_accounts bigint[], p_amounts bigint[], p_extra jsonb
) RETURNS jsonb
LANGUAGE sql AS $$
  SELECT ledger._post_entry(p_kind, p_key, p_hash, p_match, p_reference, p_accounts,
                            p_amounts, p_extra, NULL)
$$
""",
    r"""
CREATE OR REPLACE FUNCTION ledger.deposit(p_key text, p_hash bytea, p_player text,
                                          p_amount bigint, p_currency text, p_reference text)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE v_prior jsonb; v_cashier bigint; v_wallet bigint;
BEGIN
  v_prior := ledger._begin(p_key, p_hash);
  IF v_prior IS NOT NULL THEN RETURN v_prior; END IF;
  PERFORM ledger._check_amount(p_amount);
  v_cashier := ledger._cashier(p_currency);
  v_wallet := ledger._wallet(p_player, p_currency, true);
  RETURN ledger._post_entry('deposit', p_key, p_hash, NULL, p_reference,
                            ARRAY[v_cashier, v_wallet], ARRAY[-p_amount, p_amount],
                            jsonb_build_object('player', p_player), NULL);
END $$
""",
    r"""
CREATE OR REPLACE FUNCTION ledger.withdraw(p_key text, p_hash bytea, p_player text,
                                           p_amount bigint, p_currency text, p_reference text)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE v_prior jsonb; v_cashier bigint; v_wallet bigint;
BEGIN
  v_prior := ledger._begin(p_key, p_hash);
  IF v_prior IS NOT NULL THEN RETURN v_prior; END IF;
  PERFORM ledger._check_amount(p_amount);
  v_cashier := ledger._cashier(p_currency);
  v_wallet := ledger._wallet(p_player, p_currency, false);
  RETURN ledger._post_entry('withdrawal', p_key, p_hash, NULL, p_reference,
                            ARRAY[v_wallet, v_cashier], ARRAY[-p_amount, p_amount],
                            jsonb_build_object('player', p_player), NULL);
END $$
""",
    r"""
CREATE OR REPLACE FUNCTION ledger.hold(p_key text, p_hash bytea, p_player text,
                                       p_reservation text, p_amount bigint, p_currency text,
                                       p_table text) RETURNS jsonb
LANGUAGE plpgsql AS $$
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
  IF p_reservation IS NULL OR p_reservation !~ '^[A-Za-z0-9_.:-]{1,128}$' THEN
    RAISE EXCEPTION USING ERRCODE = 'LD400', MESSAGE = 'invalid_reservation',
      DETAIL = 'reservation ids are 1..128 characters of A-Z a-z 0-9 _ . : -';
  END IF;
  IF p_player IS NULL OR p_player !~ '^[A-Za-z0-9_.@:-]{1,64}$' THEN
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
END $$
""",
    r"""
CREATE OR REPLACE FUNCTION ledger.release(p_key text, p_hash bytea, p_reservation text)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE v_prior jsonb; h record; v_wallet bigint;
BEGIN
  v_prior := ledger._begin(p_key, p_hash);
  IF v_prior IS NOT NULL THEN RETURN v_prior; END IF;
  SELECT id, player, currency INTO h FROM ledger.accounts
  WHERE code = 'hold:' || p_reservation AND kind = 'hold';
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'LD404', MESSAGE = 'unknown_hold',
      DETAIL = format('no hold for reservation %s', p_reservation);
  END IF;
  v_wallet := ledger._wallet(h.player, h.currency, false);
  PERFORM ledger._lock(ARRAY[v_wallet, h.id]);
  SELECT id, balance, closed_at INTO h FROM ledger.accounts WHERE id = h.id;
  IF h.closed_at IS NOT NULL OR h.balance = 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'LD409', MESSAGE = 'hold_closed',
      DETAIL = format('the hold for reservation %s was already released or staked',
                      p_reservation);
  END IF;
  RETURN ledger._post_entry('release', p_key, p_hash, NULL, NULL,
                            ARRAY[h.id, v_wallet], ARRAY[-h.balance, h.balance],
                            jsonb_build_object('reservation_id', p_reservation,
                                               'hold_account', 'hold:' || p_reservation),
                            ARRAY[h.id]);
END $$
""",
    r"""
CREATE OR REPLACE FUNCTION ledger.start_match(p_key text, p_hash bytea, p_match text,
                                              p_tier text, p_variant text, p_currency text,
                                              p_seats int[], p_players text[],
                                              p_reservations text[]) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  v_prior jsonb; v_n int := cardinality(p_seats); v_pot bigint; v_bad record;
  v_holds bigint[]; v_wallets bigint[]; v_amounts bigint[]; v_total bigint; v_result jsonb;
  v_entry bigint;
BEGIN
  v_prior := ledger._begin(p_key, p_hash);
  IF v_prior IS NOT NULL THEN RETURN v_prior; END IF;
  IF p_match IS NULL OR p_match !~ '^[A-Za-z0-9_.:-]{1,128}$' THEN
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
END $$
""",
    r"""
CREATE OR REPLACE FUNCTION ledger.settle_match(p_key text, p_hash bytea, p_match text,
                                               p_winners text[], p_shares int[],
                                               p_rate_bp int) RETURNS jsonb
LANGUAGE plpgsql AS $$
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
          lpad((get_byte(sha256(convert_to(p_match, 'UTF8')), 0) % __SHARDS__)::text, 2, '0')
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
END $$
""",
    r"""
CREATE OR REPLACE FUNCTION ledger.void_match(p_key text, p_hash bytea, p_match text,
                                             p_reason text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  v_prior jsonb; p record; v_wallets bigint[]; v_amounts bigint[]; v_total bigint;
  v_result jsonb;
BEGIN
  v_prior := ledger._begin(p_key, p_hash);
  IF v_prior IS NOT NULL THEN RETURN v_prior; END IF;
  SELECT * INTO p FROM ledger._closable_pot(p_match);
  SELECT array_agg(wallet_id ORDER BY seat), array_agg(amount ORDER BY seat), sum(amount)
    INTO v_wallets, v_amounts, v_total
  FROM ledger.stakes WHERE match_id = p_match;
  PERFORM ledger._lock(v_wallets || p.account_id);
  SELECT * INTO p FROM ledger._closable_pot(p_match);
  IF p.balance <> v_total THEN
    RAISE EXCEPTION USING ERRCODE = 'LD500', MESSAGE = 'pot_mismatch',
      DETAIL = format('pot %s holds %s cents but its stakes add up to %s', p_match, p.balance,
                      v_total);
  END IF;
  v_result := ledger._post_entry('void', p_key, p_hash, p_match, p_reason,
                                 p.account_id || v_wallets, (-p.balance) || v_amounts,
                                 jsonb_build_object('pot', p.balance), ARRAY[p.account_id]);
  UPDATE ledger.pots SET status = 'voided', close_entry_id = (v_result ->> 'entry_id')::bigint,
         closed_at = now()
  WHERE match_id = p_match;
  RETURN v_result;
END $$
""",
]

# CREATE OR REPLACE resets a function's SET clauses: the operations get theirs back (see 0001;
# the helpers they call inherit the setting).
GENERIC_PLANS = (
    "deposit(text, bytea, text, bigint, text, text)",
    "withdraw(text, bytea, text, bigint, text, text)",
    "hold(text, bytea, text, text, bigint, text, text)",
    "release(text, bytea, text)",
    "start_match(text, bytea, text, text, text, text, int[], text[], text[])",
    "settle_match(text, bytea, text, text[], int[], int)",
    "void_match(text, bytea, text, text)",
)


def upgrade() -> None:
    for sql in FUNCTIONS:
        op.execute(
            sql.replace("__CHAIN_LOCK__", str(CHAIN_LOCK_KEY)).replace(
                "__SHARDS__", str(COMMISSION_SHARDS)
            )
        )
    for signature in GENERIC_PLANS:
        op.execute(f"ALTER FUNCTION ledger.{signature} SET plan_cache_mode = force_generic_plan")
    op.execute(
        "GRANT EXECUTE ON FUNCTION ledger._post_entry(text, text, bytea, text, text, bigint[], "
        "bigint[], jsonb, bigint[]) TO mesa_app"
    )


def downgrade() -> None:
    raise NotImplementedError("0004 replaces function bodies only; migrate a fresh schema")
