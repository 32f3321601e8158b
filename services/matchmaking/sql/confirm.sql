CREATE OR REPLACE FUNCTION matchmaking.confirm(p_table text, p_ids text[], p_match text, p_now bigint)
 RETURNS text
 LANGUAGE plpgsql
AS $function$
DECLARE
    t matchmaking.tables%ROWTYPE;
    mine int := 0;
    rid text;
    live int;
    seated int;
    started boolean := false;
BEGIN
    SELECT * INTO t FROM matchmaking.tables WHERE id = p_table FOR UPDATE;
    FOREACH rid IN ARRAY p_ids LOOP
        UPDATE matchmaking.reservations SET status = 'seated'
        WHERE id = rid AND status = 'pending';
        IF NOT FOUND THEN
            PERFORM 1 FROM matchmaking.reservations WHERE id = rid AND (status IN ('pending', 'seated', 'staked') AND is_live);
        END IF;
        IF FOUND THEN
            mine := mine + 1;
        END IF;
    END LOOP;
    -- `taken` counts the live seats under this lock: below the seat count the table cannot
    -- be full, and the seats need not be counted (a CPU table starts with free seats).
    IF mine = cardinality(p_ids) AND t.status = 'waiting'
       AND (t.taken >= t.seat_count OR t.vs_cpu) THEN
        SELECT count(*), count(*) FILTER (WHERE r.status = 'seated') INTO live, seated
        FROM matchmaking.reservations r WHERE r.table_id = p_table AND (r.status IN ('pending', 'seated', 'staked') AND r.is_live);
        IF live > 0 AND seated = live AND (live = t.seat_count OR t.vs_cpu) THEN
            IF t.stake_cents > 0 THEN
                UPDATE matchmaking.tables SET status = 'starting', match_id = p_match,
                    updated_ms = p_now
                WHERE id = p_table;
            ELSE
                UPDATE matchmaking.tables SET status = 'started', match_id = p_match,
                    updated_ms = p_now, started_ms = p_now
                WHERE id = p_table;
                UPDATE matchmaking.reservations SET status = 'staked', updated_ms = p_now
                WHERE table_id = p_table AND status = 'seated' AND is_live;
            END IF;
            started := true;
        END IF;
    END IF;
    -- A confirm that starts nothing may be lost in a crash (asynchronous commit): the
    -- sweeper repairs it (docs/explanation/matchmaking.md).
    IF NOT started THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    RETURN jsonb_build_object('table', matchmaking.table_json(p_table), 'start', started,
                              'gone', mine < cardinality(p_ids))::text;
END
$function$;
