CREATE OR REPLACE FUNCTION matchmaking.prior_request(p_player text, p_key text, p_op text, p_hash bytea)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
    prior matchmaking.requests%ROWTYPE;
BEGIN
    SELECT * INTO prior FROM matchmaking.requests
    WHERE player_id = p_player AND idempotency_key = p_key;
    IF NOT FOUND THEN
        RETURN NULL;
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
$function$;
