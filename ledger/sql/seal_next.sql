CREATE OR REPLACE FUNCTION ledger.seal_next(p_horizon bigint, p_limit integer)
 RETURNS integer
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
  v_seal bigint;
  v_after bigint;
  v_chain bytea;
  v_ids bigint[];
  v_digests bytea[];
  v_hashes bytea;
BEGIN
  IF p_limit IS NULL OR p_limit < 1 OR p_limit > 10000 THEN
    RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'seal_limit_out_of_range';
  END IF;
  -- the chain's end (one sealer at a time: the caller holds the sealer lock, and a second
  -- seal with the same id would fail on the primary key)
  SELECT s.id, s.last_entry_id, s.chain_hash INTO v_seal, v_after, v_chain
  FROM ledger.chain_seals s ORDER BY s.id DESC LIMIT 1;
  SELECT array_agg(d.id ORDER BY d.id), array_agg(d.digest ORDER BY d.id),
         string_agg(d.digest, ''::bytea ORDER BY d.id)
    INTO v_ids, v_digests, v_hashes
  FROM (
    SELECT e.id, sha256(convert_to(
             '["mesa-ledger-entry-v1",' || e.id || ',' || to_json(e.kind::text)::text || ','
             || to_json(e.idempotency_key::text)::text || ','
             || coalesce(to_json(e.match_id::text)::text, 'null') || ','
             || coalesce(to_json(e.reference::text)::text, 'null') || ','
             || (extract(epoch FROM e.created_at) * 1000000)::bigint || ',"'
             || encode(e.request_hash, 'hex') || '",'
             || (SELECT '[' || coalesce(string_agg(
                          '[' || p.leg || ',' || p.account_id || ',' || p.amount || ','
                              || to_json(p.currency::text)::text || ',' || p.balance_after
                              || ',' || p.version_after || ']', ',' ORDER BY p.leg), '') || ']'
                 FROM ledger.postings p WHERE p.entry_id = e.id)
             || ']', 'UTF8')) AS digest
    FROM ledger.entries e
    WHERE e.id > coalesce(v_after, 0) AND e.id <= p_horizon
    ORDER BY e.id
    LIMIT p_limit
  ) d;
  IF v_ids IS NULL THEN
    RETURN 0;
  END IF;
  v_chain := coalesce(v_chain, decode(repeat('00', 32), 'hex'));  -- the genesis
  FOR i IN 1 .. cardinality(v_ids) LOOP
    v_chain := sha256(v_chain || v_digests[i]);
  END LOOP;
  INSERT INTO ledger.chain_seals (id, first_entry_id, last_entry_id, entry_count, chain_hash,
                                  entry_ids, entry_hashes)
  VALUES (coalesce(v_seal, 0) + 1, v_ids[1], v_ids[cardinality(v_ids)], cardinality(v_ids),
          v_chain, v_ids, v_hashes);
  RETURN cardinality(v_ids);
END $function$;
