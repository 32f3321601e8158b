"""Matchmaking baseline: tables from `services.matchmaking.schema.metadata`, functions from
`services/matchmaking/sql/`, then grants.

Revision ID: mm0001
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

from pathlib import Path

from alembic import op

from services.common.schema_source import (
    apply_functions,
    create_tables,
    drop_schema_objects,
    execute_all,
)
from services.matchmaking.schema import SCHEMA, metadata

revision = "mm0001"
down_revision = None
branch_labels = None
depends_on = None

FUNCTIONS = Path(__file__).resolve().parents[2] / "sql"

# Requests past their retention are deleted by the sweeper; seats and tables only change.
GRANTS = (
    "GRANT USAGE ON SCHEMA matchmaking TO mesa_app",
    "GRANT SELECT, INSERT, UPDATE ON matchmaking.tables, matchmaking.reservations, "
    "matchmaking.requests TO mesa_app",
    "GRANT DELETE ON matchmaking.requests TO mesa_app",
    "GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA matchmaking TO mesa_app",
)


def upgrade() -> None:
    bind = op.get_bind()
    create_tables(bind, metadata)
    apply_functions(bind, FUNCTIONS, SCHEMA)
    execute_all(bind, GRANTS)


def downgrade() -> None:
    drop_schema_objects(op.get_bind(), metadata, SCHEMA)
