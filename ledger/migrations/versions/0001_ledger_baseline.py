"""Ledger baseline: tables from `ledger.schema.metadata`, functions from `ledger/sql/`, then
the append-only triggers, grants and the house accounts.

Revision ID: 0001_ledger_baseline
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

from pathlib import Path

from alembic import op

from ledger.schema import APPEND_ONLY, COMMISSION_SHARDS, SCHEMA, metadata
from services.common.schema_source import (
    apply_functions,
    create_tables,
    drop_schema_objects,
    execute_all,
)

revision = "0001_ledger_baseline"
down_revision = None
branch_labels = None
depends_on = None

FUNCTIONS = Path(__file__).resolve().parents[2] / "sql"

TRIGGERS = tuple(
    statement
    for table in APPEND_ONLY
    for statement in (
        f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON ledger.{table} "
        "FOR EACH ROW EXECUTE FUNCTION ledger.refuse_change()",
        f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON ledger.{table} "
        "FOR EACH STATEMENT EXECUTE FUNCTION ledger.refuse_change()",
    )
) + (
    # no entry dated into a closed day, whichever function (or statement) writes it
    "CREATE TRIGGER entries_open_day AFTER INSERT ON ledger.entries "
    "REFERENCING NEW TABLE AS new_entries "
    "FOR EACH STATEMENT EXECUTE FUNCTION ledger.refuse_closed_day()",
    "CREATE TRIGGER day_closes_keep_closed BEFORE UPDATE OR DELETE ON ledger.day_closes "
    "FOR EACH ROW EXECUTE FUNCTION ledger.keep_closed_day()",
    "CREATE TRIGGER day_closes_no_truncate BEFORE TRUNCATE ON ledger.day_closes "
    "FOR EACH STATEMENT EXECUTE FUNCTION ledger.refuse_change()",
)

SEED = (
    "INSERT INTO ledger.accounts (code, kind, currency) "
    "VALUES ('external:cashier', 'cashier', 'USD')",
    "INSERT INTO ledger.accounts (code, kind, currency) "
    "SELECT 'house:commission:' || lpad(n::text, 2, '0'), 'commission', 'USD' "
    f"FROM generate_series(0, {COMMISSION_SHARDS - 1}) n",
)

# The service role reads and appends; it changes only the columns a posting or a closing
# moves. The batch, wallet and seal entry points are for the service role only.
GRANTS = (
    "REVOKE ALL ON ALL TABLES IN SCHEMA ledger FROM PUBLIC",
    "GRANT USAGE ON SCHEMA ledger TO mesa_app",
    "GRANT SELECT, INSERT ON ledger.accounts, ledger.entries, ledger.postings, ledger.pots, "
    "ledger.stakes, ledger.reversals, ledger.chain_seals TO mesa_app",
    "GRANT UPDATE (balance, version, closed_at) ON ledger.accounts TO mesa_app",
    "GRANT UPDATE (status, close_entry_id, commission_rate_bp, commission, "
    "commission_account_id, closed_at) ON ledger.pots TO mesa_app",
    # a proposal is approved (these columns) or withdrawn (deleted); the trigger keeps closed days
    "GRANT SELECT, INSERT, DELETE ON ledger.day_closes TO mesa_app",
    "GRANT UPDATE (status, approved_by, approved_at, document, signature) "
    "ON ledger.day_closes TO mesa_app",
    "GRANT SELECT, INSERT ON ledger.settlement_imports, ledger.settlement_lines TO mesa_app",
    "GRANT SELECT, USAGE ON SEQUENCE ledger.accounts_id_seq, ledger.entries_id_seq, "
    "ledger.settlement_imports_id_seq TO mesa_app",
    "GRANT SELECT ON ledger.alembic_version TO mesa_app",
    "REVOKE ALL ON FUNCTION ledger._hold_many(text[], text[]), "
    "ledger._in_slots(integer, integer[], text[]), ledger._lock_batch(text[], text[]), "
    "ledger._settle_many(text[], text[]), ledger.chain_horizon(boolean), "
    "ledger.open_wallet(text, text), ledger.post_batch(text[], text[]), "
    "ledger.seal_next(bigint, integer) FROM PUBLIC",
    "GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA ledger TO mesa_app",
)


def upgrade() -> None:
    bind = op.get_bind()
    create_tables(bind, metadata)
    apply_functions(bind, FUNCTIONS, SCHEMA)
    execute_all(bind, TRIGGERS + SEED + GRANTS)


def downgrade() -> None:
    drop_schema_objects(op.get_bind(), metadata, SCHEMA)
