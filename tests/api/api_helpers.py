"""Helpers for the gateway tests: the app with its own migrations, users, signed-in clients."""

from __future__ import annotations

from typing import Any

from api import accounts
from services.common.db import create_engine

PASSWORD = "correct horse battery"


async def make_user(database_url: str, name: str, role: str = "player") -> None:
    engine = create_engine(database_url)
    try:
        await accounts.create_user(engine, name, PASSWORD, role)
    finally:
        await engine.dispose()


async def sign_in(client: Any, name: str, password: str = PASSWORD) -> str:
    """Sign in with a cookie session; returns the CSRF token (also set as header default)."""
    response = await client.post("/api/auth/login", json={"username": name, "password": password})
    if response.status_code != 200:
        raise RuntimeError(f"sign-in failed: {response.status_code} {response.text}")
    token: str = response.json()["csrf_token"]
    client.headers["X-CSRF-Token"] = token
    return token


async def bearer(client: Any, name: str) -> dict[str, str]:
    response = await client.post(
        "/api/auth/tokens", json={"username": name, "password": PASSWORD, "label": "test"}
    )
    if response.status_code != 201:
        raise RuntimeError(f"token failed: {response.status_code} {response.text}")
    return {"Authorization": f"Bearer {response.json()['token']}"}
