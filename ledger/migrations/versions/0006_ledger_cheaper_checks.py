"""Ledger: the same checks for less CPU per posting (domains, and name checks without {1,n}).

Measured with `perf` on a backend running `ledger.post_batch` (see
docs/decisions/0004-ledger-domains-instead-of-table-checks.md), two costs that bought nothing:

* **Table CHECK constraints are re-read on every statement.** PostgreSQL turns each CHECK of a
  table into an executable expression once per statement that writes the table (it parses the
  stored node tree, plans and compiles it), and an UPDATE evaluates every CHECK of the table,
  not only those over the columns it changes. Every posting updates `accounts` and inserts into
  `entries` and `postings`, so each operation parsed about a dozen constraint trees (the
  `kind IN (...)` arrays are the dearest), 15-20% of the backend's CPU for a hold. A check over
  one column is now a domain with the same CHECK and the same constraint name: a domain's
  checks are compiled once per session (type cache), and an UPDATE that does not assign the
  column does not evaluate them. The checks over two columns (the balance floor,
  `accounts_balance_nonnegative`, and `accounts_closed_at_zero`) stay table constraints. Same
  refusal: a violation is still SQLSTATE 23514 naming the same constraint.
* **Bounded repetition in a regular expression.** `'^[A-Za-z0-9_.:-]{1,128}$'` costs about
  12 us a match in PostgreSQL's regex engine (the bound expands into a large automaton), against
  0.3 us for `'^[A-Za-z0-9_.:-]+$'` and a length check, which accept exactly the same strings.
  `hold` checks two ids that way, `start_match` and `_wallet` one.

The columns change type to a domain over the same type, with the domain's CHECK added only after
(a binary-compatible change to a domain without constraints rewrites nothing; adding the
constraint then scans each table once to validate it). The functions are rewritten from their
current definition in the database (`pg_get_functiondef`, which keeps their SET clauses), with
only the id checks replaced; the downgrade puts back the old checks the same way.

Revision ID: 0006_ledger_cheaper_checks
Revises: 0005_ledger_post_batch
Create Date: 2025-01-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_ledger_cheaper_checks"
down_revision = "0005_ledger_post_batch"
branch_labels = None
depends_on = None

# (table, column, base type, the table CHECK it replaces (and the domain constraint's name),
# the check with the column written as VALUE). The domain is ledger.<table>_<column>.
COLUMN_CHECKS = (
    ("accounts", "code", "text", "accounts_code_check", "length(VALUE) BETWEEN 1 AND 200"),
    (
        "accounts",
        "kind",
        "text",
        "accounts_kind_check",
        "VALUE IN ('wallet', 'hold', 'pot', 'commission', 'cashier')",
    ),
    ("accounts", "currency", "char(3)", "accounts_currency_check", "VALUE ~ '^[A-Z]{3}$'"),
    ("accounts", "version", "bigint", "accounts_version_check", "VALUE >= 0"),
    (
        "entries",
        "kind",
        "text",
        "entries_kind_check",
        "VALUE IN ('deposit', 'withdrawal', 'hold', 'release', 'start', 'settle', 'void', "
        "'reversal')",
    ),
    (
        "entries",
        "idempotency_key",
        "text",
        "entries_idempotency_key_check",
        "length(VALUE) BETWEEN 1 AND 200",
    ),
    ("postings", "leg", "smallint", "postings_leg_check", "VALUE >= 1"),
    ("postings", "amount", "bigint", "postings_amount_check", "VALUE <> 0"),
    (
        "pots",
        "status",
        "text",
        "pots_status_check",
        "VALUE IN ('open', 'settled', 'voided')",
    ),
    ("pots", "stake_total", "bigint", "pots_stake_total_check", "VALUE > 0"),
    (
        "pots",
        "commission_rate_bp",
        "integer",
        "pots_commission_rate_bp_check",
        "VALUE BETWEEN 0 AND 10000",
    ),
    ("pots", "commission", "bigint", "pots_commission_check", "VALUE >= 0"),
    ("stakes", "seat", "integer", "stakes_seat_check", "VALUE >= 0"),
    ("stakes", "amount", "bigint", "stakes_amount_check", "VALUE > 0"),
)

# (function, old check, new check): the same strings accepted, without a bounded repetition.
ID_CHECKS = (
    (
        "ledger.hold(text, bytea, text, text, bigint, text, text)",
        "p_reservation !~ '^[A-Za-z0-9_.:-]{1,128}$'",
        "length(p_reservation) NOT BETWEEN 1 AND 128 OR p_reservation !~ '^[A-Za-z0-9_.:-]+$'",
    ),
    (
        "ledger.hold(text, bytea, text, text, bigint, text, text)",
        "p_player !~ '^[A-Za-z0-9_.@:-]{1,64}$'",
        "length(p_player) NOT BETWEEN 1 AND 64 OR p_player !~ '^[A-Za-z0-9_.@:-]+$'",
    ),
    (
        "ledger._wallet(text, text, boolean)",
        "p_player !~ '^[A-Za-z0-9_.@:-]{1,64}$'",
        "length(p_player) NOT BETWEEN 1 AND 64 OR p_player !~ '^[A-Za-z0-9_.@:-]+$'",
    ),
    (
        "ledger.start_match(text, bytea, text, text, text, text, int[], text[], text[])",
        "p_match !~ '^[A-Za-z0-9_.:-]{1,128}$'",
        "length(p_match) NOT BETWEEN 1 AND 128 OR p_match !~ '^[A-Za-z0-9_.:-]+$'",
    ),
)


def _replace_in_functions(old_index: int, new_index: int) -> None:
    bind = op.get_bind()
    for signature, *checks in ID_CHECKS:
        old, new = checks[old_index], checks[new_index]
        sql = bind.execute(
            sa.text("SELECT pg_get_functiondef(CAST(:f AS regprocedure))"), {"f": signature}
        ).scalar_one()
        if sql.count(old) != 1:
            raise RuntimeError(f"{signature}: expected the check {old!r} once")
        op.execute(sql.replace(old, new))


def upgrade() -> None:
    for table, column, base, name, check in COLUMN_CHECKS:
        domain = f"ledger.{table}_{column}"
        op.execute(f"CREATE DOMAIN {domain} AS {base}")
        op.execute(f"ALTER TABLE ledger.{table} ALTER COLUMN {column} TYPE {domain}")
        op.execute(f"ALTER DOMAIN {domain} ADD CONSTRAINT {name} CHECK ({check})")
        op.execute(f"ALTER TABLE ledger.{table} DROP CONSTRAINT {name}")
    _replace_in_functions(0, 1)


def downgrade() -> None:
    _replace_in_functions(1, 0)
    for table, column, base, name, check in COLUMN_CHECKS:
        domain = f"ledger.{table}_{column}"
        op.execute(f"ALTER TABLE ledger.{table} ALTER COLUMN {column} TYPE {base}")
        op.execute(f"DROP DOMAIN {domain}")
        op.execute(
            f"ALTER TABLE ledger.{table} ADD CONSTRAINT {name} "
            f"CHECK ({check.replace('VALUE', column)})"
        )
