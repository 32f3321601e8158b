"""A whole platform in one process that logs as `mesa serve` does, then is sent failing and
malformed requests carrying live credentials (test_api_log_secrets runs it).

    python -m tests.api.log_probe DATABASE_URL LOG_FORMAT LOG_LEVEL KEY_DIR USER

Logging is configured before anything else (the services' loggers are cached on first use);
the log goes to stderr, and stdout gets one JSON object: the secrets that were live.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import secrets
import sys
from pathlib import Path
from typing import Any


def main(argv: list[str]) -> int:
    from services.common.logging import configure_logging

    database_url, log_format, level, key_dir, user = argv
    configure_logging("probe", log_format, level)
    found = asyncio.run(probe(database_url, Path(key_dir), user))
    print(json.dumps(found))
    return 0


async def probe(database_url: str, key_dir: Path, user: str) -> dict[str, str]:
    import httpx
    import structlog
    from litestar import Request, get, post

    from services.common.auth import callers_opt, header_value
    from tests.api.api_helpers import PASSWORD, bearer, make_user, sign_in
    from tests.api.platform_stack import platform

    secret = secrets.token_bytes(32)
    await make_user(database_url, user)

    @get("/api/probe/boom")
    async def gateway_boom(request: Request[Any, Any, Any]) -> None:
        headers = dict(request.headers)  # noqa: F841 (what a traceback's locals would show)
        cookies = request.cookies
        raise RuntimeError(
            f"careless: {request.headers.get('authorization')} {request.headers.get('cookie')} "
            f"{cookies} csrf={request.headers.get('x-csrf-token')}"
        )

    @post("/v1/probe/boom", opt=callers_opt("gateway"))
    async def ledger_boom(request: Request[Any, Any, Any], data: dict[str, Any]) -> None:
        raise RuntimeError(f"careless: Authorization: {request.headers.get('authorization')}")

    async with platform(database_url, secret, key_dir) as p:
        p.gateway.register(gateway_boom)
        p.services["ledger"].register(ledger_boom)
        async with p.client() as cookie_client, p.client() as bearer_client:
            csrf = await sign_in(cookie_client, user)
            session = str(cookie_client.cookies.get("mesa_session"))
            device = str(cookie_client.cookies.get("mesa_device"))
            auth = await bearer(bearer_client, user)
            token = auth["Authorization"].removeprefix("Bearer ")
            bearer_client.headers.update(auth)
            seeds = await fail_a_match_actor(p, bearer_client, database_url)
            for client in (cookie_client, bearer_client):
                await client.get("/api/probe/boom")
                for body in (b"{", b"[" * 100_000, b'{"unknown": 1}', b"\xff"):
                    await client.post("/api/lobby/quick-join", content=body)
                    await client.post("/api/matches/m-1/actions", content=body)
                await client.get("/api/nope")
                await client.get("/api/admin/users")  # a player may not
                await client.post("/api/finance/deposits", json={"player": user})
                await client.get("/%00")
                await client.get("/" + "a" * 50_000)
                await client.post("/api/auth/logout", headers={"x-csrf-token": "wrong"})
                await client.post(
                    "/api/auth/login",
                    json={"username": user, "password": PASSWORD, "extra": csrf},
                )
                await client.post("/api/auth/login", content=b'{"username": "x", "password": ')
            # The internal services, called with a live service credential.
            service_token = header_value(secret, "gateway", "ledger")
            for name, app in p.services.items():
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(transport=transport, base_url="http://s") as s:
                    s.headers["authorization"] = (
                        service_token if name == "ledger" else header_value(secret, "gateway", name)
                    )
                    await s.post("/v1/probe/boom", json={"a": 1})
                    await s.get("/v1/nope")
                    for path in ("/v1/join/quick", "/v1/holds", "/internal/matches/m-1/actions"):
                        await s.post(path, content=b"[" * 100_000)
                        await s.post(path, content=b"{")
                    await s.get("/v1/wallets/x", headers={"authorization": f"Bearer {token}"})
            log = structlog.get_logger()
            log.info(
                "probe_careless",
                headers=dict(cookie_client.headers),
                password=PASSWORD,
                body={"username": user, "password": PASSWORD},
                internal=service_token,
            )

    async def fails() -> None:
        raise RuntimeError(f"task failed, Cookie: mesa_session={session}; Bearer {token}")

    task = asyncio.get_running_loop().create_task(fails())
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    del task
    gc.collect()
    try:
        raise ValueError(f"header Authorization: {service_token}")
    except ValueError:
        logging.getLogger("uvicorn.error").exception("Exception in ASGI application")
    return {
        "cookie session": session,
        "device cookie": device,
        "csrf token": csrf,
        "bearer token": token,
        "service token": service_token.rsplit(".", 1)[1],
        "password": PASSWORD,
        "internal secret": secret.hex(),
        **seeds,
    }


async def fail_a_match_actor(p: Any, client: Any, database_url: str) -> dict[str, str]:
    """A match against the CPU whose actor then fails in a step that holds the match (its
    unrevealed server seed) in a local variable: the engine logs `match_actor_failed` with the
    traceback. Returns the match's server seeds, as the match log holds them."""
    import asyncpg

    from services.common.errors import ServiceError

    r = await client.post("/api/lobby/cpu", json={"kind": "apuesta-1v1"})
    if r.status_code != 200:
        raise RuntimeError(f"no CPU match: {r.status_code} {r.text}")
    match_id = str(r.json()["match_id"])
    conn = await asyncpg.connect(database_url)
    try:
        rows: list[Any] = []
        for _ in range(400):  # until the first deal's seed round is open (bounded)
            records = await conn.fetch(
                "SELECT record FROM engine.match_log WHERE match_id = $1", match_id
            )
            rows = [json.loads(r["record"]) for r in records]
            rows = [r for r in rows if r.get("t") == "open"]
            if rows:
                break
            await asyncio.sleep(0.05)
        if not rows:
            raise RuntimeError("the match opened no seed round")
        actor = p.services["engine"].state.engine.actors[match_id]

        async def failing_step() -> None:
            match = actor.match  # noqa: F841 (the dealing state, seed included)
            raise RuntimeError("probe: a step failed while dealing")

        try:
            await actor.call(failing_step)
        except ServiceError:
            pass
    finally:
        await conn.close()
    seeds = [str(row["server_seed"]) for row in rows]
    found = {f"server seed {n} (hex)": seed for n, seed in enumerate(seeds)}
    for n, seed in enumerate(seeds):
        found[f"server seed {n} (bytes)"] = repr(bytes.fromhex(seed))[2:34]
    return found


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
