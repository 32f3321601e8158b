CREATE OR REPLACE FUNCTION matchmaking.claim(p_player text, p_key text, p_op text, p_hash bytea, p_now bigint)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
    answer jsonb;
BEGIN
    INSERT INTO matchmaking.requests (player_id, idempotency_key, op, request_hash, created_ms)
    VALUES (p_player, p_key, p_op, p_hash, p_now) ON CONFLICT DO NOTHING;
    IF FOUND THEN
        RETURN NULL;
    END IF;
    -- The key is taken: the earlier request's replay or resume, as join reads it.
    answer := matchmaking.prior_request(p_player, p_key, p_op, p_hash);
    IF answer IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'MM503', MESSAGE = 'request_in_progress',
            DETAIL = 'the first request with this key is still running; retry';
    END IF;
    RETURN answer;
END
$function$;
