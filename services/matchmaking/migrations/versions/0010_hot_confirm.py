"""matchmaking: a confirm ('pending' -> 'seated') is a HOT update

Revision ID: mm0010
Revises: mm0009
Create Date: 2026-11-29

An update is HOT (no new index entry, only a heap tuple on the same page) when no column
that an index uses as key or in its predicate changes. `status` was in every partial
reservation index's predicate and `updated_ms` was the repair index's key, so each confirm
wrote four index entries (a paid seat wrote eleven in all: pending, seated, staked).

- Two stored generated columns carry the distinctions the indexes need: `is_live` (pending,
  seated, staked: the seat and player unique indexes) and `is_open` (pending, seated,
  releasing: what the sweeper scans for expiry and repair). 'pending' -> 'seated' changes
  neither, so with `status` out of every index it is HOT.
- The confirm no longer sets `updated_ms` (an index key): a seat's `updated_ms` is the time
  it entered its current phase that the sweeper cares about (pending since, releasing since),
  and a seated row is never repaired by age.
- Queries keep their `status` conditions (they stay the truth) and add the generated column,
  so the planner can prove the partial index's predicate. The functions are rewritten from
  their stored text (`pg_get_functiondef`) by the same textual additions.
- `fillfactor = 80` leaves room on the page a reservation was inserted into for its HOT
  versions (seated, and heartbeats of a seated seat stay non-HOT: `expires_ms` is a key).

A paid seat now writes 8 index entries (insert 5, staked 3) instead of 11.
"""

from __future__ import annotations

import re

from alembic import op

revision = "mm0010"
down_revision = "mm0009"
branch_labels = None
depends_on = None

LIVE = "('pending', 'seated', 'staked')"
OPEN = "('pending', 'seated', 'releasing')"

# status IN LIVE / IN ('pending', 'seated'), optionally qualified by an alias.
_STATUS_IN = re.compile(r"(\b[a-z]\.)?status IN \('pending', 'seated'(?:, 'staked')?\)")
_UNSTATUS_IN = re.compile(r"\(((\b[a-z]\.)?status IN \([^()]*\)) AND (?:[a-z]\.)?is_live\)")
_SEATED_OF_TABLE = "WHERE table_id = p_table AND status = 'seated'"
_CONFIRM_SET = "SET status = 'seated', updated_ms = p_now"


def _with_live(match: re.Match[str]) -> str:
    alias = match.group(1) or ""
    return f"({match.group(0)} AND {alias}is_live)"


def _upgrade_body(name: str, text: str) -> str:
    text = _STATUS_IN.sub(_with_live, text)
    text = text.replace(_SEATED_OF_TABLE, _SEATED_OF_TABLE + " AND is_live")
    if name == "confirm":
        if _CONFIRM_SET not in text:
            raise RuntimeError("matchmaking.confirm no longer seats with the update mm0010 edits")
        text = text.replace(_CONFIRM_SET, "SET status = 'seated'")
    return text


def _downgrade_body(name: str, text: str) -> str:
    text = _UNSTATUS_IN.sub(lambda m: m.group(1), text)
    text = text.replace(_SEATED_OF_TABLE + " AND is_live", _SEATED_OF_TABLE)
    if name == "confirm":
        text = text.replace(
            "SET status = 'seated'\n", "SET status = 'seated', updated_ms = p_now\n"
        )
    return text


def _rewrite_functions(edit: object) -> None:
    conn = op.get_bind()
    rows = conn.exec_driver_sql(
        "SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc p "
        "JOIN pg_namespace n ON n.oid = p.pronamespace "
        "WHERE n.nspname = 'matchmaking' AND p.prokind = 'f'"
    ).all()
    changed = set()
    for name, definition in rows:
        new = edit(name, definition)  # type: ignore[operator]
        if new != definition:
            op.execute(new)
            changed.add(name)
    # These read or change seats by table or player; each must have been rewritten.
    missing = {"table_json", "join", "confirm", "mark_started", "leave"} - changed
    if missing:
        raise RuntimeError(f"mm0010 found nothing to rewrite in {sorted(missing)}")


UPGRADE = [
    f"ALTER TABLE matchmaking.reservations "
    f"ADD COLUMN is_live boolean GENERATED ALWAYS AS (status IN {LIVE}) STORED, "
    f"ADD COLUMN is_open boolean GENERATED ALWAYS AS (status IN {OPEN}) STORED",
    "ALTER TABLE matchmaking.reservations SET (fillfactor = 80)",
    "DROP INDEX matchmaking.reservations_seat",
    "DROP INDEX matchmaking.reservations_player",
    "DROP INDEX matchmaking.reservations_expiry",
    "DROP INDEX matchmaking.reservations_repair",
    "CREATE UNIQUE INDEX reservations_seat ON matchmaking.reservations (table_id, seat) "
    "WHERE is_live",
    "CREATE UNIQUE INDEX reservations_player ON matchmaking.reservations (player_id, table_id) "
    "WHERE is_live",
    "CREATE INDEX reservations_expiry ON matchmaking.reservations (expires_ms) WHERE is_open",
    "CREATE INDEX reservations_repair ON matchmaking.reservations (updated_ms) WHERE is_open",
]

DOWNGRADE = [
    "DROP INDEX matchmaking.reservations_seat",
    "DROP INDEX matchmaking.reservations_player",
    "DROP INDEX matchmaking.reservations_expiry",
    "DROP INDEX matchmaking.reservations_repair",
    "ALTER TABLE matchmaking.reservations DROP COLUMN is_live, DROP COLUMN is_open",
    "ALTER TABLE matchmaking.reservations RESET (fillfactor)",
    f"CREATE UNIQUE INDEX reservations_seat ON matchmaking.reservations (table_id, seat) "
    f"WHERE status IN {LIVE}",
    f"CREATE UNIQUE INDEX reservations_player ON matchmaking.reservations "
    f"(player_id, table_id) WHERE status IN {LIVE}",
    "CREATE INDEX reservations_expiry ON matchmaking.reservations (expires_ms) "
    "WHERE status = 'seated'",
    "CREATE INDEX reservations_repair ON matchmaking.reservations (updated_ms) "
    "WHERE status IN ('pending', 'releasing')",
]


def upgrade() -> None:
    for statement in UPGRADE:
        op.execute(statement)
    _rewrite_functions(_upgrade_body)


def downgrade() -> None:
    _rewrite_functions(_downgrade_body)
    for statement in DOWNGRADE:
        op.execute(statement)
