"""Ledger: corrections as reversing entries (a cashier deposit or withdrawal, at most once).

A reversal is one new journal entry whose postings are the reversed entry's postings negated
(same accounts, opposite amounts); the reversed entry is never touched. ``ledger.reversals``
records which entry each reversal reverses; its primary key is the natural key "an entry is
reversed at most once". Only cashier movements (deposit, withdrawal) can be reversed: match
money is corrected by the release/void/settle flows, and a reversal is not itself reversible
(post the movement again instead).

Revision ID: 0002_ledger_reversals
Revises: 0001_ledger_initial
Create Date: 2025-01-02
"""

from __future__ import annotations

from alembic import op

revision = "0002_ledger_reversals"
down_revision = "0001_ledger_initial"
branch_labels = None
depends_on = None


STATEMENTS = [
    "ALTER TABLE ledger.entries DROP CONSTRAINT entries_kind_check",
    "ALTER TABLE ledger.entries ADD CONSTRAINT entries_kind_check CHECK (kind IN ("
    "'deposit', 'withdrawal', 'hold', 'release', 'start', 'settle', 'void', 'reversal')) NOT VALID",
    # validated apart: a SHARE UPDATE EXCLUSIVE scan, posting is not blocked meanwhile
    "ALTER TABLE ledger.entries VALIDATE CONSTRAINT entries_kind_check",
    """
CREATE TABLE ledger.reversals (
    reversed_entry_id  BIGINT PRIMARY KEY REFERENCES ledger.entries (id),
    reversal_entry_id  BIGINT NOT NULL UNIQUE REFERENCES ledger.entries (id),
    CHECK (reversal_entry_id > reversed_entry_id)
)
""",
    "CREATE TRIGGER reversals_append_only BEFORE UPDATE OR DELETE ON ledger.reversals "
    "FOR EACH ROW EXECUTE FUNCTION ledger.refuse_change()",
    "CREATE TRIGGER reversals_no_truncate BEFORE TRUNCATE ON ledger.reversals "
    "FOR EACH STATEMENT EXECUTE FUNCTION ledger.refuse_change()",
    r"""
CREATE FUNCTION ledger.reverse_entry(p_key text, p_hash bytea, p_entry bigint,
                                     p_reference text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  v_prior jsonb; v_kind text; v_accounts bigint[]; v_amounts bigint[]; v_player text;
  v_result jsonb;
BEGIN
  v_prior := ledger._begin(p_key, p_hash);
  IF v_prior IS NOT NULL THEN RETURN v_prior; END IF;
  SELECT kind, result ->> 'player' INTO v_kind, v_player FROM ledger.entries WHERE id = p_entry;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'LD404', MESSAGE = 'unknown_entry',
      DETAIL = format('no journal entry %s', p_entry);
  END IF;
  IF v_kind NOT IN ('deposit', 'withdrawal') THEN
    RAISE EXCEPTION USING ERRCODE = 'LD422', MESSAGE = 'entry_not_reversible',
      DETAIL = format('entry %s is a %s; only cashier deposits and withdrawals are reversed '
                      '(match money is corrected by release, void and settle)', p_entry, v_kind);
  END IF;
  -- the same accounts, in the same leg order, with the amounts negated
  SELECT array_agg(account_id ORDER BY leg), array_agg(-amount ORDER BY leg)
    INTO v_accounts, v_amounts
  FROM ledger.postings WHERE entry_id = p_entry;
  PERFORM ledger._lock(v_accounts);
  -- checked under the account locks: a concurrent reversal of the same entry has committed
  -- by now (it holds the same locks) and is visible to this statement
  IF EXISTS (SELECT 1 FROM ledger.reversals WHERE reversed_entry_id = p_entry) THEN
    -- a concurrent retry of this very request may be the one that reversed it
    v_prior := ledger._replay(p_key, p_hash);
    IF v_prior IS NOT NULL THEN RETURN v_prior; END IF;
    RAISE EXCEPTION USING ERRCODE = 'LD409', MESSAGE = 'entry_already_reversed',
      DETAIL = format('entry %s was already reversed', p_entry);
  END IF;
  v_result := ledger._post('reversal', p_key, p_hash, NULL, p_reference, v_accounts, v_amounts,
                           jsonb_build_object('player', v_player, 'reverses_entry_id', p_entry,
                                              'reverses_kind', v_kind));
  INSERT INTO ledger.reversals (reversed_entry_id, reversal_entry_id)
  VALUES (p_entry, (v_result ->> 'entry_id')::bigint);
  RETURN v_result;
END $$
""",
    "ALTER FUNCTION ledger.reverse_entry(text, bytea, bigint, text) "
    "SET plan_cache_mode = force_generic_plan",
    "REVOKE ALL ON ledger.reversals FROM PUBLIC",
    "GRANT SELECT, INSERT ON ledger.reversals TO mesa_app",
    "GRANT EXECUTE ON FUNCTION ledger.reverse_entry(text, bytea, bigint, text) TO mesa_app",
]


def upgrade() -> None:
    for statement in STATEMENTS:
        op.execute(statement)


def downgrade() -> None:
    op.execute("DROP FUNCTION ledger.reverse_entry(text, bytea, bigint, text)")
    op.execute("DROP TABLE ledger.reversals")
    op.execute("ALTER TABLE ledger.entries DROP CONSTRAINT entries_kind_check")
    op.execute(
        "ALTER TABLE ledger.entries ADD CONSTRAINT entries_kind_check CHECK (kind IN ("
        "'deposit', 'withdrawal', 'hold', 'release', 'start', 'settle', 'void')) NOT VALID"
    )
