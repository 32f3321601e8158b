"""matchmaking: one function call (one round trip, one commit) per join, confirm, start and leave

Revision ID: mm0004
Revises: mm0003
Create Date: 2026-11-29

Each function runs as one autocommit statement, so its table row lock lasts only as long as
the function itself (no lock held across client round trips). Refusals are raised with a
SQLSTATE 'MM<http status>', the machine-readable code as the message and a text as the detail;
the statement then changes nothing (the idempotency key is not kept either).
"""

from __future__ import annotations

from alembic import op

revision = "mm0004"
down_revision = "mm0003"
branch_labels = None
depends_on = None

LIVE = "('pending', 'seated', 'staked')"

TABLE_JSON = f"""
CREATE FUNCTION matchmaking.table_json(p_table text) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', t.id, 'kind', t.kind, 'tier', t.tier, 'variant', t.variant,
        'stake_cents', t.stake_cents, 'currency', rtrim(t.currency), 'seat_count', t.seat_count,
        'pairs', t.pairs, 'private', t.private, 'vs_cpu', t.vs_cpu,
        'invite_code', t.invite_code, 'status', t.status, 'match_id', t.match_id,
        'created_ms', t.created_ms, 'started_ms', t.started_ms,
        'seats', coalesce((SELECT jsonb_agg(jsonb_build_array(r.seat, r.player_id, r.status,
                                                              r.id, r.expires_ms)
                                            ORDER BY r.seat)
                           FROM matchmaking.reservations r
                           WHERE r.table_id = t.id AND r.status IN {LIVE}), '[]'::jsonb))
    FROM matchmaking.tables t WHERE t.id = p_table
$$
"""

# Seats for 1 player (the lowest free seat) or 2 partners (a free seat and the one across).
CHOOSE_SEATS = """
CREATE FUNCTION matchmaking.choose_seats(p_seat_count int, p_occupied smallint[], p_n int)
RETURNS smallint[] LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    s int;
    across int;
    occupied smallint[] := coalesce(p_occupied, '{}');
BEGIN
    FOR s IN 0 .. p_seat_count - 1 LOOP
        CONTINUE WHEN s = ANY (occupied);
        IF p_n = 1 THEN
            RETURN ARRAY[s]::smallint[];
        END IF;
        across := (s + 2) % p_seat_count;
        IF across <> s AND NOT (across = ANY (occupied)) THEN
            RETURN ARRAY[s, across]::smallint[];
        END IF;
    END LOOP;
    RETURN NULL;
END
$$
"""

# Claim the idempotency key. Returns NULL when the key is new (claimed now), else a JSON
# document answering the earlier request (a stored answer or the reservations to resume).
CLAIM = """
CREATE FUNCTION matchmaking.claim(p_player text, p_key text, p_op text, p_hash bytea,
                                  p_now bigint)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    prior matchmaking.requests%ROWTYPE;
BEGIN
    INSERT INTO matchmaking.requests (player_id, idempotency_key, op, request_hash, created_ms)
    VALUES (p_player, p_key, p_op, p_hash, p_now) ON CONFLICT DO NOTHING;
    IF FOUND THEN
        RETURN NULL;
    END IF;
    SELECT * INTO prior FROM matchmaking.requests
    WHERE player_id = p_player AND idempotency_key = p_key;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'MM503', MESSAGE = 'request_in_progress',
            DETAIL = 'the first request with this key is still running; retry';
    END IF;
    IF prior.op <> p_op OR prior.request_hash <> p_hash THEN
        RAISE EXCEPTION USING ERRCODE = 'MM409', MESSAGE = 'idempotency_key_reused',
            DETAIL = 'this idempotency key was used for another request';
    END IF;
    IF prior.response IS NOT NULL THEN
        RETURN jsonb_build_object('replay', prior.response_status,
                                  'body', convert_from(prior.response, 'UTF8'));
    END IF;
    IF prior.reservation_ids IS NOT NULL THEN
        RETURN jsonb_build_object('resume', to_jsonb(prior.reservation_ids),
                                  'table_id', prior.table_id);
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'MM503', MESSAGE = 'request_in_progress',
        DETAIL = 'the first request with this key is still running; retry';
END
$$
"""

