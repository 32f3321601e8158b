"""matchmaking: a join reads its players' waiting seats once (no per-candidate probe, no replanning)

Revision ID: mm0013
Revises: mm0012
Create Date: 2026-11-29

`join` counted the players' waiting seats (too_many_tables) in one statement, then the quick
join's table choice probed each candidate table for those players again (`NOT EXISTS` over
`reservations`). Both statements named the players as `player_id = ANY (p_players)`, and a
generic plan assumes an array parameter holds ten elements where a join passes one or two: the
generic plans always looked costlier than the custom ones, so PL/pgSQL planned both statements
afresh on every call (pg_stat_statements with `track_planning`: one planning per call for each,
0.04-0.2 ms each, against one per session for every other statement of the join).

Now one statement reads the players' 'pending'/'seated' seats (the players named one by one,
`player_id IN (p_players[1], p_players[2])`, as generic as it is custom): their count per
player bounds the waiting tables as before, and their tables start the quick join's `excluded`
list, so the table choice is one index walk of `tables_lobby` with no subquery. Same answers:
a waiting table holds only 'pending' and 'seated' seats (a seat becomes 'staked' only as its
table leaves 'waiting', and a table goes back to 'waiting' only from 'starting', before any
seat is staked), and the check of the chosen table's occupants under its lock, and the unique
(player, table) index, still stand behind it. A join names one or two players (a partner).
"""

from __future__ import annotations

from alembic import op

revision = "mm0013"
down_revision = "mm0012"
branch_labels = None
depends_on = None

_OLD_COUNT = """    SELECT coalesce(max(c), 0) INTO most FROM (
        SELECT count(*) AS c FROM matchmaking.reservations
        WHERE player_id = ANY (p_players) AND (status IN ('pending', 'seated') AND is_live)
        GROUP BY player_id) x;
"""
_NEW_COUNT = """    IF n NOT IN (1, 2) THEN
        RAISE EXCEPTION USING ERRCODE = 'MM400', MESSAGE = 'bad_players',
            DETAIL = 'a join seats one player or two partners';
    END IF;
    -- mm0013: the players' waiting seats, read once: a count per player, and their tables
    -- are no candidates for the quick join (a waiting table has no 'staked' seat).
    SELECT greatest(count(*) FILTER (WHERE player_id = p_players[1]),
                    count(*) FILTER (WHERE player_id = p_players[2])),
           coalesce(array_agg(table_id), '{}')
    INTO most, excluded
    FROM matchmaking.reservations
    WHERE player_id IN (p_players[1], p_players[2])
      AND (status IN ('pending', 'seated') AND is_live);
"""
_OLD_PROBE = """              AND x.id <> ALL (excluded)
              AND NOT EXISTS (SELECT 1 FROM matchmaking.reservations r
                              WHERE r.table_id = x.id AND r.player_id = ANY (p_players)
                                AND (r.status IN ('pending', 'seated', 'staked') AND r.is_live))
"""
_NEW_PROBE = """              AND x.id <> ALL (excluded)
"""


def _join_definition() -> str:
    text: str = (
        op.get_bind()
        .exec_driver_sql(
            "SELECT pg_get_functiondef(p.oid) FROM pg_proc p "
            "JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = 'matchmaking' AND p.proname = 'join'"
        )
        .scalar_one()
    )
    return text


def _rewrite(pairs: list[tuple[str, str]]) -> None:
    text = _join_definition()
    for old, new in pairs:
        if text.count(old) != 1:
            raise RuntimeError("matchmaking.join no longer has the statement mm0013 rewrites")
        text = text.replace(old, new)
    op.execute(text)


def upgrade() -> None:
    _rewrite([(_OLD_COUNT, _NEW_COUNT), (_OLD_PROBE, _NEW_PROBE)])


def downgrade() -> None:
    _rewrite([(_NEW_COUNT, _OLD_COUNT), (_NEW_PROBE, _OLD_PROBE)])
