"""SQLAlchemy Core table definitions of the ledger schema (queries and reports use these).

The migrations in ``ledger/migrations/versions`` create the same tables; the operations
themselves are SQL functions created there (one round trip per operation).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import BYTEA, JSONB

SCHEMA = "ledger"
metadata = sa.MetaData(schema=SCHEMA)

ACCOUNT_KINDS = ("wallet", "hold", "pot", "commission", "cashier")
ENTRY_KINDS = ("deposit", "withdrawal", "hold", "release", "start", "settle", "void", "reversal")
# entry kinds a reversal may correct (cashier movements; match money has its own flows)
REVERSIBLE_KINDS = ("deposit", "withdrawal")
POT_STATUSES = ("open", "settled", "voided")
CASHIER_CODE = "external:cashier"
COMMISSION_PREFIX = "house:commission:"
# Advisory lock key shared by posters (shared mode) and the chain sealer (exclusive, briefly).
CHAIN_LOCK_KEY = 0x4C454447

accounts = sa.Table(
    "accounts",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("code", sa.Text, nullable=False, unique=True),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("currency", sa.CHAR(3), nullable=False),
    sa.Column("balance", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("version", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("player", sa.Text),
    sa.Column("reservation_id", sa.Text),
    sa.Column("match_id", sa.Text),
    sa.Column(
        "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
    ),
    sa.Column("closed_at", sa.DateTime(timezone=True)),
)

entries = sa.Table(
    "entries",
    metadata,
    sa.Column("id", sa.BigInteger, primary_key=True),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("idempotency_key", sa.Text, nullable=False, unique=True),
    sa.Column("request_hash", BYTEA, nullable=False),
    sa.Column("match_id", sa.Text),
    sa.Column("reference", sa.Text),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("result", JSONB, nullable=False),
)

postings = sa.Table(
    "postings",
    metadata,
    sa.Column("entry_id", sa.BigInteger, sa.ForeignKey("ledger.entries.id"), primary_key=True),
    sa.Column("leg", sa.SmallInteger, primary_key=True),
    sa.Column("account_id", sa.BigInteger, sa.ForeignKey("ledger.accounts.id"), nullable=False),
    sa.Column("amount", sa.BigInteger, nullable=False),
    sa.Column("currency", sa.CHAR(3), nullable=False),
    sa.Column("balance_after", sa.BigInteger, nullable=False),
    sa.Column("version_after", sa.BigInteger, nullable=False),
)

pots = sa.Table(
    "pots",
    metadata,
    sa.Column("match_id", sa.Text, primary_key=True),
    sa.Column("account_id", sa.BigInteger, sa.ForeignKey("ledger.accounts.id"), nullable=False),
    sa.Column("tier", sa.Text, nullable=False),
    sa.Column("variant", sa.Text, nullable=False),
    sa.Column("currency", sa.CHAR(3), nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("stake_total", sa.BigInteger, nullable=False),
    sa.Column("start_entry_id", sa.BigInteger, sa.ForeignKey("ledger.entries.id"), nullable=False),
    sa.Column("close_entry_id", sa.BigInteger, sa.ForeignKey("ledger.entries.id")),
    sa.Column("commission_rate_bp", sa.Integer),
    sa.Column("commission", sa.BigInteger),
    sa.Column("commission_account_id", sa.BigInteger, sa.ForeignKey("ledger.accounts.id")),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("closed_at", sa.DateTime(timezone=True)),
)

stakes = sa.Table(
    "stakes",
    metadata,
    sa.Column("match_id", sa.Text, sa.ForeignKey("ledger.pots.match_id"), primary_key=True),
    sa.Column("seat", sa.Integer, primary_key=True),
    sa.Column("player", sa.Text, nullable=False),
    sa.Column("wallet_id", sa.BigInteger, sa.ForeignKey("ledger.accounts.id"), nullable=False),
    sa.Column("hold_id", sa.BigInteger, sa.ForeignKey("ledger.accounts.id"), nullable=False),
    sa.Column("amount", sa.BigInteger, nullable=False),
)

reversals = sa.Table(
    "reversals",
    metadata,
    sa.Column(
        "reversed_entry_id", sa.BigInteger, sa.ForeignKey("ledger.entries.id"), primary_key=True
    ),
    sa.Column(
        "reversal_entry_id",
        sa.BigInteger,
        sa.ForeignKey("ledger.entries.id"),
        nullable=False,
        unique=True,
    ),
)

chain_seals = sa.Table(
    "chain_seals",
    metadata,
    sa.Column("id", sa.BigInteger, primary_key=True),
    sa.Column("first_entry_id", sa.BigInteger, nullable=False),
    sa.Column("last_entry_id", sa.BigInteger, nullable=False),
    sa.Column("entry_count", sa.Integer, nullable=False),
    sa.Column("chain_hash", BYTEA, nullable=False),
    sa.Column(
        "sealed_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
    ),
    # the sealed entries' ids and their 32-byte hashes, in id order (migration 0009)
    sa.Column("entry_ids", sa.ARRAY(sa.BigInteger), nullable=False),
    sa.Column("entry_hashes", BYTEA, nullable=False),
)