# Mark a full table whose seats are all held as starting (paid) or started (free, seats
# staked at once). The caller holds the table row lock. True when it started.
START_IF_FULL = f"""
CREATE FUNCTION matchmaking.start_if_full(p_table text, p_match text, p_now bigint)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    t matchmaking.tables%ROWTYPE;
    live int;
    seated int;
BEGIN
    SELECT * INTO t FROM matchmaking.tables WHERE id = p_table;
    IF t.status <> 'waiting' THEN
        RETURN false;
    END IF;
    SELECT count(*), count(*) FILTER (WHERE r.status = 'seated') INTO live, seated
    FROM matchmaking.reservations r WHERE r.table_id = p_table AND r.status IN {LIVE};
    IF live = 0 OR seated <> live OR NOT (live = t.seat_count OR t.vs_cpu) THEN
        RETURN false;
    END IF;
    IF t.stake_cents > 0 THEN
        UPDATE matchmaking.tables SET status = 'starting', match_id = p_match, updated_ms = p_now
        WHERE id = p_table;
    ELSE
        UPDATE matchmaking.tables SET status = 'started', match_id = p_match, updated_ms = p_now,
            started_ms = p_now WHERE id = p_table;
        UPDATE matchmaking.reservations SET status = 'staked', updated_ms = p_now
        WHERE table_id = p_table AND status = 'seated';
    END IF;
    RETURN true;
END
$$
"""

