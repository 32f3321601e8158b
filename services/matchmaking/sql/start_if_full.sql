CREATE OR REPLACE FUNCTION matchmaking.start_if_full(p_table text, p_match text, p_now bigint)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
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
    FROM matchmaking.reservations r WHERE r.table_id = p_table AND (r.status IN ('pending', 'seated', 'staked') AND r.is_live);
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
        WHERE table_id = p_table AND status = 'seated' AND is_live;
    END IF;
    RETURN true;
END
$function$;
