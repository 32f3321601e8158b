"""SQLAlchemy Core table definitions of the gateway schema (accounts, sessions, chat,
invitations, rematches, identity checks, the staff audit log): the source of truth. The baseline migration creates the tables from this
metadata; a test checks that autogenerate finds no drift.
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

invitations = sa.Table(
    "invitations",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
    sa.Column("inviter", sa.Text, sa.ForeignKey(f"{SCHEMA}.users.id"), nullable=False),
    sa.Column("invitee", sa.Text, sa.ForeignKey(f"{SCHEMA}.users.id"), nullable=False),
    sa.Column("op", sa.Text, nullable=False),
    sa.Column("kind", sa.Text),
    sa.Column("tier", sa.Text),
    sa.Column("invite_code", sa.Text),
    sa.Column("status", sa.Text, nullable=False, server_default=sa.text("'pending'")),
    sa.Column("failure", sa.Text),
    sa.Column("table_id", sa.Text),
    sa.Column("idempotency_key", sa.Text, nullable=False),
    _timestamp("created_at", nullable=False, server_default=_now()),
    _timestamp("expires_at", nullable=False),
    _timestamp("decided_at"),
    sa.CheckConstraint("inviter <> invitee", name="invitations_check"),
    sa.CheckConstraint("expires_at > created_at", name="invitations_check1"),
    sa.CheckConstraint(
        "CASE WHEN op = 'code' THEN invite_code IS NOT NULL AND kind IS NULL AND tier IS NULL"
        " ELSE invite_code IS NULL AND kind IS NOT NULL AND tier IS NOT NULL END",
        name="invitations_check2",
    ),
    sa.CheckConstraint("failure ~ '^[a-z_]{1,64}$'", name="invitations_failure_check"),
    sa.CheckConstraint(
        "length(idempotency_key) >= 1 AND length(idempotency_key) <= 100",
        name="invitations_idempotency_key_check",
    ),
    sa.CheckConstraint("invite_code ~ '^[A-Z0-9]{4,16}$'", name="invitations_invite_code_check"),
    sa.CheckConstraint("kind ~ '^[a-z0-9-]{1,40}$'", name="invitations_kind_check"),
    sa.CheckConstraint(_in("op", ("quick", "private", "code")), name="invitations_op_check"),
    sa.CheckConstraint(_in("status", INVITATION_STATUSES), name="invitations_status_check"),
    sa.CheckConstraint(
        "length(table_id) >= 1 AND length(table_id) <= 64", name="invitations_table_id_check"
    ),
    sa.CheckConstraint(_in("tier", TIERS), name="invitations_tier_check"),
    sa.UniqueConstraint("inviter", "idempotency_key"),
    sa.Index("invitations_invitee", "invitee", "status"),
    sa.Index("invitations_inviter", "inviter", "status"),
)

# "Play again" with the same people (api/rematches.py): one proposal per finished match, an
# answer per player; nobody is seated or held until every one has accepted.
REMATCH_STATUSES = ("pending", "seating", "seated", "declined", "expired", "failed")
rematches = sa.Table(
    "rematches",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
    sa.Column("match_id", sa.Text, nullable=False, unique=True),
    sa.Column("proposer", sa.Text, sa.ForeignKey(f"{SCHEMA}.users.id"), nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("tier", sa.Text, nullable=False),
    sa.Column("pairs", sa.Boolean, nullable=False),
    sa.Column("status", sa.Text, nullable=False, server_default=sa.text("'pending'")),
    sa.Column("failure", sa.Text),
    sa.Column("table_id", sa.Text),
    _timestamp("created_at", nullable=False, server_default=_now()),
    _timestamp("expires_at", nullable=False),
    _timestamp("decided_at"),
    sa.CheckConstraint("expires_at > created_at", name="rematches_check"),
    sa.CheckConstraint(
        "length(match_id) >= 1 AND length(match_id) <= 128", name="rematches_match_id_check"
    ),
    sa.CheckConstraint("kind ~ '^[a-z0-9-]{1,40}$'", name="rematches_kind_check"),
    sa.CheckConstraint(_in("tier", TIERS), name="rematches_tier_check"),
    sa.CheckConstraint(_in("status", REMATCH_STATUSES), name="rematches_status_check"),
    sa.CheckConstraint("failure ~ '^[a-z_]{1,64}$'", name="rematches_failure_check"),
    sa.CheckConstraint(
        "length(table_id) >= 1 AND length(table_id) <= 64", name="rematches_table_id_check"
    ),
)

rematch_players = sa.Table(
    "rematch_players",
    metadata,
    sa.Column(
        "rematch_id", sa.BigInteger, sa.ForeignKey(f"{SCHEMA}.rematches.id"), primary_key=True
    ),
    sa.Column("player", sa.Text, sa.ForeignKey(f"{SCHEMA}.users.id"), primary_key=True),
    sa.Column("seat", sa.SmallInteger, nullable=False),
    sa.Column("answer", sa.Text, nullable=False, server_default=sa.text("'pending'")),
    _timestamp("answered_at"),
    sa.CheckConstraint("seat >= 0 AND seat <= 15", name="rematch_players_seat_check"),
    sa.CheckConstraint(
        _in("answer", ("pending", "accepted", "declined")), name="rematch_players_answer_check"
    ),
    sa.Index("rematch_players_player", "player", "answer"),
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
