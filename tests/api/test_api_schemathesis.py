"""Schemathesis against the gateway's own OpenAPI description, the real services behind it.

Every operation of `/schema/openapi.json` is fuzzed as each role (anonymous, player, finance,
auditor, admin, support; bearer tokens from `POST /api/auth/tokens`) with valid and invalid data
(schemathesis' positive and negative modes; unexpected fields included). Each response must
be no 5xx, carry a documented status code and content type, and match the documented schema.

Schemathesis drives ASGI apps from its own event-loop thread, so the whole platform (ledger,
engine, matchmaking and gateway, `tests/api/platform_stack.py`) is started inside the lifespan
of one ASGI app that schemathesis owns: every service shares that loop. Reproducible in CI:
Hypothesis is derandomized and keeps no example database.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from litestar import Litestar
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.generation import GenerationMode
from schemathesis.python import asgi as schemathesis_asgi

from services.common.migrate import upgrade
from tests.api.api_helpers import PASSWORD, make_user
from tests.api.platform_stack import COMPONENTS, platform

# Examples per operation, role and generation mode: the whole file stays well under 90 s on two
# cores. Raise locally (MESA_SCHEMATHESIS_EXAMPLES) for a deeper run.
MAX_EXAMPLES = 5
ROLES: dict[str, str | None] = {
    "anonymous": None,
    "player": "st_player",
    "finance": "st_fin",
    "auditor": "st_aud",
    "admin": "st_adm",
    "support": "st_sup",
}
# Operations whose success changes the caller's own account: they get their own user so the
# fuzzing of the other operations keeps a usable session.
OWN_USER: dict[str, str] = {
    "POST /api/me/self-exclusion": "st_excl",
    "POST /api/auth/logout": "st_bye",
}
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


class PlatformApp:
    """One ASGI app for schemathesis: its lifespan runs the whole platform on the caller's loop."""

    def __init__(self, database_url: str, secret: bytes, key_dir: Path) -> None:
        self.database_url = database_url
        self.secret = secret
        self.key_dir = key_dir
        self.gateway: Litestar | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if self.gateway is None:
            raise RuntimeError("platform not started")
        await self.gateway(scope, receive, send)

    async def _lifespan(self, receive: Any, send: Any) -> None:
        await receive()  # lifespan.startup
        try:
            async with platform(self.database_url, self.secret, self.key_dir) as p:
                # The per-credential request limit would answer most of a fuzzing run 429.
                p.gateway.state.request_limits = None
                self.gateway = p.gateway
                await send({"type": "lifespan.startup.complete"})
                await receive()  # lifespan.shutdown
                self.gateway = None
        except Exception as exc:  # reported to schemathesis as a failed startup
            await send({"type": "lifespan.startup.failed", "message": repr(exc)})
            return
        await send({"type": "lifespan.shutdown.complete"})


class Stack:
    def __init__(self, schema: Any, headers: dict[str, dict[str, str]], match_id: str) -> None:
        self.schema = schema
        self.headers = headers
        # A live CPU match of `st_player`: the player's valid cases on the table routes use it,
        # so they reach the engine's seat view, feed, chat and action checks.
        self.match_id = match_id


@pytest.fixture(scope="module")
def stack(database_url: str, internal_secret: bytes, tmp_path_factory: Any) -> Iterator[Stack]:
    upgrade(database_url, COMPONENTS)
    users = {
        "st_player": "player",
        "st_excl": "player",
        "st_bye": "player",
        "st_fin": "finance",
        "st_aud": "auditor",
        "st_adm": "admin",
        "st_sup": "support",
    }

    async def create_users() -> None:
        for name, role in users.items():
            await make_user(database_url, name, role)

    asyncio.run(create_users())
    app = PlatformApp(database_url, internal_secret, tmp_path_factory.mktemp("keys"))
    schema = schemathesis.openapi.from_asgi("/schema/openapi.json", app)
    schema.config.generation.update(
        modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
        allow_extra_parameters=True,
        allow_x00=True,
        deterministic=True,
    )
    headers: dict[str, dict[str, str]] = {}
    with schemathesis_asgi.get_client(app) as client:
        for name in users:
            r = client.post(
                "/api/auth/tokens", json={"username": name, "password": PASSWORD, "label": "st"}
            )
            if r.status_code != 201:
                raise RuntimeError(f"token for {name}: {r.status_code} {r.text}")
            headers[name] = {"Authorization": f"Bearer {r.json()['token']}"}
        # Money for the player, so paid tables get past the wallet check into matchmaking.
        r = client.post(
            "/api/finance/deposits",
            json={"player": "st_player", "amount": 100_000, "reference": "schemathesis"},
            headers=headers["st_fin"],
        )
        if r.status_code != 200:
            raise RuntimeError(f"deposit: {r.status_code} {r.text}")
        r = client.post(
            "/api/lobby/cpu", json={"kind": "apuesta-parejas"}, headers=headers["st_player"]
        )
        if r.status_code != 200 or not r.json().get("match_id"):
            raise RuntimeError(f"cpu table: {r.status_code} {r.text}")
        match_id: str = r.json()["match_id"]
    try:
        yield Stack(schema, headers, match_id)
    finally:
        schemathesis_asgi.shutdown_lifespans()


def _check_operation(
    operation: Any,
    mode: GenerationMode,
    headers: dict[str, str],
    counter: list[int],
    path_parameters: dict[str, str] | None = None,
) -> None:
    checks = [*CHECKS, negative_data_rejection] if mode is GenerationMode.NEGATIVE else CHECKS
    strategy = operation.as_strategy(generation_mode=mode, path_parameters=path_parameters)

    @given(case=strategy)
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],
    )
    def run(case: Any) -> None:
        counter[0] += 1
        case.call_and_validate(headers=headers, checks=checks)

    run()


def _summary(exc: BaseException) -> str:
    text = str(exc)
    cut = text.find("Reproduce with:")
    return (text[:cut] if cut > 0 else text)[:1200].strip()


def _fuzz(stack: Stack, role: str) -> tuple[int, list[str]]:
    counter = [0]
    failures: list[str] = []
    for result in stack.schema.get_all_operations():
        operation = result.ok()
        label = operation.label
        user = ROLES[role]
        if user is not None:
            user = OWN_USER.get(label, user)
        headers = stack.headers[user] if user is not None else {}
        modes = [GenerationMode.POSITIVE]
        if any(True for _ in operation.iter_parameters()) or len(list(operation.body)) > 0:
            modes.append(GenerationMode.NEGATIVE)
        for mode in modes:
            try:
                _check_operation(operation, mode, headers, counter)
                if user == ROLES["player"] and "{match_id}" in operation.path:
                    fixed = {"match_id": stack.match_id}
                    _check_operation(operation, mode, headers, counter, fixed)
            except Unsatisfiable:
                continue  # nothing here can be made invalid (a free-form path segment only)
            except (Exception, BaseExceptionGroup) as exc:  # every failing operation is reported
                failures.append(f"[{role}] {label} ({mode.value}): {_summary(exc)}")
    return counter[0], failures


@pytest.mark.parametrize("role", list(ROLES))
def test_schemathesis_finds_no_5xx_and_nothing_outside_the_schema(stack: Stack, role: str) -> None:
    started = time.monotonic()
    sent, failures = _fuzz(stack, role)
    print(f"{role}: {sent} requests in {time.monotonic() - started:.1f}s")
    assert not failures, f"{len(failures)} failing:\n\n" + "\n\n".join(failures)
    assert sent > 0
