"""The staff audit log: every admin action is kept with who, what, when and why; admins and
auditors read it, nobody else does, and nobody (not even the schema's owner) edits it."""

from __future__ import annotations

from collections.abc import Iterator

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from api.app import create_app
from services.common.migrate import upgrade
from tests.api.api_helpers import PASSWORD, make_user, sign_in
from tests.conftest import make_settings


@pytest.fixture(scope="module")
def gateway_db(database_url: str) -> Iterator[str]:
    upgrade(database_url, ["gateway"])
    yield database_url


@pytest.fixture
def app(gateway_db, internal_secret):
    return create_app(make_settings(gateway_db, internal_secret))


async def test_admin_actions_are_logged_with_their_reason_and_read_by_auditors(app, gateway_db):
    await make_user(gateway_db, "sa_boss", "admin")
    await make_user(gateway_db, "sa_aud", "auditor")
    await make_user(gateway_db, "sa_fin", "finance")
    await make_user(gateway_db, "sa_pla")
    async with AsyncTestClient(app) as admin:
        await sign_in(admin, "sa_boss")
        r = await admin.post(
            "/api/admin/users",
            json={"username": "sa_sup", "password": PASSWORD, "role": "support"},
        )
        assert r.status_code == 201 and r.json()["role"] == "support"
        # a change without its reason is refused and changes nothing
        r = await admin.patch("/api/admin/users/sa_pla", json={"status": "locked"})
        assert r.status_code == 400
        r = await admin.patch(
            "/api/admin/users/sa_pla", json={"status": "locked", "reason": "chargeback fraud"}
        )
        assert r.status_code == 200
        page = (await admin.get("/api/staff/audit", params={"subject": "user:sa_pla"})).json()
    [lock] = page["actions"]
    assert lock["actor"] == "sa_boss" and lock["actor_role"] == "admin"
    assert lock["action"] == "admin.update_user" and lock["reason"] == "chargeback fraud"
    assert lock["detail"] == {"status": "locked"}
    async with AsyncTestClient(app) as auditor:
        await sign_in(auditor, "sa_aud")
        everything = (await auditor.get("/api/staff/audit", params={"actor": "sa_boss"})).json()
        assert [a["action"] for a in everything["actions"]] == [
            "admin.update_user",
            "admin.create_user",
        ]
        older = await auditor.get("/api/staff/audit", params={"actor": "sa_boss", "limit": 1})
        assert older.json()["next"] == everything["actions"][0]["id"]
    for name in ("sa_fin", "sa_sup"):
        async with AsyncTestClient(app) as other:
            await sign_in(other, name)
            assert (await other.get("/api/staff/audit")).status_code == 403


async def test_the_log_is_append_only_even_for_the_owner(app, gateway_db):
    await make_user(gateway_db, "sa_boss2", "admin")
    await make_user(gateway_db, "sa_pla2")
    async with AsyncTestClient(app) as admin:
        await sign_in(admin, "sa_boss2")
        r = await admin.patch(
            "/api/admin/users/sa_pla2", json={"status": "locked", "reason": "test lock"}
        )
        assert r.status_code == 200
    conn = await asyncpg.connect(gateway_db.replace("postgresql+asyncpg", "postgresql"))
    try:
        for statement in (
            "UPDATE gateway.staff_actions SET reason = 'nothing happened'",
            "DELETE FROM gateway.staff_actions",
            "TRUNCATE gateway.staff_actions",
        ):
            with pytest.raises(asyncpg.RaiseError, match="append-only"):
                await conn.execute(statement)
        assert await conn.fetchval("SELECT count(*) FROM gateway.staff_actions") >= 1
    finally:
        await conn.close()
