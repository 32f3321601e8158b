CREATE OR REPLACE FUNCTION matchmaking.table_json(p_table text)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
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
                           WHERE r.table_id = t.id AND (r.status IN ('pending', 'seated', 'staked') AND r.is_live)), '[]'::jsonb))
    FROM matchmaking.tables t WHERE t.id = p_table
$function$;
