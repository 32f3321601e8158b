CREATE OR REPLACE FUNCTION matchmaking.mark_started(p_table text, p_match text, p_status text, p_now bigint)
 RETURNS text
 LANGUAGE plpgsql
AS $function$
BEGIN
    UPDATE matchmaking.tables SET status = p_status, updated_ms = p_now,
        started_ms = coalesce(started_ms, p_now)
    WHERE id = p_table AND match_id = p_match AND status IN ('starting', 'started');
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    UPDATE matchmaking.reservations SET status = 'staked', updated_ms = p_now
    WHERE table_id = p_table AND status = 'seated' AND is_live;
    -- Asynchronous commit: if lost, the sweeper repeats the idempotent start.
    PERFORM set_config('synchronous_commit', 'off', true);
    RETURN matchmaking.table_json(p_table)::text;
END
$function$;