JOIN = f"""
CREATE FUNCTION matchmaking.join(
    p_player text, p_key text, p_op text, p_hash bytea, p_players text[],
    p_kind text, p_tier text, p_invite_code text,
    p_new_table text, p_variant text, p_options jsonb, p_stake bigint, p_currency text,
    p_seat_count int, p_pairs boolean, p_new_code text,
    p_reservation_ids text[], p_match text, p_now bigint, p_ttl_ms bigint,
    p_max_tables int, p_candidates int)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    prior jsonb;
    most bigint;
    n int := cardinality(p_players);
    t matchmaking.tables%ROWTYPE;
    found_table boolean := false;
    occupied smallint[];
    occupants text[];
    seats smallint[];
    excluded text[] := '{{}}';
    attempt int;
    started boolean := false;
BEGIN
    prior := matchmaking.claim(p_player, p_key, p_op, p_hash, p_now);
    IF prior IS NOT NULL THEN
        RETURN prior::text;
    END IF;
    SELECT coalesce(max(c), 0) INTO most FROM (
        SELECT count(*) AS c FROM matchmaking.reservations
        WHERE player_id = ANY (p_players) AND status IN ('pending', 'seated')
        GROUP BY player_id) x;
    IF most >= p_max_tables THEN
        RAISE EXCEPTION USING ERRCODE = 'MM409', MESSAGE = 'too_many_tables',
            DETAIL = format('already sitting at %s waiting tables', most);
    END IF;

    IF p_op = 'code' THEN
        SELECT * INTO t FROM matchmaking.tables WHERE invite_code = p_invite_code FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'MM404', MESSAGE = 'invite_not_found',
                DETAIL = 'no table has this invite code';
        END IF;
        IF t.status <> 'waiting' THEN
            RAISE EXCEPTION USING ERRCODE = 'MM409', MESSAGE = 'table_started',
                DETAIL = 'this table''s match has started';
        END IF;
        SELECT array_agg(seat), array_agg(player_id) INTO occupied, occupants
        FROM matchmaking.reservations WHERE table_id = t.id AND status IN {LIVE};
        IF coalesce(occupants, '{{}}') && p_players THEN
            RAISE EXCEPTION USING ERRCODE = 'MM409', MESSAGE = 'already_seated',
                DETAIL = 'the player already sits at this table';
        END IF;
        IF n = 2 AND NOT t.pairs THEN
            RAISE EXCEPTION USING ERRCODE = 'MM400', MESSAGE = 'partner_not_pairs',
                DETAIL = 'partners can only sit at a pairs table';
        END IF;
        seats := matchmaking.choose_seats(t.seat_count, occupied, n);
        IF seats IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'MM409', MESSAGE = 'table_full',
                DETAIL = 'no free seat (or no two seats across) at this table';
        END IF;
        found_table := true;
    ELSIF p_op = 'quick' THEN
        -- SKIP LOCKED: joiners spread over the fullest tables nobody else is changing right
        -- now instead of queueing on one row; the lock lasts only this statement.
        FOR attempt IN 1 .. p_candidates LOOP
            SELECT * INTO t FROM matchmaking.tables x
            WHERE x.kind = p_kind AND x.tier = p_tier AND x.status = 'waiting'
              AND NOT x.private AND NOT x.vs_cpu AND x.taken <= x.seat_count - n
              AND x.id <> ALL (excluded)
              AND NOT EXISTS (SELECT 1 FROM matchmaking.reservations r
                              WHERE r.table_id = x.id AND r.player_id = ANY (p_players)
                                AND r.status IN {LIVE})
            ORDER BY x.taken DESC, x.created_ms LIMIT 1
            FOR UPDATE SKIP LOCKED;
            EXIT WHEN NOT FOUND;
            SELECT array_agg(seat), array_agg(player_id) INTO occupied, occupants
            FROM matchmaking.reservations WHERE table_id = t.id AND status IN {LIVE};
            IF NOT (coalesce(occupants, '{{}}') && p_players) THEN
                seats := matchmaking.choose_seats(t.seat_count, occupied, n);
                IF seats IS NOT NULL THEN
                    found_table := true;
                    EXIT;
                END IF;
            END IF;
            excluded := excluded || t.id;
        END LOOP;
    END IF;

    IF NOT found_table THEN
        INSERT INTO matchmaking.tables (id, kind, tier, variant, options, stake_cents, currency,
            seat_count, pairs, private, vs_cpu, invite_code, status, taken, created_ms,
            updated_ms)
        VALUES (p_new_table, p_kind, p_tier, p_variant, p_options, p_stake, p_currency,
            p_seat_count, p_pairs, p_op = 'private', p_op = 'cpu', p_new_code, 'waiting', 0,
            p_now, p_now)
        RETURNING * INTO t;
        seats := CASE WHEN n = 2 THEN ARRAY[0, 2]::smallint[] ELSE ARRAY[0]::smallint[] END;
    END IF;

    INSERT INTO matchmaking.reservations (id, table_id, seat, player_id, status, stake_cents,
        created_ms, expires_ms, updated_ms)
    SELECT p_reservation_ids[i], t.id, seats[i], p_players[i],
           CASE WHEN t.stake_cents > 0 THEN 'pending' ELSE 'seated' END, t.stake_cents,
           p_now, p_now + p_ttl_ms, p_now
    FROM generate_subscripts(p_players, 1) AS i;
    UPDATE matchmaking.tables SET taken = taken + n, updated_ms = p_now WHERE id = t.id;
    UPDATE matchmaking.requests SET table_id = t.id, reservation_ids = p_reservation_ids
    WHERE player_id = p_player AND idempotency_key = p_key;
    -- A free seat needs no hold: the seat that fills a free table starts it here.
    IF t.stake_cents = 0 THEN
        started := matchmaking.start_if_full(t.id, p_match, p_now);
    END IF;
    RETURN jsonb_build_object('table', matchmaking.table_json(t.id), 'start', started)::text;
END
$$
"""

# The holds of a join's pending seats are placed: mark them seated and, when that fills the
# table, start it, under the table lock (two last seats confirmed at once serialize here, so
# the later one sees both seated). `gone` says a seat of this join was settled elsewhere.
CONFIRM = f"""
CREATE FUNCTION matchmaking.confirm(p_table text, p_ids text[], p_match text, p_now bigint)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    mine int;
    started boolean := false;
BEGIN
    PERFORM 1 FROM matchmaking.tables WHERE id = p_table FOR UPDATE;
    UPDATE matchmaking.reservations SET status = 'seated', updated_ms = p_now
    WHERE id = ANY (p_ids) AND status = 'pending';
    SELECT count(*) INTO mine FROM matchmaking.reservations
    WHERE id = ANY (p_ids) AND status IN {LIVE};
    IF mine = cardinality(p_ids) THEN
        started := matchmaking.start_if_full(p_table, p_match, p_now);
    END IF;
    RETURN jsonb_build_object('table', matchmaking.table_json(p_table), 'start', started,
                              'gone', mine < cardinality(p_ids))::text;
END
$$
"""

