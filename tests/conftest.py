"""Shared fixtures: one PostgreSQL per test session, a fresh database per test module.

The embedded server uses password authentication like `mesa up`'s; its superuser URL (with
the generated password) is the cluster's base URL. `MESA_TEST_DATABASE_URL` (a superuser URL) points the tests at an external server instead of
starting the embedded one. Each module gets its own database, so modules never see each
other's rows and may run their own migrations.
"""

from __future__ import annotations

import os
import re
import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from launcher.embedded_pg import EmbeddedPostgres
from services.common.config import Settings
from services.common.ports import free_port, free_ports
from services.common.serve import PORT_VARIABLES


class PgCluster:
    def __init__(self, base_url: str, server: EmbeddedPostgres | None) -> None:
        self.base_url = base_url
        self.server = server

    def url(self, database: str) -> str:
        parts = urlsplit(self.base_url)
        return urlunsplit((parts.scheme, parts.netloc, f"/{database}", parts.query, ""))

    async def _admin(self, sql: str) -> None:
        conn = await asyncpg.connect(self.url("postgres"))
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    def create_database(self, prefix: str = "t") -> str:
        import asyncio

        name = f"{re.sub(r'[^a-z0-9_]', '_', prefix.lower())[:40]}_{secrets.token_hex(4)}"
        asyncio.run(self._admin(f'CREATE DATABASE "{name}"'))
        return self.url(name)

    def drop_database(self, url: str) -> None:
        import asyncio

        name = urlsplit(url).path.lstrip("/")
        asyncio.run(self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    external = os.environ.get("MESA_TEST_DATABASE_URL")
    if external:
        yield PgCluster(external, None)
        return
    data_dir = Path(tempfile.mkdtemp(prefix="mesa-test-pg-"))
    # Ours, just made: the server's own user (when we are root) may pass through, not list.
    data_dir.chmod(0o711)
    server = EmbeddedPostgres(data_dir / "data", free_port())
    server.start()
    try:
        yield PgCluster(server.url("postgres"), server)
    finally:
        server.stop()
        import shutil

        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def database_url(pg_cluster: PgCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh, empty database for this test module (superuser URL)."""
    import asyncio

    from services.common.migrate import ensure_app_role

    url = pg_cluster.create_database(request.module.__name__.rsplit(".", 1)[-1])
    asyncio.run(ensure_app_role(url))
    try:
        yield url
    finally:
        pg_cluster.drop_database(url)


@pytest.fixture(scope="session")
def internal_secret() -> bytes:
    return secrets.token_bytes(32)


def make_settings(database_url: str, internal_secret: bytes, **overrides: object) -> Settings:
    """Settings for a service under test: given database, given secret, no files touched."""
    values: dict[str, object] = {
        "env": "test",
        "database_url": database_url,
        "database_is_embedded": False,
        "internal_secret": internal_secret,
        "var_dir": Path(tempfile.gettempdir()) / "mesa-test-var",
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


def platform_port_env() -> dict[str, str]:
    """Distinct free ports for a whole platform (`mesa up`): PostgreSQL and each service."""
    names = ["MESA_PG_PORT", *PORT_VARIABLES.values()]
    return {name: str(port) for name, port in zip(names, free_ports(len(names)), strict=True)}
