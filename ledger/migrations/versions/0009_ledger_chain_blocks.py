"""Ledger: a seal carries its entries' hashes; one call seals a block (`ledger.seal_next`).

The chain is unchanged (each entry's hash, and the chain hash after each entry, are defined as
in 0001), but what is stored of it is not: a seal now holds the ids and the hashes of the
entries it covers (`entry_ids`, `entry_hashes`: 32 bytes each, in id order) and the chain hash
after its last entry, instead of a row per entry in `ledger.chain_links`. Why: the sealer runs
beside the posting path on the same cores, and writing a link row cost PostgreSQL ~13 us an
entry (a heap row, an index entry, a key-share lock on the entry for the reference check),
more than reading the entry did; a request that overlapped one of the sealer's statements was
~0.6 ms slower on average, and they made up most of the slowest requests
(docs/decisions/0005-ledger-chain-sealed-in-blocks.md).

`ledger.seal_next(horizon, limit)` seals the next block in one statement: it reads the chain's
end from the last seal, the hashes of up to `limit` entries after it and at most `horizon`
(each entry's canonical form built as `canonical_entry` in `ledger/chain.py` writes it; every
string through `to_json`, tested equal to msgspec's over every code point), chains them, and
writes the seal. Nothing goes back to the caller but the count. The existing links move into
their seals and the links table goes; the downgrade rebuilds it from the seals.

Revision ID: 0009_ledger_chain_blocks
Revises: 0008_ledger_batch_statements
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0009_ledger_chain_blocks"
down_revision = "0008_ledger_batch_statements"
branch_labels = None
depends_on = None

SEAL_NEXT = r"""
CREATE FUNCTION ledger.seal_next(p_horizon bigint, p_limit int) RETURNS int
LANGUAGE plpgsql AS $$
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
END $$
"""

# The links of the seals made before this migration, moved into them (the append-only trigger
# refuses any UPDATE of a seal, so it is off for this one statement, inside the migration's
# transaction).
MOVE_LINKS = """
UPDATE ledger.chain_seals s
   SET entry_ids = l.ids, entry_hashes = l.hashes
  FROM (SELECT seal_id, array_agg(entry_id ORDER BY entry_id) AS ids,
               string_agg(entry_hash, ''::bytea ORDER BY entry_id) AS hashes
        FROM ledger.chain_links GROUP BY seal_id) l
 WHERE l.seal_id = s.id
"""

BLOCK_CHECK = """
ALTER TABLE ledger.chain_seals ADD CONSTRAINT chain_seals_block CHECK (
  cardinality(entry_ids) = entry_count AND octet_length(entry_hashes) = 32 * entry_count
  AND entry_ids[1] = first_entry_id AND entry_ids[entry_count] = last_entry_id)
"""

# As 0001 made it, for the downgrade.
LINKS_TABLE = """
CREATE TABLE ledger.chain_links (
    entry_id   BIGINT PRIMARY KEY REFERENCES ledger.entries (id),
    entry_hash BYTEA NOT NULL,
    chain_hash BYTEA NOT NULL,
    seal_id    BIGINT NOT NULL REFERENCES ledger.chain_seals (id)
)
"""

REBUILD_LINKS = r"""
DO $$
DECLARE
  v_chain bytea := decode(repeat('00', 32), 'hex');
  v_digest bytea;
  s record;
BEGIN
  FOR s IN SELECT id, entry_ids, entry_hashes FROM ledger.chain_seals ORDER BY id LOOP
    FOR i IN 1 .. cardinality(s.entry_ids) LOOP
      v_digest := substring(s.entry_hashes FROM (i - 1) * 32 + 1 FOR 32);
      v_chain := sha256(v_chain || v_digest);
      INSERT INTO ledger.chain_links (entry_id, entry_hash, chain_hash, seal_id)
      VALUES (s.entry_ids[i], v_digest, v_chain, s.id);
    END LOOP;
  END LOOP;
END $$
"""


def _append_only(table: str) -> None:
    op.execute(
        f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON ledger.{table} "
        "FOR EACH ROW EXECUTE FUNCTION ledger.refuse_change()"
    )
    op.execute(
        f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON ledger.{table} "
        "FOR EACH STATEMENT EXECUTE FUNCTION ledger.refuse_change()"
    )


def upgrade() -> None:
    op.execute(
        "ALTER TABLE ledger.chain_seals ADD COLUMN entry_ids BIGINT[], "
        "ADD COLUMN entry_hashes BYTEA"
    )
    op.execute("ALTER TABLE ledger.chain_seals DISABLE TRIGGER chain_seals_append_only")
    op.execute(MOVE_LINKS)
    op.execute("ALTER TABLE ledger.chain_seals ENABLE TRIGGER chain_seals_append_only")
    op.execute(
        "ALTER TABLE ledger.chain_seals ALTER COLUMN entry_ids SET NOT NULL, "
        "ALTER COLUMN entry_hashes SET NOT NULL"
    )
    op.execute(BLOCK_CHECK)
    op.execute("DROP TABLE ledger.chain_links")
    op.execute(SEAL_NEXT)
    op.execute(
        "ALTER FUNCTION ledger.seal_next(bigint, int) SET plan_cache_mode = force_generic_plan"
    )
    op.execute("REVOKE ALL ON FUNCTION ledger.seal_next(bigint, int) FROM PUBLIC")
    op.execute("GRANT EXECUTE ON FUNCTION ledger.seal_next(bigint, int) TO mesa_app")


def downgrade() -> None:
    op.execute("DROP FUNCTION ledger.seal_next(bigint, int)")
    op.execute(LINKS_TABLE)
    _append_only("chain_links")
    op.execute("GRANT SELECT, INSERT ON ledger.chain_links TO mesa_app")
    op.execute(REBUILD_LINKS)
    op.execute("ALTER TABLE ledger.chain_seals DROP CONSTRAINT chain_seals_block")
    op.execute("ALTER TABLE ledger.chain_seals DROP COLUMN entry_ids, DROP COLUMN entry_hashes")
