CREATE OR REPLACE FUNCTION matchmaking.leave(p_player text, p_key text, p_hash bytea, p_table text, p_now bigint)
 RETURNS text
 LANGUAGE plpgsql
AS $function$
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
    WHERE table_id = p_table AND player_id = p_player AND (status IN ('pending', 'seated', 'staked') AND is_live);
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
$function$;
