CREATE OR REPLACE FUNCTION matchmaking.choose_seats(p_seat_count integer, p_occupied smallint[], p_n integer)
 RETURNS smallint[]
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
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
$function$;
