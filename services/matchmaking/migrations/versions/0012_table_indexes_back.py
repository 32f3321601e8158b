"""matchmaking: the table indexes of mm0011 back as they were (it cost more than it saved)

Revision ID: mm0012
Revises: mm0011
Create Date: 2026-11-29

mm0011 made a join's `taken` change on its table a HOT update (lobby index without `taken`,
repair index on `id`, fillfactor 70). Measured with `BENCH_MATCHMAKING_PG_PROFILE=1`, back to
back against mm0010 alone: 60% of table updates became HOT and the WAL per join fell a
little more (7,746 -> 7,522 bytes), but the buffers touched per call rose (join 51 -> 128,
the table's `FOR UPDATE` lookup 4 -> 26, the quick-join pick 13 -> 33) and PostgreSQL's CPU
per join with them (1.97 -> 2.37 ms): without `taken` in the lobby index the quick join
reads and sorts every waiting table of the kind, full ones included, and the table rows'
HOT chains are walked on every lookup of those hot rows. This puts back mm0010's indexes.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from alembic import op

revision = "mm0012"
down_revision = "mm0011"
branch_labels = None
depends_on = None


def _mm0011() -> tuple[list[str], list[str]]:
    path = Path(__file__).with_name("0011_hot_table_seats.py")
    spec = importlib.util.spec_from_file_location("mm_0011_hot_table_seats", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.UPGRADE), list(module.DOWNGRADE)


def upgrade() -> None:
    for statement in _mm0011()[1]:
        op.execute(statement)


def downgrade() -> None:
    for statement in _mm0011()[0]:
        op.execute(statement)
