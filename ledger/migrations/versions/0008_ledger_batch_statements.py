"""Ledger: a batch's settlements, and its holds, are posted together: one statement each.

Inside `ledger.post_batch` every operation ran alone, in its own subtransaction, as some ten
statements (PL/pgSQL runs each through the executor: a plan-cache lookup, an executor start
and end, whatever the rows). Now the settlements of a batch that can be posted as they stand
are posted by one statement for all of them (`ledger._settle_many`): the candidates are read,
their accounts locked in ascending id, the pots split, and the entries, balances, postings and
pots written together; the holds likewise (`ledger._hold_many`). Measured on one connection,
round trip and commit included (docs/decisions/0002-ledger-batch-statements.md): a
settlement 0.57 -> 0.34 ms in batches of 8 and 0.45 -> 0.25 ms in batches of 16, a hold
0.23 -> 0.15 ms in batches of 16.

For a caller nothing changes but the order of operations within a batch that mixes kinds
(below): the same entries, postings, balances, result documents and refusals as the
one-at-a-time path, which the test suite checks operation by operation:

* **Only what is certain goes together.** An operation joins its statement only if its
  arguments are well formed, its key is new (and the first of its key, and of its match or
  reservation, in the batch), and under the row locks it can be posted as it stands: for a
  settlement an open, funded pot and winners who played the match, every account open and in
  the pot's currency; for a hold a new reservation and an open wallet in the hold's currency
  that can pay for every hold of the batch on it. Everything else (a replay, a reused key, a
  refusal of any kind) runs afterwards one at a time exactly as before, which gives its exact
  result or refusal.
* **A batch of one kind** (settlements only, or holds only) is locked by its statement, in
  ascending id, and goes through it only whole: if the statement leaves any operation, it is
  undone and every operation runs one at a time in batch order, exactly as before. Such a
  batch therefore gives what its operations give one at a time, in batch order.
* **Any other batch** locks every account of every operation first, in ascending id
  (`ledger._lock_batch`, the statement of 0005), then runs the statements, then the rest one
  at a time in batch order. The operations of one batch were all in flight at once, so any
  order among them is one their callers could have seen; this one puts the statements'
  operations first (entry ids, and each account's versions and balances after, follow it).
  Either way a batch never locks an account after a higher one, and batches cannot deadlock.
* **All or nothing.** Each statement runs in its own subtransaction: if it fails for any
  reason (a concurrent request with the same key, a malformed argument list), it leaves
  nothing and its operations run one at a time.

Revision ID: 0008_ledger_batch_statements
Revises: 0007_ledger_chain_horizon
Create Date: 2025-01-08
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic import op

revision = "0008_ledger_batch_statements"
down_revision = "0007_ledger_chain_horizon"
branch_labels = None
depends_on = None

CHAIN_LOCK_KEY = 0x4C454447  # as in 0001 and ledger/schema.py
COMMISSION_SHARDS = 16  # as in 0001
MAX_BATCH = 32  # as in 0005

IN_SLOTS = r"""
CREATE FUNCTION ledger._in_slots(p_n int, p_slots int[], p_results text[]) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE v_out text[] := array_fill(NULL::text, ARRAY[p_n]);
BEGIN
  -- a statement's answers in their operations' slots of the batch; NULL where it took none
  FOR i IN 1 .. coalesce(cardinality(p_slots), 0) LOOP
    v_out[p_slots[i]] := p_results[i];
  END LOOP;
  RETURN v_out;
