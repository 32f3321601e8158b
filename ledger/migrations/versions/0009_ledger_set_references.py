"""Ledger: a posting's and a pot's references are checked once a statement, not once a row.

A foreign key is checked row by row: each posting's entry and account, each settled pot's
closing entry and commission account, every one a query of its own with its executor start
and a row lock. A settlement has eight such checks, a hold four. Now one query a statement
checks every row the statement wrote (a statement trigger over its transition table), and
what a foreign key also guarantees on the referenced side is kept by the tables themselves:
an entry can never be changed or removed (migration 0001), nor, now, an account's row or id.

Measured on copies of one database (0008 with the foreign keys, 0009), the same
`post_batch` calls alternated between them on one connection each, commit included
(docs/ledger.md, "Eighth round"): 4 settlements 1.516 / 1.531 ms -> 1.470 / 1.485 ms (-3%),
16 settlements 3.496 -> 3.128 ms (-10.5%), 4 holds 0.921 / 0.908 -> 0.876 / 0.862 ms (-5%). A
statement pays one check where its rows paid one each, so the larger the batch, the more it
saves.

The same rows are refused as before: a posting whose entry or account does not exist, a pot
whose closing entry or commission account does not exist (SQLSTATE 23503, as a foreign key's
refusal). The application role cannot drop or disable a trigger, as it could not a foreign
key; a superuser can do either.

Revision ID: 0009_ledger_set_references
Revises: 0008_ledger_batch_statements
Create Date: 2025-01-09
"""

from __future__ import annotations

from alembic import op

revision = "0009_ledger_set_references"
down_revision = "0008_ledger_batch_statements"
branch_labels = None
depends_on = None

# (table, constraint, column, referenced table): the foreign keys the checks replace, as 0001
# made them
FOREIGN_KEYS = (
    ("postings", "postings_entry_id_fkey", "entry_id", "entries"),
    ("postings", "postings_account_id_fkey", "account_id", "accounts"),
    ("pots", "pots_close_entry_id_fkey", "close_entry_id", "entries"),
    ("pots", "pots_commission_account_id_fkey", "commission_account_id", "accounts"),
)

POSTINGS_REFER = r"""
CREATE FUNCTION ledger._postings_refer() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE v record;
BEGIN
  SELECT n.entry_id, n.leg, n.account_id INTO v FROM written n
  WHERE NOT EXISTS (SELECT FROM ledger.entries e WHERE e.id = n.entry_id)
     OR NOT EXISTS (SELECT FROM ledger.accounts a WHERE a.id = n.account_id)
  LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'foreign_key_violation', MESSAGE = 'posting_refers_to_nothing',
      DETAIL = format('posting %s/%s: entry %s or account %s does not exist',
                      v.entry_id, v.leg, v.entry_id, v.account_id);
  END IF;
  RETURN NULL;
END $$
"""

POTS_REFER = r"""
CREATE FUNCTION ledger._pots_refer() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE v record;
BEGIN
  SELECT n.match_id, n.close_entry_id, n.commission_account_id INTO v FROM written n
  WHERE (n.close_entry_id IS NOT NULL
         AND NOT EXISTS (SELECT FROM ledger.entries e WHERE e.id = n.close_entry_id))
     OR (n.commission_account_id IS NOT NULL
         AND NOT EXISTS (SELECT FROM ledger.accounts a WHERE a.id = n.commission_account_id))
  LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'foreign_key_violation', MESSAGE = 'pot_refers_to_nothing',
      DETAIL = format('pot %s: closing entry %s or commission account %s does not exist',
                      v.match_id, v.close_entry_id, v.commission_account_id);
  END IF;
  RETURN NULL;
END $$
"""

REFUSE_REMOVAL = r"""
CREATE FUNCTION ledger._refuse_removal() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'LD403', MESSAGE = 'referenced',
    DETAIL = format('%s on ledger.%s is not allowed: postings and pots refer to its rows',
                    TG_OP, TG_TABLE_NAME);
END $$
"""

# (trigger, table, when, function): transition tables allow one event a trigger, no column list
TRIGGERS = (
    (
        "postings_refer",
        "postings",
        "AFTER INSERT",
        "REFERENCING NEW TABLE AS written FOR EACH STATEMENT",
        "_postings_refer",
    ),
    (
        "pots_refer_on_insert",
        "pots",
        "AFTER INSERT",
        "REFERENCING NEW TABLE AS written FOR EACH STATEMENT",
        "_pots_refer",
    ),
    (
        "pots_refer_on_update",
        "pots",
        "AFTER UPDATE",
        "REFERENCING NEW TABLE AS written FOR EACH STATEMENT",
        "_pots_refer",
    ),
    # the referenced side: an account's row stays, with its id (entries never change at all)
    ("accounts_no_delete", "accounts", "BEFORE DELETE", "FOR EACH ROW", "_refuse_removal"),
    (
        "accounts_no_truncate",
        "accounts",
        "BEFORE TRUNCATE",
        "FOR EACH STATEMENT",
        "_refuse_removal",
    ),
    (
        "accounts_id_fixed",
        "accounts",
        "BEFORE UPDATE OF id",
        "FOR EACH ROW WHEN (NEW.id IS DISTINCT FROM OLD.id)",
        "_refuse_removal",
    ),
)

FUNCTIONS = (
    (POSTINGS_REFER, "_postings_refer()"),
    (POTS_REFER, "_pots_refer()"),
    (REFUSE_REMOVAL, "_refuse_removal()"),
)


def upgrade() -> None:
    for sql, signature in FUNCTIONS:
        op.execute(sql)
        op.execute(f"REVOKE ALL ON FUNCTION ledger.{signature} FROM PUBLIC")
    for name, table, when, each, function in TRIGGERS:
        op.execute(
            f"CREATE TRIGGER {name} {when} ON ledger.{table} {each} "
            f"EXECUTE FUNCTION ledger.{function}()"
        )
    for table, constraint, _, _ in FOREIGN_KEYS:
        op.execute(f"ALTER TABLE ledger.{table} DROP CONSTRAINT {constraint}")


def downgrade() -> None:
    for table, constraint, column, referenced in FOREIGN_KEYS:
        op.execute(
            f"ALTER TABLE ledger.{table} ADD CONSTRAINT {constraint} "
            f"FOREIGN KEY ({column}) REFERENCES ledger.{referenced} (id)"
        )
    for name, table, _, _, _ in reversed(TRIGGERS):
        op.execute(f"DROP TRIGGER {name} ON ledger.{table}")
    for _, signature in reversed(FUNCTIONS):
        op.execute(f"DROP FUNCTION ledger.{signature}")
