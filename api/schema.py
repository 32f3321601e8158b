"""SQLAlchemy Core table definitions of the gateway schema (accounts, sessions, chat,
invitations, identity checks, the staff audit log, responsible-play limits,
support's disputes and refund proposals, players' settings and reports): the source of truth.
The baseline migration creates the tables from this metadata; a test checks that autogenerate
finds no drift.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal, get_args

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import BYTEA, JSONB

SCHEMA = "gateway"
metadata = sa.MetaData(schema=SCHEMA)

# Who a user is; the guards, the admin routes and the check constraint all read this tuple.
Role = Literal["player", "auditor", "finance", "admin", "support", "compliance"]
ROLES: tuple[str, ...] = get_args(Role)
USER_STATUSES = ("active", "locked", "self_excluded")
INVITATION_STATUSES = ("pending", "accepted", "declined", "cancelled", "expired", "failed")
TIERS = ("free", "10", "20", "40", "80")
# Responsible play (api.limits): a player's limits, each over its rolling window.
LimitName = Literal[
    "deposit_day", "deposit_week", "deposit_month", "loss_day", "loss_week", "loss_month"
]
LIMIT_NAMES: tuple[str, ...] = get_args(LimitName)
MAX_LIMIT_CENTS = 10_000_000  # $100,000, the cashier's largest single movement
ReminderMinutes = Literal[0, 30, 60, 120]  # 0: no session reminders
REMINDER_MINUTES: tuple[int, ...] = get_args(ReminderMinutes)


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN (" + ", ".join(f"'{v}'" for v in values) + ")"


def _now() -> sa.TextClause:
    return sa.text("now()")


def _timestamp(
    name: str, *, nullable: bool = True, server_default: sa.TextClause | None = None
) -> sa.Column[datetime]:
    return sa.Column(
        name, sa.DateTime(timezone=True), nullable=nullable, server_default=server_default
    )


users = sa.Table(
    "users",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("display_name", sa.Text, nullable=False),
    sa.Column("password_hash", sa.Text, nullable=False),
    sa.Column("role", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False, server_default=sa.text("'active'")),
    _timestamp("excluded_until"),
    _timestamp("created_at", nullable=False, server_default=_now()),
    _timestamp("updated_at", nullable=False, server_default=_now()),
    sa.CheckConstraint(
        "length(display_name) >= 1 AND length(display_name) <= 40",
        name="users_display_name_check",
    ),
    sa.CheckConstraint("id ~ '^[a-z0-9_.-]{3,32}$'", name="users_id_check"),
    sa.CheckConstraint(
        "length(password_hash) >= 20 AND length(password_hash) <= 400",
        name="users_password_hash_check",
    ),
    sa.CheckConstraint(_in("role", ROLES), name="users_role_check"),
    sa.CheckConstraint(_in("status", USER_STATUSES), name="users_status_check"),
)
# Support's player search (`api.routes_support.search_query`) matches a prefix of the id or
# of the lowercased display name with LIKE; `text_pattern_ops` lets a btree serve a LIKE
# prefix whatever the database's collation (the primary key's default ops do only under "C").
sa.Index(
    "users_id_prefix",
    users.c.id,
    postgresql_ops={"id": "text_pattern_ops"},
)
sa.Index(
    "users_display_name_prefix",
    sa.func.lower(users.c.display_name).label("display_name_lower"),
    postgresql_ops={"display_name_lower": "text_pattern_ops"},
)

sessions = sa.Table(
    "sessions",
    metadata,
    sa.Column("token_hash", BYTEA, primary_key=True),
    sa.Column("user_id", sa.Text, sa.ForeignKey(f"{SCHEMA}.users.id"), nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("csrf_token", sa.Text, nullable=False),
    sa.Column("label", sa.Text, nullable=False, server_default=sa.text("''")),
    _timestamp("created_at", nullable=False, server_default=_now()),
    _timestamp("expires_at", nullable=False),
    _timestamp("revoked_at"),
    sa.CheckConstraint(_in("kind", ("cookie", "bearer")), name="sessions_kind_check"),
    sa.CheckConstraint("length(label) <= 64", name="sessions_label_check"),
    sa.CheckConstraint("length(token_hash) = 32", name="sessions_token_hash_check"),
    sa.Index("sessions_user", "user_id"),
)

chat = sa.Table(
    "chat",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
    sa.Column("match_id", sa.Text, nullable=False),
    sa.Column("seat", sa.SmallInteger, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("code", sa.Text, nullable=False),
    _timestamp("created_at", nullable=False, server_default=_now()),
    sa.CheckConstraint("code ~ '^[a-z_]{1,32}$'", name="chat_code_check"),
    sa.CheckConstraint(_in("kind", ("phrase", "reaction")), name="chat_kind_check"),
    sa.CheckConstraint(
        "length(match_id) >= 1 AND length(match_id) <= 128", name="chat_match_id_check"
    ),
    sa.CheckConstraint("seat >= 0 AND seat <= 15", name="chat_seat_check"),
    sa.Index("chat_match", "match_id", "id"),
)

# Invitations (api/invitations.py): an offer from one player to named others, to sit together
# once every one of them has accepted in his own session; a partner (one invitee) or "play
# again" with the people of a finished match (its `match_id`: one per match, no key).
invitations = sa.Table(
    "invitations",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
    sa.Column("inviter", sa.Text, sa.ForeignKey(f"{SCHEMA}.users.id"), nullable=False),
    sa.Column("op", sa.Text, nullable=False),
    sa.Column("kind", sa.Text),
    sa.Column("tier", sa.Text),
    sa.Column("invite_code", sa.Text),
    sa.Column("match_id", sa.Text, unique=True),
    sa.Column("status", sa.Text, nullable=False, server_default=sa.text("'pending'")),
    sa.Column("failure", sa.Text),
    sa.Column("table_id", sa.Text),
    sa.Column("idempotency_key", sa.Text),
    _timestamp("created_at", nullable=False, server_default=_now()),
    _timestamp("expires_at", nullable=False),
    _timestamp("decided_at"),
    sa.CheckConstraint("expires_at > created_at", name="invitations_check1"),
    sa.CheckConstraint(
        "CASE WHEN op = 'code' THEN invite_code IS NOT NULL AND kind IS NULL AND tier IS NULL"
        " ELSE invite_code IS NULL AND kind IS NOT NULL AND tier IS NOT NULL END",
        name="invitations_check2",
    ),
    # A rematch is keyed by its match (and opens a private table); any other by the inviter's key.
    sa.CheckConstraint(
        "CASE WHEN match_id IS NULL THEN idempotency_key IS NOT NULL"
        " ELSE idempotency_key IS NULL AND op = 'private' END",
        name="invitations_check3",
    ),
    sa.CheckConstraint("failure ~ '^[a-z_]{1,64}$'", name="invitations_failure_check"),
    sa.CheckConstraint(
        "length(idempotency_key) >= 1 AND length(idempotency_key) <= 100",
        name="invitations_idempotency_key_check",
    ),
    sa.CheckConstraint("invite_code ~ '^[A-Z0-9]{4,16}$'", name="invitations_invite_code_check"),
    sa.CheckConstraint("kind ~ '^[a-z0-9-]{1,40}$'", name="invitations_kind_check"),
    sa.CheckConstraint(
        "length(match_id) >= 1 AND length(match_id) <= 128", name="invitations_match_id_check"
    ),
    sa.CheckConstraint(_in("op", ("quick", "private", "code")), name="invitations_op_check"),
    sa.CheckConstraint(_in("status", INVITATION_STATUSES), name="invitations_status_check"),
    sa.CheckConstraint(
        "length(table_id) >= 1 AND length(table_id) <= 64", name="invitations_table_id_check"
    ),
    sa.CheckConstraint(_in("tier", TIERS), name="invitations_tier_check"),
    sa.UniqueConstraint("inviter", "idempotency_key"),
    sa.Index("invitations_inviter", "inviter", "status"),
)

# Everyone an invitation seats, the inviter included (his answer is `accepted` from the start).
# Players of one `team` join together, as partners; the inviter's team (0) joins first.
invitation_players = sa.Table(
    "invitation_players",
    metadata,
    sa.Column(
        "invitation_id",
        sa.BigInteger,
        sa.ForeignKey(f"{SCHEMA}.invitations.id"),
        primary_key=True,
    ),
    sa.Column("player", sa.Text, sa.ForeignKey(f"{SCHEMA}.users.id"), primary_key=True),
    sa.Column("seat", sa.SmallInteger, nullable=False),
    sa.Column("team", sa.SmallInteger, nullable=False),
    sa.Column("answer", sa.Text, nullable=False, server_default=sa.text("'pending'")),
    _timestamp("answered_at"),
    sa.CheckConstraint("seat >= 0 AND seat <= 15", name="invitation_players_seat_check"),
    sa.CheckConstraint("team >= 0 AND team <= 15", name="invitation_players_team_check"),
    sa.CheckConstraint(
        _in("answer", ("pending", "accepted", "declined")), name="invitation_players_answer_check"
    ),
    sa.Index("invitation_players_player", "player", "answer"),
)

# The identity provider's verified answers (api/identity.py): reused for a bounded time, and
# the person's one account: a person_id may belong to one player only.
identity_checks = sa.Table(
    "identity_checks",
    metadata,
    sa.Column("player", sa.Text, sa.ForeignKey(f"{SCHEMA}.users.id"), primary_key=True),
    sa.Column("verified", sa.Boolean, nullable=False),
    sa.Column("adult", sa.Boolean, nullable=False),
    sa.Column("person_id", sa.Text, unique=True),
    sa.Column("provider_ref", sa.Text, nullable=False),
    _timestamp("checked_at", nullable=False, server_default=_now()),
    sa.CheckConstraint(
        "length(person_id) >= 1 AND length(person_id) <= 128",
        name="identity_checks_person_id_check",
    ),
    sa.CheckConstraint("length(provider_ref) <= 128", name="identity_checks_provider_ref_check"),
)

# Append-only: the application role may only insert and read (grants in the baseline), and a
# trigger refuses UPDATE, DELETE and TRUNCATE from anyone.
staff_actions = sa.Table(
    "staff_actions",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
    _timestamp("at", nullable=False, server_default=_now()),
    sa.Column("actor", sa.Text, nullable=False),
    sa.Column("actor_role", sa.Text, nullable=False),
    sa.Column("action", sa.Text, nullable=False),
    sa.Column("subject", sa.Text, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("detail", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    sa.CheckConstraint("action ~ '^[a-z][a-z0-9_.]{0,63}$'", name="staff_actions_action_check"),
    sa.CheckConstraint(_in("actor_role", ROLES), name="staff_actions_actor_role_check"),
    sa.CheckConstraint(
        "length(subject) >= 1 AND length(subject) <= 200", name="staff_actions_subject_check"
    ),
    sa.CheckConstraint(
        "length(reason) >= 1 AND length(reason) <= 1000", name="staff_actions_reason_check"
    ),
    sa.CheckConstraint("length(detail::text) <= 16000", name="staff_actions_detail_check"),
    sa.Index("staff_actions_actor", "actor", "id"),
    sa.Index("staff_actions_subject", "subject", "id"),
)

# One row per limit a player has set: `cents` applies now (NULL: no limit); a pending change
# (an increase or a removal, `pending_cents` NULL for a removal) applies from `pending_at`.
play_limits = sa.Table(
    "play_limits",
    metadata,
    sa.Column("player", sa.Text, sa.ForeignKey(f"{SCHEMA}.users.id"), primary_key=True),
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("cents", sa.BigInteger),
    sa.Column("pending_cents", sa.BigInteger),
    _timestamp("pending_at"),
    _timestamp("updated_at", nullable=False, server_default=_now()),
    sa.CheckConstraint(_in("name", LIMIT_NAMES), name="play_limits_name_check"),
    sa.CheckConstraint(
        f"cents IS NULL OR (cents >= 1 AND cents <= {MAX_LIMIT_CENTS})",
        name="play_limits_cents_check",
    ),
    sa.CheckConstraint(
        f"pending_cents IS NULL OR (pending_cents >= 1 AND pending_cents <= {MAX_LIMIT_CENTS})",
        name="play_limits_pending_cents_check",
    ),
    sa.CheckConstraint(
        "pending_at IS NOT NULL OR pending_cents IS NULL", name="play_limits_pending_check"
    ),
)

# A player's own settings, one row (kept apart from `users` so staff account changes and the
# player's own choices never write the same row): session reminders, a cool-off's end, and
# "seat me only with random opponents" (quick join only: no private table, no invitation,
# never listed).
play_settings = sa.Table(
    "play_settings",
    metadata,
    sa.Column("player", sa.Text, sa.ForeignKey(f"{SCHEMA}.users.id"), primary_key=True),
    sa.Column("reminder_min", sa.SmallInteger, nullable=False, server_default=sa.text("0")),
    _timestamp("cooling_off_until"),
    sa.Column("random_opponents_only", sa.Boolean, nullable=False, server_default=sa.text("false")),
    _timestamp("updated_at", nullable=False, server_default=_now()),
    sa.CheckConstraint(
        "reminder_min IN (" + ", ".join(str(m) for m in REMINDER_MINUTES) + ")",
        name="play_settings_reminder_min_check",
    ),
)

DISPUTE_STATUSES = ("open", "closed")
REFUND_STATUSES = ("proposed", "approved", "rejected")

# A player's complaint as support handles it; its notes are append-only (grants and trigger).
disputes = sa.Table(
    "disputes",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
    sa.Column("player", sa.Text, sa.ForeignKey(f"{SCHEMA}.users.id"), nullable=False),
    sa.Column("opened_by", sa.Text, sa.ForeignKey(f"{SCHEMA}.users.id"), nullable=False),
    sa.Column("match_id", sa.Text),
    sa.Column("deal_id", sa.Text),
    sa.Column("status", sa.Text, nullable=False, server_default=sa.text("'open'")),
    _timestamp("created_at", nullable=False, server_default=_now()),
    sa.Column("closed_by", sa.Text, sa.ForeignKey(f"{SCHEMA}.users.id")),
    _timestamp("closed_at"),
    sa.Column("close_reason", sa.Text),
    sa.CheckConstraint(_in("status", DISPUTE_STATUSES), name="disputes_status_check"),
    sa.CheckConstraint(
        "(status = 'open') = (closed_by IS NULL AND closed_at IS NULL AND close_reason IS NULL)",
        name="disputes_closed_check",
    ),
    sa.CheckConstraint("match_id ~ '^[A-Za-z0-9_.:-]{1,128}$'", name="disputes_match_id_check"),
    sa.CheckConstraint("deal_id ~ '^[A-Za-z0-9._/-]{1,128}$'", name="disputes_deal_id_check"),
    sa.CheckConstraint(
        "length(close_reason) >= 1 AND length(close_reason) <= 1000",
        name="disputes_close_reason_check",
    ),
    sa.Index("disputes_player", "player", "id"),
    sa.Index("disputes_status", "status", "id"),
)

dispute_notes = sa.Table(
    "dispute_notes",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
    sa.Column("dispute_id", sa.BigInteger, sa.ForeignKey(f"{SCHEMA}.disputes.id"), nullable=False),
    sa.Column("author", sa.Text, sa.ForeignKey(f"{SCHEMA}.users.id"), nullable=False),
    _timestamp("created_at", nullable=False, server_default=_now()),
    sa.Column("body", sa.Text, nullable=False),
    sa.CheckConstraint(
        "length(body) >= 1 AND length(body) <= 1000", name="dispute_notes_body_check"
    ),
    sa.Index("dispute_notes_dispute", "dispute_id", "id"),
)

# Support or finance proposes the reversal of one ledger entry; a finance user (never the
# proposer) approves it (the gateway then asks the ledger, key `refund-proposal:<id>`) or
# rejects it.
refund_proposals = sa.Table(
    "refund_proposals",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
    sa.Column("player", sa.Text, sa.ForeignKey(f"{SCHEMA}.users.id"), nullable=False),
    sa.Column("entry_id", sa.BigInteger, nullable=False),
    sa.Column("entry_kind", sa.Text, nullable=False),
    # The entry's movement of the player's wallet, in cents (the reversal moves its negation).
    sa.Column("amount", sa.BigInteger, nullable=False),
    sa.Column("currency", sa.Text, nullable=False),
    sa.Column("dispute_id", sa.BigInteger, sa.ForeignKey(f"{SCHEMA}.disputes.id")),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False, server_default=sa.text("'proposed'")),
    sa.Column("proposed_by", sa.Text, sa.ForeignKey(f"{SCHEMA}.users.id"), nullable=False),
    _timestamp("proposed_at", nullable=False, server_default=_now()),
    sa.Column("decided_by", sa.Text, sa.ForeignKey(f"{SCHEMA}.users.id")),
    _timestamp("decided_at"),
    sa.Column("decision_reason", sa.Text),
    sa.Column("reversal_entry_id", sa.BigInteger),
    sa.CheckConstraint(_in("status", REFUND_STATUSES), name="refund_proposals_status_check"),
    sa.CheckConstraint("entry_id > 0", name="refund_proposals_entry_id_check"),
    sa.CheckConstraint("currency ~ '^[A-Z]{3}$'", name="refund_proposals_currency_check"),
    sa.CheckConstraint(
        "length(reason) >= 1 AND length(reason) <= 1000", name="refund_proposals_reason_check"
    ),
    sa.CheckConstraint(
        "length(decision_reason) >= 1 AND length(decision_reason) <= 1000",
        name="refund_proposals_decision_reason_check",
    ),
    sa.CheckConstraint("decided_by <> proposed_by", name="refund_proposals_four_eyes_check"),
    sa.CheckConstraint(
        "(status = 'proposed') = (decided_by IS NULL AND decided_at IS NULL)",
        name="refund_proposals_decided_check",
    ),
    sa.CheckConstraint(
        "(status = 'approved') = (reversal_entry_id IS NOT NULL)",
        name="refund_proposals_reversal_check",
    ),
    # One live proposal (proposed or approved) per ledger entry: an entry is reversed once.
    sa.Index(
        "refund_proposals_one_per_entry",
        "entry_id",
        unique=True,
        postgresql_where=sa.text("status <> 'rejected'"),
    ),
    sa.Index("refund_proposals_status", "status", "id"),
    sa.Index("refund_proposals_player", "player", "id"),
)

REPORT_CATEGORIES = ("collusion", "cheating", "abuse", "bot", "other")

# Players' reports of other players, for compliance. Append-only for the application role
# (insert and read only, by the grants in the baseline).
player_reports = sa.Table(
    "player_reports",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
    _timestamp("created_at", nullable=False, server_default=_now()),
    sa.Column("reporter", sa.Text, sa.ForeignKey(f"{SCHEMA}.users.id"), nullable=False),
    sa.Column("reported", sa.Text, nullable=False),
    sa.Column("match_id", sa.Text, nullable=False),
    sa.Column("category", sa.Text, nullable=False),
    sa.Column("text", sa.Text, nullable=False, server_default=sa.text("''")),
    sa.CheckConstraint("reporter <> reported", name="player_reports_check"),
    sa.CheckConstraint(_in("category", REPORT_CATEGORIES), name="player_reports_category_check"),
    sa.CheckConstraint(
        "length(match_id) >= 1 AND length(match_id) <= 128", name="player_reports_match_id_check"
    ),
    sa.CheckConstraint("length(reported) <= 64", name="player_reports_reported_check"),
    sa.CheckConstraint("length(text) <= 500", name="player_reports_text_check"),
    # One report per reporter, player and match: a second one answers the first.
    sa.UniqueConstraint("reporter", "reported", "match_id"),
    sa.Index("player_reports_reporter", "reporter", "created_at"),
    sa.Index("player_reports_reported", "reported", "id"),
)