END $$
"""

SETTLE_MANY = r"""
CREATE FUNCTION ledger._settle_many(p_ops text[], p_args text[]) RETURNS text[]
LANGUAGE plpgsql AS $$
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
      lpad((get_byte(sha256(convert_to(f.match, 'UTF8')), 0) % __SHARDS__)::text, 2, '0')
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
END $$
"""

HOLD_MANY = r"""
CREATE FUNCTION ledger._hold_many(p_ops text[], p_args text[]) RETURNS text[]
LANGUAGE plpgsql AS $$
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
END $$
"""

LOCK_BATCH = r"""
CREATE FUNCTION ledger._lock_batch(p_ops text[], p_args text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE v_ids bigint[];
BEGIN
  -- Every existing account of every operation, in ascending id: the batch takes its row
  -- locks in the one global order, as a single operation does, so batches cannot deadlock
  -- with each other or with single operations over accounts. (The operations' own _lock
  -- calls are then no-ops.) One statement for the whole batch: what each operation finds
  -- before its own _lock. A missing id costs no correctness, since each operation still
  -- locks what it posts to. (As in 0005.)
  v_ids := ARRAY(
  WITH x AS MATERIALIZED (
    SELECT u.op, u.a::jsonb AS a FROM unnest(p_ops, p_args) AS u(op, a)
  ), ids AS (
    SELECT w.id FROM x, LATERAL (
      SELECT id FROM ledger.accounts WHERE code = 'wallet:' || (x.a->>2)) w
    WHERE x.op = 'hold'
    UNION ALL
    SELECT v.id FROM x, LATERAL (
      SELECT h.id AS hold_id, w.id AS wallet_id FROM ledger.accounts h
      JOIN ledger.accounts w ON w.code = 'wallet:' || h.player
      WHERE h.code = 'hold:' || (x.a->>2)) hw, LATERAL (VALUES (hw.hold_id), (hw.wallet_id)) v(id)
    WHERE x.op = 'release'
    UNION ALL
    SELECT h.id FROM x, LATERAL (
      SELECT id FROM ledger.accounts
      WHERE code = ANY(ARRAY(SELECT 'hold:' || r FROM jsonb_array_elements_text(x.a->8) r))) h
    WHERE x.op = 'start'
    UNION ALL
    SELECT p.account_id FROM x, LATERAL (
      SELECT account_id FROM ledger.pots WHERE match_id = x.a->>2) p
    WHERE x.op IN ('settle', 'void')
    UNION ALL
    SELECT c.id FROM x, LATERAL (
      SELECT id FROM ledger.accounts
      WHERE code = 'house:commission:' ||
            lpad((get_byte(sha256(convert_to(x.a->>2, 'UTF8')), 0) % __SHARDS__)::text, 2, '0')) c
    WHERE x.op = 'settle'
    UNION ALL
    SELECT s.wallet_id FROM x, LATERAL (
      SELECT wallet_id, player FROM ledger.stakes WHERE match_id = x.a->>2) s
    WHERE x.op = 'void'
       OR (x.op = 'settle' AND s.player IN (SELECT jsonb_array_elements_text(x.a->3)))
  )
  SELECT id FROM ids);
  PERFORM 1 FROM ledger.accounts WHERE id = ANY(v_ids) ORDER BY id FOR NO KEY UPDATE;
END $$
"""

POST_BATCH = r"""
CREATE OR REPLACE FUNCTION ledger.post_batch(p_ops text[], p_args text[]) RETURNS text[]
LANGUAGE plpgsql AS $$
DECLARE
  v_n int := coalesce(cardinality(p_ops), 0);
  v_settles int;
  v_holds int;
  v_settled text[];
  v_held text[];
  v_out text[] := ARRAY[]::text[];
  v text;
  a jsonb;
  v_state text; v_message text; v_detail text;
BEGIN
  IF v_n <> coalesce(cardinality(p_args), 0) OR v_n > __MAX_BATCH__ THEN
    RAISE EXCEPTION USING ERRCODE = 'LD400', MESSAGE = 'invalid_batch',
      DETAIL = 'a batch is 0..__MAX_BATCH__ operations, one argument list each';
  END IF;
  -- The chain lock first, as every operation takes it before any row lock (see _begin).
  PERFORM pg_advisory_xact_lock_shared(__CHAIN_LOCK__);
  SELECT count(*) FILTER (WHERE o = 'settle'), count(*) FILTER (WHERE o = 'hold')
    INTO v_settles, v_holds
  FROM unnest(p_ops) o;
  IF v_settles >= 2 AND v_settles = v_n OR v_holds >= 2 AND v_holds = v_n THEN
    -- A batch of settlements only, or of holds only: one statement posts them all, locking
    -- their accounts in ascending id. Only if it takes every one of them: otherwise it is
    -- undone and they all run one at a time, in batch order, exactly as before (0005).
    BEGIN
      IF v_settles = v_n THEN
        v_settled := ledger._settle_many(p_ops, p_args);
      ELSE
        v_held := ledger._hold_many(p_ops, p_args);
      END IF;
      IF array_position(coalesce(v_settled, v_held), NULL) IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'LD100', MESSAGE = 'batch_not_whole';
      END IF;
      RETURN coalesce(v_settled, v_held);
    EXCEPTION WHEN OTHERS THEN
      v_settled := NULL;
      v_held := NULL;
      v_settles := 0;
      v_holds := 0;
    END;
  END IF;
  -- Every account of every operation, locked first in ascending id (0005). Then the
  -- settlements that can be posted as they stand, by one statement, and the holds likewise
  -- (each undone, and its operations left to run one at a time, if it fails); then the
  -- rest, one at a time, in batch order.
  PERFORM ledger._lock_batch(p_ops, p_args);
  IF v_settles >= 2 THEN
    BEGIN
      v_settled := ledger._settle_many(p_ops, p_args);
    EXCEPTION WHEN OTHERS THEN
      v_settled := NULL;
    END;
  END IF;
  IF v_holds >= 2 THEN
    BEGIN
      v_held := ledger._hold_many(p_ops, p_args);
    EXCEPTION WHEN OTHERS THEN
      v_held := NULL;
    END;
  END IF;
  FOR i IN 1 .. v_n LOOP
    v := coalesce(v_settled[i], v_held[i]);
    IF v IS NOT NULL THEN
      v_out := v_out || v;
      CONTINUE;
    END IF;
    BEGIN
      a := p_args[i]::jsonb;
      v := CASE p_ops[i]
        WHEN 'hold' THEN ledger.hold(a->>0, decode(a->>1, 'hex'), a->>2, a->>3,
                                     (a->>4)::bigint, a->>5, a->>6)
        WHEN 'release' THEN ledger.release(a->>0, decode(a->>1, 'hex'), a->>2)
        WHEN 'start' THEN ledger.start_match(
          a->>0, decode(a->>1, 'hex'), a->>2, a->>3, a->>4, a->>5,
          ARRAY(SELECT jsonb_array_elements_text(a->6)::int),
          ARRAY(SELECT jsonb_array_elements_text(a->7)),
          ARRAY(SELECT jsonb_array_elements_text(a->8)))
        WHEN 'settle' THEN ledger.settle_match(
          a->>0, decode(a->>1, 'hex'), a->>2,
          ARRAY(SELECT jsonb_array_elements_text(a->3)),
          ARRAY(SELECT jsonb_array_elements_text(a->4)::int),
          (a->>5)::int)
        WHEN 'void' THEN ledger.void_match(a->>0, decode(a->>1, 'hex'), a->>2, a->>3)
      END::text;
      IF v IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'LD400', MESSAGE = 'unknown_operation',
          DETAIL = format('no ledger operation %L', p_ops[i]);
      END IF;
    EXCEPTION WHEN OTHERS THEN
      GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT,
                              v_detail = PG_EXCEPTION_DETAIL;
      v := '!' || json_build_object('sqlstate', v_state, 'message', v_message,
                                    'detail', v_detail)::text;
    END;
    v_out := v_out || v;
  END LOOP;
  RETURN v_out;
END $$
"""


def _sql(text: str) -> str:
    return (
        text.replace("__MAX_BATCH__", str(MAX_BATCH))
        .replace("__CHAIN_LOCK__", str(CHAIN_LOCK_KEY))
        .replace("__SHARDS__", str(COMMISSION_SHARDS))
    )


def _migration_0005() -> ModuleType:
    path = Path(__file__).with_name("0005_ledger_post_batch.py")
    spec = importlib.util.spec_from_file_location("ledger_0005", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _post_batch_settings() -> None:
    # CREATE OR REPLACE resets a function's SET clauses: as in 0005, plan once per session
    op.execute(
        "ALTER FUNCTION ledger.post_batch(text[], text[]) SET plan_cache_mode = force_generic_plan"
    )


# the functions post_batch calls, each run as the service's role
HELPERS = (
    (IN_SLOTS, "_in_slots(int, int[], text[])"),
    (SETTLE_MANY, "_settle_many(text[], text[])"),
    (HOLD_MANY, "_hold_many(text[], text[])"),
    (LOCK_BATCH, "_lock_batch(text[], text[])"),
)


def upgrade() -> None:
    for sql, signature in HELPERS:
        op.execute(_sql(sql))
        op.execute(f"REVOKE ALL ON FUNCTION ledger.{signature} FROM PUBLIC")
        op.execute(f"GRANT EXECUTE ON FUNCTION ledger.{signature} TO mesa_app")
    op.execute(_sql(POST_BATCH))
    _post_batch_settings()


def downgrade() -> None:
    op.execute(
        _sql(_migration_0005().POST_BATCH).replace(
            "CREATE FUNCTION ledger.post_batch", "CREATE OR REPLACE FUNCTION ledger.post_batch"
        )
    )
    _post_batch_settings()
    for _, signature in reversed(HELPERS):
        op.execute(f"DROP FUNCTION ledger.{signature}")
