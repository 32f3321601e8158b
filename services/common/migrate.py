"""Apply every component's migrations: `mesa migrate` and the first step of `mesa up`.

Order matters only for the shared base (the `mesa_app` role); components never reference
each other's tables.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import asyncpg
from alembic import command
from alembic.config import Config

from services.common.db import APP_ROLE, asyncpg_dsn

ROOT = Path(__file__).resolve().parents[2]
# component -> (schema, folder holding env.py and versions/)
COMPONENTS: dict[str, tuple[str, Path]] = {
    "ledger": ("ledger", ROOT / "ledger" / "migrations"),
    "fairness": ("fairness", ROOT / "fairness" / "migrations"),
    "engine": ("engine", ROOT / "services" / "engine" / "migrations"),
    "matchmaking": ("matchmaking", ROOT / "services" / "matchmaking" / "migrations"),
    "gateway": ("gateway", ROOT / "api" / "migrations"),
}


class MigrationError(Exception):
    pass


async def ensure_app_role(database_url: str) -> None:
    """Create the application role once per cluster; the migrating user may assume it."""
    conn = await asyncpg.connect(asyncpg_dsn(database_url))
    try:
        await conn.execute(
            f"""
            DO $$
            BEGIN
              IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{APP_ROLE}') THEN
                CREATE ROLE {APP_ROLE} NOLOGIN;
              END IF;
            END $$;
            """
        )
        is_super = await conn.fetchval("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        if not is_super:
            await conn.execute(f"GRANT {APP_ROLE} TO current_user")
    except asyncpg.exceptions.DuplicateObjectError:
        # Two migrators raced to create the role; the other one won, which is fine.
        pass
    finally:
        await conn.close()


def available_components() -> list[str]:
    return [name for name, (_, path) in COMPONENTS.items() if (path / "env.py").exists()]


def upgrade(database_url: str, components: list[str] | None = None) -> list[str]:
    """Upgrade the named components (default: every one that has migrations) to head."""
    chosen = available_components() if components is None else components
    for name in chosen:
        if name not in COMPONENTS:
            raise MigrationError(f"unknown component {name!r}")
    asyncio.run(ensure_app_role(database_url))
    for name in chosen:
        _, path = COMPONENTS[name]
        if not (path / "env.py").exists():
            raise MigrationError(f"component {name!r} has no migrations at {path}")
        cfg = Config()
        cfg.set_main_option("script_location", str(path))
        cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
        command.upgrade(cfg, "head")
    return chosen


def main(argv: list[str]) -> int:
    from services.common.config import ConfigError, load_settings

    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"mesa migrate: {exc}", file=sys.stderr)
        return 2
    done = upgrade(settings.database_url, argv or None)
    print(f"migrated: {', '.join(done) or 'nothing'}")
    return 0
