CREATE OR REPLACE FUNCTION fairness.append_leaves(p_types text[], p_datas bytea[], p_deal_ids text[], p_commitments text[], p_new_key_ids text[], p_new_public_keys bytea[])
 RETURNS TABLE(out_index bigint, out_size bigint, out_root bytea)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    n integer := coalesce(cardinality(p_datas), 0);
    head_size bigint;
    fr bytea[];
    logged text;
    lh bytea;
    h bytea;
    r bytea;
    s bigint;
    lvl integer;
    j integer;
    node_levels smallint[] := '{}';
    node_idxs bigint[] := '{}';
    node_hashes bytea[] := '{}';
BEGIN
    -- a batch is bounded (the engine sends at most 64 records)
    IF n < 1 OR n > 1024 THEN
        RAISE EXCEPTION USING ERRCODE = 'FL400', MESSAGE = 'bad_batch',
            DETAIL = format('a batch holds 1 to 1024 records, not %s', n);
    END IF;
    IF array_ndims(p_datas) <> 1 OR array_lower(p_datas, 1) <> 1
       OR coalesce(cardinality(p_types), -1) <> n
       OR coalesce(cardinality(p_deal_ids), -1) <> n
       OR coalesce(cardinality(p_commitments), -1) <> n
       OR coalesce(cardinality(p_new_key_ids), -1) <> n
       OR coalesce(cardinality(p_new_public_keys), -1) <> n
       OR array_lower(p_types, 1) <> 1 OR array_lower(p_deal_ids, 1) <> 1
       OR array_lower(p_commitments, 1) <> 1 OR array_lower(p_new_key_ids, 1) <> 1
       OR array_lower(p_new_public_keys, 1) <> 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'FL400', MESSAGE = 'bad_batch',
            DETAIL = 'the argument arrays must be one-dimensional, from 1, of equal length';
    END IF;

    -- the global order of the log: one appender at a time, until this transaction ends
    SELECT hd.tree_size, hd.frontier INTO head_size, fr
    FROM fairness.head hd WHERE hd.id = 1 FOR UPDATE;

    FOR i IN 1 .. n LOOP
        IF p_datas[i] IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'FL400', MESSAGE = 'bad_batch', DETAIL = i::text;
        END IF;
        IF p_types[i] IN ('result', 'void') THEN
            -- sees the commitments inserted earlier in this same batch
            SELECT l.commitment INTO logged FROM fairness.leaves l
            WHERE l.type = 'commitment' AND l.deal_id = p_deal_ids[i];
            IF NOT FOUND THEN
                RAISE EXCEPTION USING ERRCODE = 'FL404', MESSAGE = 'no_commitment',
                    DETAIL = i::text;
            END IF;
            IF logged IS DISTINCT FROM p_commitments[i] THEN
                RAISE EXCEPTION USING ERRCODE = 'FL409', MESSAGE = 'commitment_differs',
                    DETAIL = i::text;
            END IF;
        END IF;

        -- CompactRange.append: merge the leaf with the frontier's trailing perfect subtrees
        lh := sha256('\x00'::bytea || p_datas[i]);
        node_levels := node_levels || 0::smallint;
        node_idxs := node_idxs || head_size;
        node_hashes := node_hashes || lh;
        h := lh;
        s := head_size;
        lvl := 0;
        WHILE (s & 1) = 1 LOOP
            h := sha256('\x01'::bytea || fr[cardinality(fr)] || h);
            fr := fr[1 : cardinality(fr) - 1];
            s := s >> 1;
            lvl := lvl + 1;
            node_levels := node_levels || lvl::smallint;
            node_idxs := node_idxs || (head_size >> lvl);
            node_hashes := node_hashes || h;
        END LOOP;
        fr := fr || h;
        head_size := head_size + 1;

        -- CompactRange.root: fold the frontier from the right
        r := fr[cardinality(fr)];
        FOR j IN REVERSE cardinality(fr) - 1 .. 1 LOOP
            r := sha256('\x01'::bytea || fr[j] || r);
        END LOOP;

        INSERT INTO fairness.leaves (idx, leaf_data, leaf_hash, type, deal_id, commitment,
                                     root_after)
        VALUES (head_size - 1, p_datas[i], lh, p_types[i], p_deal_ids[i], p_commitments[i], r);
        IF p_types[i] = 'key_rotation' THEN
            INSERT INTO fairness.keys (key_id, public_key)
            VALUES (p_new_key_ids[i], p_new_public_keys[i])
            ON CONFLICT (key_id) DO NOTHING;
        END IF;

        out_index := head_size - 1;
        out_size := head_size;
        out_root := r;
        RETURN NEXT;
    END LOOP;

    INSERT INTO fairness.nodes (level, idx, hash)
    SELECT q.level, q.idx, q.hash
    FROM unnest(node_levels, node_idxs, node_hashes) AS q(level, idx, hash);
    UPDATE fairness.head
    SET tree_size = head_size, frontier = fr, root_hash = r,
        updated_at = now()
    WHERE id = 1;
END
$function$;