# The pot exists (or the table is free): 'starting' -> p_status ('started' or 'playing'),
# seats staked. Returns the table, or NULL when the table was not in that match's start.
MARK_STARTED = """
CREATE FUNCTION matchmaking.mark_started(p_table text, p_match text, p_status text,
                                         p_now bigint)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    UPDATE matchmaking.tables SET status = p_status, updated_ms = p_now,
        started_ms = coalesce(started_ms, p_now)
    WHERE id = p_table AND match_id = p_match AND status IN ('starting', 'started');
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    UPDATE matchmaking.reservations SET status = 'staked', updated_ms = p_now
    WHERE table_id = p_table AND status = 'seated';
    RETURN matchmaking.table_json(p_table)::text;
END
$$
"""

LEAVE = f"""
CREATE FUNCTION matchmaking.leave(p_player text, p_key text, p_hash bytea, p_table text,
                                  p_now bigint)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    prior jsonb;
    t matchmaking.tables%ROWTYPE;
    r matchmaking.reservations%ROWTYPE;
BEGIN
    prior := matchmaking.claim(p_player, p_key, 'leave', p_hash, p_now);
    IF prior IS NOT NULL THEN
        RETURN prior::text;
    END IF;
    SELECT * INTO t FROM matchmaking.tables WHERE id = p_table FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'MM404', MESSAGE = 'table_not_found',
            DETAIL = format('no table %s', p_table);
    END IF;
    SELECT * INTO r FROM matchmaking.reservations
    WHERE table_id = p_table AND player_id = p_player AND status IN {LIVE};
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'MM404', MESSAGE = 'not_seated',
            DETAIL = 'the player has no seat at this table';
    END IF;
    IF t.status <> 'waiting' OR r.status = 'staked' THEN
        RAISE EXCEPTION USING ERRCODE = 'MM409', MESSAGE = 'table_started',
            DETAIL = 'the match has started; the seat is staked';
    END IF;
    IF r.status = 'pending' THEN
        RAISE EXCEPTION USING ERRCODE = 'MM409', MESSAGE = 'reservation_pending',
            DETAIL = 'the seat''s hold is being placed; retry';
    END IF;
    UPDATE matchmaking.reservations
    SET status = CASE WHEN stake_cents > 0 THEN 'releasing' ELSE 'released' END,
        reason = 'left', updated_ms = p_now
    WHERE id = r.id;
    UPDATE matchmaking.tables SET taken = taken - 1, updated_ms = p_now WHERE id = p_table;
    -- A retry with this key finishes the same release (see matchmaking.claim).
    UPDATE matchmaking.requests SET table_id = p_table, reservation_ids = ARRAY[r.id]
    WHERE player_id = p_player AND idempotency_key = p_key;
    RETURN jsonb_build_object('reservation_id', r.id, 'stake_cents', r.stake_cents)::text;
END
$$
"""

FUNCTIONS = {
    "table_json(text)": TABLE_JSON,
    "choose_seats(int, smallint[], int)": CHOOSE_SEATS,
    "claim(text, text, text, bytea, bigint)": CLAIM,
    "start_if_full(text, text, bigint)": START_IF_FULL,
    "join(text, text, text, bytea, text[], text, text, text, text, text, jsonb, bigint, text, "
    "int, boolean, text, text[], text, bigint, bigint, int, int)": JOIN,
    "confirm(text, text[], text, bigint)": CONFIRM,
    "mark_started(text, text, text, bigint)": MARK_STARTED,
    "leave(text, text, bytea, text, bigint)": LEAVE,
}


def upgrade() -> None:
    for signature, body in FUNCTIONS.items():
        op.execute(body)
        op.execute(f"GRANT EXECUTE ON FUNCTION matchmaking.{signature} TO mesa_app")


def downgrade() -> None:
    for signature in reversed(FUNCTIONS):
        op.execute(f"DROP FUNCTION matchmaking.{signature}")
