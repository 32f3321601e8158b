"""Apply every component's migrations: `mesa migrate` and the first step of `mesa up`.

Order matters only for the shared base (the `mesa_app` role); components never reference
each other's tables.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import re
import secrets
import sys
from base64 import b64encode
from pathlib import Path

import asyncpg
from alembic import command
from alembic.config import Config

from services.common.db import APP_ROLE, asyncpg_dsn

_SCRAM_ITERATIONS = 4096


def scram_verifier(password: str, iterations: int = _SCRAM_ITERATIONS) -> str:
    """The SCRAM-SHA-256 verifier PostgreSQL stores for `password` (RFC 5802/7677 format
    `SCRAM-SHA-256$<iter>:<salt>$<StoredKey>:<ServerKey>`). Sent instead of the password, so the
    plain password never reaches the server or its log (as psql's \\password does)."""
    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    stored_key = hashlib.sha256(client_key).digest()
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()
    return (
        f"SCRAM-SHA-256${iterations}:{b64encode(salt).decode()}"
        f"${b64encode(stored_key).decode()}:{b64encode(server_key).decode()}"
    )


def password_sql(role: str, password: str, *, login: bool = True) -> str:
    """ALTER ROLE setting `password` (as its verifier: only base64 characters, safe inline)."""
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", role):
        raise ValueError(f"unexpected role name {role!r}")
    verifier = scram_verifier(password)
    return f"ALTER ROLE {role} WITH {'LOGIN ' if login else ''}PASSWORD '{verifier}'"


ROOT = Path(__file__).resolve().parents[2]
# component -> (schema, folder holding env.py and versions/)
COMPONENTS: dict[str, tuple[str, Path]] = {
    "ledger": ("ledger", ROOT / "ledger" / "migrations"),
    "fairness": ("fairness", ROOT / "fairness" / "migrations"),
    "engine": ("engine", ROOT / "services" / "engine" / "migrations"),
    "matchmaking": ("matchmaking", ROOT / "services" / "matchmaking" / "migrations"),
    "gateway": ("gateway", ROOT / "api" / "migrations"),
    "integrity": ("integrity", ROOT / "integrity" / "migrations"),
}


class MigrationError(Exception):
    pass


async def ensure_app_role(database_url: str, login_password: str | None = None) -> None:
    """Create the application role once per cluster; the migrating user may assume it.

    With `login_password` (the embedded server's generated one), services log in as the role
    itself with that password; without, the role cannot log in and services assume it after
    logging in with the URL they were given (`role=mesa_app` at connect, services.common.db).
    """
    conn = await asyncpg.connect(asyncpg_dsn(database_url))
    try:
        try:
            await conn.execute(
                f"""
                DO $$
                BEGIN
                  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{APP_ROLE}') THEN
                    CREATE ROLE {APP_ROLE} NOLOGIN;
                  END IF;
                END $$;
                """  # noqa: S608 (APP_ROLE is this module's constant)
            )
        except asyncpg.exceptions.DuplicateObjectError:
            pass  # two migrators raced to create the role; the other one won, which is fine
        if login_password is not None:
            await conn.execute(password_sql(APP_ROLE, login_password))
        is_super = await conn.fetchval("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        if not is_super:
            await conn.execute(f"GRANT {APP_ROLE} TO current_user")
    finally:
        await conn.close()


def available_components() -> list[str]:
    return [name for name, (_, path) in COMPONENTS.items() if (path / "env.py").exists()]


def upgrade(
    database_url: str, components: list[str] | None = None, *, app_password: str | None = None
) -> list[str]:
    """Upgrade the named components (default: every one that has migrations) to head, as the
    owner `database_url` names; `app_password` lets `mesa_app` log in with it."""
    chosen = available_components() if components is None else components
    for name in chosen:
        if name not in COMPONENTS:
            raise MigrationError(f"unknown component {name!r}")
    asyncio.run(ensure_app_role(database_url, app_password))
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
    from services.common.config import PG_APP_PASSWORD_FILE, ConfigError, load_settings
    from services.common.secret_file import read_secret

    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"mesa migrate: {exc}", file=sys.stderr)
        return 2
    app_password = None
    if settings.database_is_embedded:
        path = settings.var_dir / PG_APP_PASSWORD_FILE
        app_password = read_secret(path) if path.exists() else None
    done = upgrade(settings.migration_database_url, argv or None, app_password=app_password)
    print(f"migrated: {', '.join(done) or 'nothing'}")
    return 0
