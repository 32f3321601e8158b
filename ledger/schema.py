"""SQLAlchemy Core table definitions of the ledger schema (queries and reports use these).

This metadata is the schema's source of truth: the baseline migration creates the tables
from it, and a test checks that Alembic's autogenerate finds no drift. The operations are
PL/pgSQL functions, one per file in ``ledger/sql/`` (one round trip per operation).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import BYTEA, DOMAIN, JSONB

SCHEMA = "ledger"
metadata = sa.MetaData(schema=SCHEMA)

ACCOUNT_KINDS = ("wallet", "hold", "pot", "commission", "cashier")
ENTRY_KINDS = ("deposit", "withdrawal", "hold", "release", "start", "settle", "void", "reversal")
# entry kinds a reversal may correct (cashier movements; match money has its own flows)
REVERSIBLE_KINDS = ("deposit", "withdrawal")
POT_STATUSES = ("open", "settled", "voided")
CASHIER_CODE = "external:cashier"
COMMISSION_PREFIX = "house:commission:"
# house commission accounts, spread so concurrent settlements do not queue on one row
COMMISSION_SHARDS = 16
# Advisory lock key shared by posters (shared mode) and the chain sealer (exclusive, briefly).
CHAIN_LOCK_KEY = 0x4C454447


def _one_of(values: tuple[str, ...]) -> str:
    return "VALUE IN (" + ", ".join(f"'{v}'" for v in values) + ")"


def _domain(name: str, data_type: Any, check: str) -> DOMAIN:
    """A one-column check as a domain with the constraint's name: compiled once per session,
    not per statement like a table CHECK (docs/decisions/0004-ledger-domains-instead-of-table-checks.md)."""
    return DOMAIN(f"{name}", data_type, constraint_name=f"{name}_check", check=check, schema=SCHEMA)


accounts_code = _domain("accounts_code", sa.Text, "length(VALUE) >= 1 AND length(VALUE) <= 200")
accounts_currency = _domain("accounts_currency", sa.CHAR(3), "VALUE ~ '^[A-Z]{3}$'")
accounts_kind = _domain("accounts_kind", sa.Text, _one_of(ACCOUNT_KINDS))
accounts_version = _domain("accounts_version", sa.BigInteger, "VALUE >= 0")
entries_idempotency_key = _domain(
    "entries_idempotency_key", sa.Text, "length(VALUE) >= 1 AND length(VALUE) <= 200"
)
entries_kind = _domain("entries_kind", sa.Text, _one_of(ENTRY_KINDS))
postings_amount = _domain("postings_amount", sa.BigInteger, "VALUE <> 0")
postings_leg = _domain("postings_leg", sa.SmallInteger, "VALUE >= 1")
pots_commission = _domain("pots_commission", sa.BigInteger, "VALUE >= 0")
pots_commission_rate_bp = _domain(
    "pots_commission_rate_bp", sa.Integer, "VALUE >= 0 AND VALUE <= 10000"
)
pots_stake_total = _domain("pots_stake_total", sa.BigInteger, "VALUE > 0")
pots_status = _domain("pots_status", sa.Text, _one_of(POT_STATUSES))
stakes_amount = _domain("stakes_amount", sa.BigInteger, "VALUE > 0")
stakes_seat = _domain("stakes_seat", sa.Integer, "VALUE >= 0")


def _now() -> sa.TextClause:
    return sa.text("now()")


accounts = sa.Table(
    "accounts",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("code", accounts_code, nullable=False, unique=True),
    sa.Column("kind", accounts_kind, nullable=False),
    sa.Column("currency", accounts_currency, nullable=False),
    sa.Column("balance", sa.BigInteger, nullable=False, server_default=sa.text("0")),
    sa.Column("version", accounts_version, nullable=False, server_default=sa.text("0")),
    sa.Column("player", sa.Text),
    sa.Column("reservation_id", sa.Text),
    sa.Column("match_id", sa.Text),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now()),
    sa.Column("closed_at", sa.DateTime(timezone=True)),
    sa.CheckConstraint("kind = 'cashier' OR balance >= 0", name="accounts_balance_nonnegative"),
    sa.CheckConstraint("closed_at IS NULL OR balance = 0", name="accounts_closed_at_zero"),
)

entries = sa.Table(
    "entries",
    metadata,
    sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
    sa.Column("kind", entries_kind, nullable=False),
    sa.Column("idempotency_key", entries_idempotency_key, nullable=False, unique=True),
    sa.Column("request_hash", BYTEA, nullable=False),
    sa.Column("match_id", sa.Text),
    sa.Column("reference", sa.Text),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_now()),
    sa.Column("result", JSONB, nullable=False),
    sa.Index("entries_created_at", "created_at"),
    sa.Index(
        "entries_one_close_per_match",
        "match_id",
        unique=True,
        postgresql_where=sa.text("kind IN ('settle', 'void')"),
    ),
    # the cashier's reference, for matching a payment processor's settlement file
    sa.Index(
        "entries_cashier_reference",
        "reference",
        postgresql_where=sa.text("kind IN ('deposit', 'withdrawal')"),
    ),
    sa.Index(
        "entries_one_start_per_match",
        "match_id",
        unique=True,
        postgresql_where=sa.text("kind = 'start'"),
    ),
)

postings = sa.Table(
    "postings",
    metadata,
    sa.Column("entry_id", sa.BigInteger, sa.ForeignKey(f"{SCHEMA}.entries.id"), primary_key=True),
    sa.Column("leg", postings_leg, primary_key=True),
    sa.Column("account_id", sa.BigInteger, sa.ForeignKey(f"{SCHEMA}.accounts.id"), nullable=False),
    sa.Column("amount", postings_amount, nullable=False),
    sa.Column("currency", sa.CHAR(3), nullable=False),
    sa.Column("balance_after", sa.BigInteger, nullable=False),
    sa.Column("version_after", sa.BigInteger, nullable=False),
    sa.UniqueConstraint("account_id", "version_after", name="postings_one_version_per_account"),
)

pots = sa.Table(
    "pots",
    metadata,
    sa.Column("match_id", sa.Text, primary_key=True),
    sa.Column(
        "account_id",
        sa.BigInteger,
        sa.ForeignKey(f"{SCHEMA}.accounts.id"),
        nullable=False,
        unique=True,
    ),
    sa.Column("tier", sa.Text, nullable=False),
    sa.Column("variant", sa.Text, nullable=False),
    sa.Column("currency", sa.CHAR(3), nullable=False),
    sa.Column("status", pots_status, nullable=False),
    sa.Column("stake_total", pots_stake_total, nullable=False),
    sa.Column(
        "start_entry_id", sa.BigInteger, sa.ForeignKey(f"{SCHEMA}.entries.id"), nullable=False
    ),
    sa.Column("close_entry_id", sa.BigInteger, sa.ForeignKey(f"{SCHEMA}.entries.id")),
    sa.Column("commission_rate_bp", pots_commission_rate_bp),
    sa.Column("commission", pots_commission),
    sa.Column("commission_account_id", sa.BigInteger, sa.ForeignKey(f"{SCHEMA}.accounts.id")),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("closed_at", sa.DateTime(timezone=True)),
    sa.Index("pots_status", "status"),
    sa.Index("pots_closed_at", "closed_at"),
    # the integrity scan pages settled pots in settlement order
    sa.Index("pots_close_entry_id", "close_entry_id"),
)

stakes = sa.Table(
    "stakes",
    metadata,
    sa.Column("match_id", sa.Text, sa.ForeignKey(f"{SCHEMA}.pots.match_id"), primary_key=True),
    sa.Column("seat", stakes_seat, primary_key=True),
    sa.Column("player", sa.Text, nullable=False),
    sa.Column("wallet_id", sa.BigInteger, sa.ForeignKey(f"{SCHEMA}.accounts.id"), nullable=False),
    sa.Column("hold_id", sa.BigInteger, sa.ForeignKey(f"{SCHEMA}.accounts.id"), nullable=False),
    sa.Column("amount", stakes_amount, nullable=False),
    sa.UniqueConstraint("match_id", "player", name="stakes_match_id_player_key"),
    # a wallet's stake line (a hold, made before its match existed) finds its match by it
    sa.Index("stakes_hold_id", "hold_id"),
)

reversals = sa.Table(
    "reversals",
    metadata,
    sa.Column(
        "reversed_entry_id", sa.BigInteger, sa.ForeignKey(f"{SCHEMA}.entries.id"), primary_key=True
    ),
    sa.Column(
        "reversal_entry_id",
        sa.BigInteger,
        sa.ForeignKey(f"{SCHEMA}.entries.id"),
        nullable=False,
        unique=True,
    ),
    sa.CheckConstraint("reversal_entry_id > reversed_entry_id", name="reversals_check"),
)

chain_seals = sa.Table(
    "chain_seals",
    metadata,
    sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("first_entry_id", sa.BigInteger, nullable=False),
    sa.Column("last_entry_id", sa.BigInteger, nullable=False),
    sa.Column("entry_count", sa.Integer, nullable=False),
    sa.Column("chain_hash", BYTEA, nullable=False),
    sa.Column("sealed_at", sa.DateTime(timezone=True), nullable=False, server_default=_now()),
    # the sealed entries' ids and their 32-byte hashes, in id order
    sa.Column("entry_ids", sa.ARRAY(sa.BigInteger), nullable=False),
    sa.Column("entry_hashes", BYTEA, nullable=False),
    sa.CheckConstraint(
        "cardinality(entry_ids) = entry_count AND octet_length(entry_hashes) = 32 * entry_count"
        " AND entry_ids[1] = first_entry_id AND entry_ids[entry_count] = last_entry_id",
        name="chain_seals_block",
    ),
)

CLOSE_STATUSES = ("proposed", "closed")
day_closes_status = _domain("day_closes_status", sa.Text, _one_of(CLOSE_STATUSES))

# The daily close (docs/explanation/daily-close.md): one row per UTC day, proposed by one
# finance user and approved by another. Once closed, no entry may be dated into the day
# (`ledger.refuse_closed_day`, a trigger on entries) and the row never changes again.
day_closes = sa.Table(
    "day_closes",
    metadata,
    sa.Column("day", sa.Date, primary_key=True),
    sa.Column("status", day_closes_status, nullable=False),
    sa.Column("proposed_by", sa.Text, nullable=False),
    sa.Column("proposed_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("approved_by", sa.Text),
    sa.Column("approved_at", sa.DateTime(timezone=True)),
    # the figures as proposed (and, once closed, as approved: approval refuses a difference)
    sa.Column("report", JSONB, nullable=False),
    # the exact bytes signed (canonical JSON of the closed day's document) and the signature
    sa.Column("document", BYTEA),
    sa.Column("signature", BYTEA),
    sa.Column("chain_head", BYTEA, nullable=False),
    sa.CheckConstraint(
        "(status = 'closed') = (approved_by IS NOT NULL AND approved_at IS NOT NULL"
        " AND document IS NOT NULL AND signature IS NOT NULL)",
        name="day_closes_closed_complete",
    ),
    sa.CheckConstraint("approved_by <> proposed_by", name="day_closes_four_eyes"),
    sa.CheckConstraint("octet_length(chain_head) = 32", name="day_closes_chain_head"),
)

# A payment processor's settlement file, imported once (by its SHA-256) and matched against
# the cashier's deposits and withdrawals; `result` is the match as it stood at import.
settlement_imports = sa.Table(
    "settlement_imports",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("sha256", BYTEA, nullable=False, unique=True),
    sa.Column("filename", sa.Text, nullable=False),
    sa.Column("line_count", sa.Integer, nullable=False),
    sa.Column("first_day", sa.Date, nullable=False),
    sa.Column("last_day", sa.Date, nullable=False),
    sa.Column("imported_at", sa.DateTime(timezone=True), nullable=False, server_default=_now()),
    sa.Column("result", JSONB, nullable=False),
    sa.CheckConstraint("octet_length(sha256) = 32", name="settlement_imports_sha256"),
    sa.CheckConstraint("line_count > 0", name="settlement_imports_line_count"),
)

settlement_lines = sa.Table(
    "settlement_lines",
    metadata,
    sa.Column(
        "import_id",
        sa.BigInteger,
        sa.ForeignKey(f"{SCHEMA}.settlement_imports.id"),
        primary_key=True,
    ),
    sa.Column("line", sa.Integer, primary_key=True),  # the file's line number (header: 1)
    sa.Column("reference", sa.Text, nullable=False),
    sa.Column("amount", sa.BigInteger, nullable=False),  # cents; a payout is negative
    sa.Column("currency", sa.CHAR(3), nullable=False),
    sa.Column("day", sa.Date, nullable=False),
    # the cashier entry it was matched to, if any
    sa.Column("entry_id", sa.BigInteger, sa.ForeignKey(f"{SCHEMA}.entries.id")),
)

# Tables nobody may change or empty once written (triggers calling ledger.refuse_change).
APPEND_ONLY = (
    "entries",
    "postings",
    "stakes",
    "reversals",
    "chain_seals",
    "settlement_imports",
    "settlement_lines",
)
