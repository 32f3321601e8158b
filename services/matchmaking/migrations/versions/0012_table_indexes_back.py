"""matchmaking: the table indexes of mm0011 back as they were (no measured gain, a costlier pick)

Revision ID: mm0012
Revises: mm0011
Create Date: 2026-11-29

mm0011 made a join's `taken` change on its table a HOT update (lobby index without `taken`,
repair index on `id`, fillfactor 70). 60% of table updates became HOT and the WAL per join
fell a little more (about 7,740 -> 7,530 bytes), but in alternating runs neither throughput
nor PostgreSQL's CPU per join improved (296 and 456 seated/s against 390 and 470-478 for the
code before mm0010, at load 2.5-5.7), and without `taken` in the lobby index the quick join
reads and sorts every waiting table of its kind, full ones included, instead of stopping at
the first free one in index order. Buffers touched per call were not a usable guide here:
they vary by a factor of four between runs of the same schema (the table's `FOR UPDATE`
lookup 4 and 18 buffers), with the contention on the few hot table rows. This puts back the
indexes mm0010 left.
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
