"""Ledger: wallets are opened explicitly (`ledger.open_wallet`); a deposit no longer opens one.

Until now the first deposit to a player created the wallet, so a deposit naming a player who
never signed up (a typo at the cashier, a forged call) opened an account for nobody and put
money in it. Holds, settlements and voids already refused a wallet that does not exist (404
`unknown_account`); now deposits do too. The gateway opens the wallet when a player registers
(and `mesa up --demo` for its players): `ledger.open_wallet(player, currency)` is idempotent
(opening an open wallet changes nothing and says so) and refuses a wallet that exists in
another currency.

Revision ID: 0010_ledger_open_wallet
Revises: 0009_ledger_chain_blocks
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0010_ledger_open_wallet"
down_revision = "0009_ledger_chain_blocks"
branch_labels = None
depends_on = None

OPEN_WALLET = r"""
CREATE OR REPLACE FUNCTION ledger.open_wallet(p_player text, p_currency text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE v_id bigint; v_currency text;
BEGIN
  IF p_player IS NULL OR length(p_player) NOT BETWEEN 1 AND 64
     OR p_player !~ '^[A-Za-z0-9_.@:-]+$' THEN
    RAISE EXCEPTION USING ERRCODE = 'LD400', MESSAGE = 'invalid_player',
      DETAIL = 'player ids are 1..64 characters of A-Z a-z 0-9 _ . @ : -';
  END IF;
  -- only a currency the ledger keeps (it has a cashier account in it)
  PERFORM ledger._cashier(p_currency);
  INSERT INTO ledger.accounts (code, kind, currency, player)
  VALUES ('wallet:' || p_player, 'wallet', p_currency, p_player)
  ON CONFLICT (code) DO NOTHING
  RETURNING id INTO v_id;
  IF v_id IS NOT NULL THEN
    RETURN jsonb_build_object('player', p_player, 'account', 'wallet:' || p_player,
                              'currency', p_currency, 'opened', true);
  END IF;
  SELECT currency INTO v_currency FROM ledger.accounts WHERE code = 'wallet:' || p_player;
  IF v_currency <> p_currency THEN
    RAISE EXCEPTION USING ERRCODE = 'LD422', MESSAGE = 'wrong_currency',
      DETAIL = format('wallet of %s is in %s, not %s', p_player, v_currency, p_currency);
  END IF;
  RETURN jsonb_build_object('player', p_player, 'account', 'wallet:' || p_player,
                            'currency', v_currency, 'opened', false);
END $$
"""

# The whole of `ledger.deposit` as 0004 defined it, with the wallet looked up, not created.
DEPOSIT = r"""
CREATE OR REPLACE FUNCTION ledger.deposit(p_key text, p_hash bytea, p_player text,
                                          p_amount bigint, p_currency text, p_reference text)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE v_prior jsonb; v_cashier bigint; v_wallet bigint;
BEGIN
  v_prior := ledger._begin(p_key, p_hash);
  IF v_prior IS NOT NULL THEN RETURN v_prior; END IF;
  PERFORM ledger._check_amount(p_amount);
  v_cashier := ledger._cashier(p_currency);
  v_wallet := ledger._wallet(p_player, p_currency, false);
  RETURN ledger._post_entry('deposit', p_key, p_hash, NULL, p_reference,
                            ARRAY[v_cashier, v_wallet], ARRAY[-p_amount, p_amount],
                            jsonb_build_object('player', p_player), NULL);
END $$
"""

DEPOSIT_CREATING = DEPOSIT.replace(
    "ledger._wallet(p_player, p_currency, false)", "ledger._wallet(p_player, p_currency, true)"
)


def upgrade() -> None:
    op.execute(OPEN_WALLET)
    op.execute("REVOKE ALL ON FUNCTION ledger.open_wallet(text, text) FROM PUBLIC")
    op.execute("GRANT EXECUTE ON FUNCTION ledger.open_wallet(text, text) TO mesa_app")
    op.execute(DEPOSIT)
    op.execute(
        "ALTER FUNCTION ledger.deposit(text, bytea, text, bigint, text, text) "
        "SET plan_cache_mode = force_generic_plan"
    )


def downgrade() -> None:
    op.execute(DEPOSIT_CREATING)
    op.execute("DROP FUNCTION ledger.open_wallet(text, text)")
