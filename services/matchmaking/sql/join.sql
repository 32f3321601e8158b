CREATE OR REPLACE FUNCTION matchmaking."join"(p_player text, p_key text, p_op text, p_hash bytea, p_players text[], p_kind text, p_tier text, p_invite_code text, p_new_table text, p_variant text, p_options jsonb, p_stake bigint, p_currency text, p_seat_count integer, p_pairs boolean, p_new_code text, p_reservation_ids text[], p_match text, p_now bigint, p_ttl_ms bigint, p_max_tables integer, p_candidates integer, p_unlisted boolean DEFAULT false)
 RETURNS text
 LANGUAGE plpgsql
AS $function$
DECLARE
    prior jsonb;
    most bigint;
    n int := cardinality(p_players);
    t matchmaking.tables%ROWTYPE;
    found_table boolean := false;
    occupied smallint[];
    occupants text[];
    seats smallint[];
    excluded text[] := '{}';
    attempt int;
    started boolean := false;
BEGIN
    prior := matchmaking.prior_request(p_player, p_key, p_op, p_hash);
    IF prior IS NOT NULL THEN
        RETURN prior::text;
    END IF;
    IF n NOT IN (1, 2) THEN
        RAISE EXCEPTION USING ERRCODE = 'MM400', MESSAGE = 'bad_players',
            DETAIL = 'a join seats one player or two partners';
    END IF;
    -- The players' waiting seats, read once: a count per player, and their tables
    -- are no candidates for the quick join (a waiting table has no 'staked' seat).
    SELECT greatest(count(*) FILTER (WHERE player_id = p_players[1]),
                    count(*) FILTER (WHERE player_id = p_players[2])),
           coalesce(array_agg(table_id), '{}')
    INTO most, excluded
    FROM matchmaking.reservations
    WHERE player_id IN (p_players[1], p_players[2])
      AND (status IN ('pending', 'seated') AND is_live);
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
        FROM matchmaking.reservations WHERE table_id = t.id AND (status IN ('pending', 'seated', 'staked') AND is_live);
        IF coalesce(occupants, '{}') && p_players THEN
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
              AND NOT x.private AND NOT x.vs_cpu AND x.taken <= p_seat_count - n
              AND x.id <> ALL (excluded)
            ORDER BY x.taken DESC, x.created_ms LIMIT 1
            FOR UPDATE SKIP LOCKED;
            EXIT WHEN NOT FOUND;
            SELECT array_agg(seat), array_agg(player_id) INTO occupied, occupants
            FROM matchmaking.reservations WHERE table_id = t.id AND (status IN ('pending', 'seated', 'staked') AND is_live);
            IF NOT (coalesce(occupants, '{}') && p_players) THEN
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
            seat_count, pairs, private, unlisted, vs_cpu, invite_code, status, taken,
            created_ms, updated_ms)
        VALUES (p_new_table, p_kind, p_tier, p_variant, p_options, p_stake, p_currency,
            p_seat_count, p_pairs, p_op = 'private', p_unlisted, p_op = 'cpu', p_new_code,
            'waiting', 0, p_now, p_now)
        RETURNING * INTO t;
        seats := CASE WHEN n = 2 THEN ARRAY[0, 2]::smallint[] ELSE ARRAY[0]::smallint[] END;
    END IF;

    INSERT INTO matchmaking.reservations (id, table_id, seat, player_id, status, stake_cents,
        created_ms, expires_ms, updated_ms)
    SELECT p_reservation_ids[i], t.id, seats[i], p_players[i],
           CASE WHEN t.stake_cents > 0 THEN 'pending' ELSE 'seated' END, t.stake_cents,
           p_now, p_now + p_ttl_ms, p_now
    FROM generate_subscripts(p_players, 1) AS i;
    -- A player who sits only with random opponents takes the table out of the lobby's list.
    UPDATE matchmaking.tables SET taken = taken + n, updated_ms = p_now,
        unlisted = unlisted OR p_unlisted
    WHERE id = t.id;
    INSERT INTO matchmaking.requests (player_id, idempotency_key, op, request_hash,
        created_ms, table_id, reservation_ids)
    VALUES (p_player, p_key, p_op, p_hash, p_now, t.id, p_reservation_ids);
    -- A free seat needs no hold: the seat that fills a free table starts it here.
    IF t.stake_cents = 0 THEN
        started := matchmaking.start_if_full(t.id, p_match, p_now);
    END IF;
    IF t.stake_cents > 0 THEN
        -- Holds and then confirm follow (confirm answers the table): only the seats here.
        RETURN jsonb_build_object('table_id', t.id, 'stake_cents', t.stake_cents,
                                  'seats', to_jsonb(seats))::text;
    END IF;
    RETURN jsonb_build_object('table', matchmaking.table_json(t.id), 'start', started)::text;
END
$function$;
