"""Ledger: the chain sealer learns its horizon in one call (`ledger.chain_horizon`).

The sealer needs the chain lock exclusively for an instant: while it holds it, every new
posting waits on its shared lock. It took the lock, read the entry sequence and released the
lock in three round trips from the service, so posters could wait through all three (up to a
millisecond on a busy machine, at every seal). One function call, on its own (not inside a
transaction block: the lock is the transaction's), takes, reads and releases in microseconds,
and says NULL when a poster holds the lock (the sealer then tries again later),
or, with `p_wait`, queues for it so that the chain cannot fall behind under a load without
gaps.

Revision ID: 0007_ledger_chain_horizon
Revises: 0006_ledger_cheaper_checks
Create Date: 2025-01-07
"""

from __future__ import annotations

from alembic import op

revision = "0007_ledger_chain_horizon"
down_revision = "0006_ledger_cheaper_checks"
branch_labels = None
depends_on = None

CHAIN_LOCK_KEY = 0x4C454447  # as in 0001 and ledger/schema.py

HORIZON = r"""
CREATE FUNCTION ledger.chain_horizon(p_wait boolean) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE v_last bigint; v_called boolean;
BEGIN
  -- Every poster holds this lock shared from before it draws an entry id until it commits, so
  -- once it is ours exclusively, every id up to the sequence's value is final. A transaction
  -- lock: called on its own (autocommit), it is released as soon as the call ends, and an
  -- error cannot leave it held.
  IF p_wait THEN
    PERFORM pg_advisory_xact_lock(__CHAIN_LOCK__);
  ELSIF NOT pg_try_advisory_xact_lock(__CHAIN_LOCK__) THEN
    RETURN NULL;
  END IF;
  SELECT last_value, is_called INTO v_last, v_called FROM ledger.entries_id_seq;
  RETURN CASE WHEN v_called THEN v_last ELSE 0 END;
END $$
"""


def upgrade() -> None:
    op.execute(HORIZON.replace("__CHAIN_LOCK__", str(CHAIN_LOCK_KEY)))
    op.execute("REVOKE ALL ON FUNCTION ledger.chain_horizon(boolean) FROM PUBLIC")
    op.execute("GRANT EXECUTE ON FUNCTION ledger.chain_horizon(boolean) TO mesa_app")


def downgrade() -> None:
    op.execute("DROP FUNCTION ledger.chain_horizon(boolean)")
