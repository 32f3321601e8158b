CREATE OR REPLACE FUNCTION ledger._settle_many(p_ops text[], p_args text[])
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
    WHERE u.op = 'settle'
  ), f AS MATERIALIZED (
    -- well formed: a key, a hex hash, a match, one or more winners with as many shares, a rate
    SELECT x.slot, x.a->>0 AS key, decode(x.a->>1, 'hex') AS hash, x.a->>2 AS match,
           x.a->3 AS winners, x.a->4 AS shares, (x.a->>5)::int AS rate
    FROM x
    WHERE CASE WHEN jsonb_typeof(x.a) = 'array' THEN jsonb_array_length(x.a) END = 6
      AND jsonb_typeof(x.a->0) = 'string' AND length(x.a->>0) BETWEEN 1 AND 200
      AND jsonb_typeof(x.a->1) = 'string' AND jsonb_typeof(x.a->2) = 'string'
      AND CASE WHEN jsonb_typeof(x.a->3) = 'array' AND jsonb_typeof(x.a->4) = 'array'
               THEN jsonb_array_length(x.a->3) >= 1
                    AND jsonb_array_length(x.a->3) = jsonb_array_length(x.a->4) END
      -- (a plain integer; `+` rather than a bounded repetition, which costs far more to match)
      AND jsonb_typeof(x.a->5) = 'number' AND (x.a->>5) ~ '^[0-9]+$' AND length(x.a->>5) <= 5
  ), c AS MATERIALIZED (
    -- the first settlement of its key and of its match in the batch, a new key, an open pot
    SELECT f.*, pt.account_id AS pot, sh.id AS shard
    FROM f
    JOIN ledger.pots pt ON pt.match_id = f.match AND pt.status = 'open'
    JOIN ledger.accounts sh ON sh.code = 'house:commission:' ||
      lpad((get_byte(sha256(convert_to(f.match, 'UTF8')), 0) % 16)::text, 2, '0')
    WHERE f.rate BETWEEN 0 AND 10000
      AND NOT EXISTS (SELECT FROM f AS e WHERE e.slot < f.slot
                                         AND (e.key = f.key OR e.match = f.match))
      AND NOT EXISTS (SELECT FROM ledger.entries e WHERE e.idempotency_key = f.key)
  ), w AS MATERIALIZED (
    -- the winners, each with its stake (seat order: the odd cent goes to the lower seat)
    SELECT c.slot, d.player, d.share, s.seat, s.wallet_id
    FROM c
    CROSS JOIN LATERAL (
      SELECT p.value #>> '{}' AS player,
             CASE WHEN jsonb_typeof(sv.value) = 'number' AND (sv.value #>> '{}') ~ '^[0-9]+$'
                       AND length(sv.value #>> '{}') <= 9
                  THEN (sv.value #>> '{}')::int END AS share
      FROM jsonb_array_elements(c.winners) WITH ORDINALITY AS p(value, ord)
      JOIN jsonb_array_elements(c.shares) WITH ORDINALITY AS sv(value, ord) USING (ord)
      WHERE jsonb_typeof(p.value) = 'string'
    ) d
    LEFT JOIN ledger.stakes s ON s.match_id = c.match AND s.player = d.player
  ), ok AS MATERIALIZED (
    -- every winner named once, played the match and has a positive share
    SELECT c.* FROM c
    WHERE (SELECT count(DISTINCT w.player) FILTER (WHERE w.wallet_id IS NOT NULL AND w.share > 0)
           FROM w WHERE w.slot = c.slot) = jsonb_array_length(c.winners)
  ), l AS MATERIALIZED (
    -- every account the settlements post to, locked in ascending id (the one global order)
    SELECT id, code, currency, balance, version, closed_at FROM ledger.accounts
    WHERE id = ANY(ARRAY(SELECT pot FROM ok UNION SELECT shard FROM ok
                         UNION SELECT w.wallet_id FROM w JOIN ok USING (slot)))
    ORDER BY id FOR NO KEY UPDATE
  ), g AS MATERIALIZED (
    -- under the locks: the pot open and funded, every account open and in its currency;
    -- the split as split_pot makes it (commission first, then the winners in seat order)
    SELECT ok.slot, ok.key, ok.hash, ok.match, ok.rate, ok.pot, ok.shard, pb.balance AS pot_balance,
           ws.players, ws.wallets,
           CASE WHEN cardinality(ws.shares) = 1
                THEN ARRAY[(pb.balance * ok.rate) / 10000,
                           pb.balance - (pb.balance * ok.rate) / 10000]
                ELSE ledger.split_pot(pb.balance, ok.rate, ws.shares) END AS split
    FROM ok
    JOIN l pb ON pb.id = ok.pot
    JOIN l sh ON sh.id = ok.shard
    CROSS JOIN LATERAL (
      SELECT array_agg(w.player ORDER BY w.seat) AS players,
             array_agg(w.wallet_id ORDER BY w.seat) AS wallets,
             array_agg(w.share ORDER BY w.seat) AS shares,
             count(*) = jsonb_array_length(ok.winners)
               AND bool_and(lw.closed_at IS NULL AND lw.currency = pb.currency) AS wallets_fine
      FROM w JOIN l lw ON lw.id = w.wallet_id WHERE w.slot = ok.slot
    ) ws
    WHERE pb.closed_at IS NULL AND pb.balance > 0
      AND sh.closed_at IS NULL AND sh.currency = pb.currency AND ws.wallets_fine
  ), ids AS MATERIALIZED (
    -- entry ids in batch order (PostgreSQL evaluates a volatile output after the sort)
    SELECT g.slot, nextval('ledger.entries_id_seq') AS entry FROM g ORDER BY g.slot
  ), legs AS MATERIALIZED (
    -- the pot, then the commission and each winner's payout unless zero, numbered in order
    SELECT v.slot, v.account, v.amount,
           row_number() OVER (PARTITION BY v.slot ORDER BY v.k)::smallint AS leg
    FROM (
      SELECT g.slot, 0 AS k, g.pot AS account, -g.pot_balance AS amount FROM g
      UNION ALL
      SELECT g.slot, 1, g.shard, g.split[1] FROM g WHERE g.split[1] > 0
      UNION ALL
      SELECT g.slot, 1 + i, g.wallets[i], g.split[i + 1]
      FROM g, generate_subscripts(g.wallets, 1) AS i WHERE g.split[i + 1] > 0
    ) v
  ), seq AS MATERIALIZED (
    -- each account's postings follow one another in batch order
    SELECT legs.slot, legs.leg, legs.account, legs.amount, l.code, l.currency,
           l.balance + sum(legs.amount) OVER acc AS balance_after,
           l.version + row_number() OVER acc AS version_after
    FROM legs JOIN l ON l.id = legs.account
    WINDOW acc AS (PARTITION BY legs.account ORDER BY legs.slot, legs.leg)
  ), docs AS MATERIALIZED (
    SELECT g.slot, ids.entry, g.key, g.hash, g.match, g.shard, g.rate, g.split,
           jsonb_build_object(
             'entry_id', ids.entry, 'kind', 'settle', 'idempotency_key', g.key,
             'match_id', g.match, 'reference', NULL,
             'created_at', to_char(v_now AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
             'replayed', false,
             'postings', (SELECT jsonb_agg(jsonb_build_object(
                            'leg', seq.leg, 'account', seq.code, 'amount', seq.amount,
                            'balance_after', seq.balance_after,
                            'version_after', seq.version_after) ORDER BY seq.leg)
                          FROM seq WHERE seq.slot = g.slot),
             'pot', g.pot_balance, 'commission', g.split[1], 'commission_rate_bp', g.rate,
             'payouts', (SELECT jsonb_agg(jsonb_build_object('player', g.players[i],
                                                             'amount', g.split[i + 1])
                                          ORDER BY i)
                         FROM generate_subscripts(g.players, 1) AS i)) AS result
    FROM g JOIN ids USING (slot)
  ), moved AS (
    UPDATE ledger.accounts a
       SET balance = t.balance_after, version = t.version_after,
           closed_at = CASE WHEN t.closes THEN v_now ELSE a.closed_at END
      FROM (SELECT DISTINCT ON (seq.account) seq.account, seq.balance_after, seq.version_after,
                   seq.leg = 1 AS closes
            FROM seq ORDER BY seq.account, seq.slot DESC, seq.leg DESC) t
     WHERE a.id = t.account
  ), entered AS (
    INSERT INTO ledger.entries (id, kind, idempotency_key, request_hash, match_id, reference,
                                created_at, result)
    SELECT docs.entry, 'settle', docs.key, docs.hash, docs.match, NULL, v_now, docs.result
    FROM docs ORDER BY docs.entry
  ), posted AS (
    INSERT INTO ledger.postings (entry_id, leg, account_id, amount, currency, balance_after,
                                 version_after)
    SELECT ids.entry, seq.leg, seq.account, seq.amount, seq.currency, seq.balance_after,
           seq.version_after
    FROM seq JOIN ids USING (slot)
  ), closed AS (
    UPDATE ledger.pots pt
       SET status = 'settled', close_entry_id = docs.entry, commission_rate_bp = docs.rate,
           commission = docs.split[1], commission_account_id = docs.shard, closed_at = v_now
      FROM docs
     WHERE pt.match_id = docs.match
  )
  SELECT array_agg(docs.slot), array_agg(docs.result::text) INTO v_slots, v_results FROM docs;
  RETURN ledger._in_slots(cardinality(p_ops), v_slots, v_results);
END $function$;
