"""Ledger: posters lock accounts FOR NO KEY UPDATE (fixes a rare deadlock outside the sorted order).

`ledger._lock` locked accounts with `FOR UPDATE`. That mode conflicts with the KEY SHARE lock a
foreign-key check takes on the referenced row, and `start_match` inserts `stakes` rows that
reference the players' *wallets*, which it does not lock itself (it locks the holds and the
pot). The FK checks take KEY SHARE on the wallets in seat order, not in account-id order, so
a start could hold KEY SHARE on one wallet and wait on the next one while another poster (a
void of another match, which locks several wallets in id order) held that wallet FOR UPDATE
and waited on the first: a lock cycle the sorted order does not cover. The concurrency test
saw it about once in six runs (reproduced deterministically by
`test_start_match_never_waits_on_wallet_locks`).

`FOR NO KEY UPDATE` is the lock an UPDATE of non-key columns (balance, version, closed_at)
takes anyway; it still excludes every other poster, but it does not conflict with KEY SHARE,
so foreign-key checks never wait on posters and no lock is taken outside the sorted order.
Nothing updates an account's key columns (id, code), so nothing needs the stronger mode.

Revision ID: 0003_ledger_lock_no_key_update
Revises: 0002_ledger_reversals
Create Date: 2025-01-03
"""

from __future__ import annotations

from alembic import op

revision = "0003_ledger_lock_no_key_update"
down_revision = "0002_ledger_reversals"
branch_labels = None
depends_on = None

_LOCK = """
CREATE OR REPLACE FUNCTION ledger._lock(p_ids bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  -- one global order (ascending id); NO KEY UPDATE so foreign-key checks (KEY SHARE) of
  -- other transactions never wait on a poster's lock
  PERFORM id FROM ledger.accounts WHERE id = ANY(p_ids) ORDER BY id FOR NO KEY UPDATE;
END $$
"""


def upgrade() -> None:
    op.execute(_LOCK)


def downgrade() -> None:
    op.execute(_LOCK.replace("FOR NO KEY UPDATE", "FOR UPDATE"))
