CREATE OR REPLACE FUNCTION ledger._hold_many(p_ops text[], p_args text[])
 RETURNS text[]
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_now timestamptz := now();
  v_slots int[];
  v_results text[];
BEGIN
  WITH x AS MATERIALIZED (
    SELECT u.slot::int AS slot, u.t::jsonb AS a
    FROM unnest(p_ops, p_args) WITH ORDINALITY AS u(op, t, slot)
    WHERE u.op = 'hold'
  ), f AS MATERIALIZED (
    -- well formed: a key, a hex hash, a player and a reservation as `hold` accepts them, a
    -- positive whole amount, a currency, a table (or null)
    SELECT x.slot, x.a->>0 AS key, decode(x.a->>1, 'hex') AS hash, x.a->>2 AS player,
           x.a->>3 AS reservation, (x.a->>4)::bigint AS amount, x.a->>5 AS currency,
           x.a->>6 AS tbl
    FROM x
    WHERE CASE WHEN jsonb_typeof(x.a) = 'array' THEN jsonb_array_length(x.a) END = 7
      AND jsonb_typeof(x.a->0) = 'string' AND length(x.a->>0) BETWEEN 1 AND 200
      AND jsonb_typeof(x.a->1) = 'string'
      AND jsonb_typeof(x.a->2) = 'string' AND length(x.a->>2) BETWEEN 1 AND 64
      AND (x.a->>2) ~ '^[A-Za-z0-9_.@:-]+$'
      AND jsonb_typeof(x.a->3) = 'string' AND length(x.a->>3) BETWEEN 1 AND 128
      AND (x.a->>3) ~ '^[A-Za-z0-9_.:-]+$'
      AND jsonb_typeof(x.a->4) = 'number' AND (x.a->>4) ~ '^[0-9]+$' AND length(x.a->>4) <= 18
      AND jsonb_typeof(x.a->5) = 'string' AND jsonb_typeof(x.a->6) IN ('string', 'null')
  ), c AS MATERIALIZED (
    -- the first hold of its key and of its reservation in the batch, a new key, a new
    -- reservation, the player's wallet in the hold's currency
    SELECT f.*, wa.id AS wallet
    FROM f
    JOIN ledger.accounts wa ON wa.code = 'wallet:' || f.player AND wa.currency = f.currency
    WHERE f.amount > 0
      AND NOT EXISTS (SELECT FROM f AS e WHERE e.slot < f.slot
                                         AND (e.key = f.key OR e.reservation = f.reservation))
      AND NOT EXISTS (SELECT FROM ledger.entries e WHERE e.idempotency_key = f.key)
      AND NOT EXISTS (SELECT FROM ledger.accounts h WHERE h.code = 'hold:' || f.reservation)
  ), l AS MATERIALIZED (
    -- the wallets, locked in ascending id (the one global order)
    SELECT id, code, balance, version, closed_at FROM ledger.accounts
    WHERE id = ANY(ARRAY(SELECT wallet FROM c))
    ORDER BY id FOR NO KEY UPDATE
  ), g AS MATERIALIZED (
    -- under the locks: an open wallet that can pay for all of its holds in the batch (if it
    -- cannot, they all go one at a time, which refuses the ones it cannot pay in order)
    SELECT c.slot, c.key, c.hash, c.player, c.reservation, c.amount, c.currency, c.tbl,
           c.wallet, l.code AS wallet_code, l.balance, l.version
    FROM (SELECT c.*, sum(c.amount) OVER (PARTITION BY c.wallet) AS total FROM c) c
    JOIN l ON l.id = c.wallet
    WHERE l.closed_at IS NULL AND c.total <= l.balance
  ), ids AS MATERIALIZED (
    -- entry ids in batch order (PostgreSQL evaluates a volatile output after the sort)
    SELECT g.slot, nextval('ledger.entries_id_seq') AS entry FROM g ORDER BY g.slot
  ), seq AS MATERIALIZED (
    -- each wallet's postings follow one another in batch order
    SELECT g.*, ids.entry, g.balance - sum(g.amount) OVER acc AS wallet_after,
           g.version + row_number() OVER acc AS wallet_version
    FROM g JOIN ids USING (slot) WINDOW acc AS (PARTITION BY g.wallet ORDER BY g.slot)
  ), docs AS MATERIALIZED (
    SELECT seq.*,
           jsonb_build_object(
             'entry_id', seq.entry, 'kind', 'hold', 'idempotency_key', seq.key,
             'match_id', NULL, 'reference', seq.tbl,
             'created_at', to_char(v_now AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
             'replayed', false,
             'postings', jsonb_build_array(
               jsonb_build_object('leg', 1, 'account', seq.wallet_code, 'amount', -seq.amount,
                                  'balance_after', seq.wallet_after,
                                  'version_after', seq.wallet_version),
               jsonb_build_object('leg', 2, 'account', 'hold:' || seq.reservation,
                                  'amount', seq.amount, 'balance_after', seq.amount,
                                  'version_after', 1)),
             'player', seq.player, 'reservation_id', seq.reservation,
             'hold_account', 'hold:' || seq.reservation) AS result
    FROM seq
  ), held AS (
    -- each hold account is created already holding its stake (its first posting)
    INSERT INTO ledger.accounts (code, kind, currency, player, reservation_id, match_id,
                                 balance, version)
    SELECT 'hold:' || docs.reservation, 'hold', docs.currency, docs.player, docs.reservation,
           docs.tbl, docs.amount, 1
    FROM docs
    RETURNING id, reservation_id
  ), moved AS (
    UPDATE ledger.accounts a SET balance = t.wallet_after, version = t.wallet_version
      FROM (SELECT DISTINCT ON (seq.wallet) seq.wallet, seq.wallet_after, seq.wallet_version
            FROM seq ORDER BY seq.wallet, seq.slot DESC) t
     WHERE a.id = t.wallet
  ), entered AS (
    INSERT INTO ledger.entries (id, kind, idempotency_key, request_hash, match_id, reference,
                                created_at, result)
    SELECT docs.entry, 'hold', docs.key, docs.hash, NULL, docs.tbl, v_now, docs.result
    FROM docs
  ), posted AS (
    INSERT INTO ledger.postings (entry_id, leg, account_id, amount, currency, balance_after,
                                 version_after)
    SELECT docs.entry, 1, docs.wallet, -docs.amount, docs.currency, docs.wallet_after,
           docs.wallet_version
    FROM docs
    UNION ALL
    SELECT docs.entry, 2, held.id, docs.amount, docs.currency, docs.amount, 1
    FROM docs JOIN held ON held.reservation_id = docs.reservation
  )
  SELECT array_agg(docs.slot), array_agg(docs.result::text) INTO v_slots, v_results FROM docs;
  RETURN ledger._in_slots(cardinality(p_ops), v_slots, v_results);
END $function$;
