"""Every route, every role, malformed input: always a 4xx with a reason, never a 5xx.

A home-made walk of the OpenAPI description, complementing the property-based run in
test_api_schemathesis.py: it sends hand-picked hostile values (wrong types, unknown fields,
huge numbers, traversal-like path segments, odd bodies) to each route with cookie sessions.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from services.common.migrate import upgrade
from tests.api.api_helpers import make_user, sign_in
from tests.api.platform_stack import COMPONENTS, platform

BODIES: list[Any] = [
    None,
    {},
    [],
    "x",
    {"unknown": 1},
    {"kind": "apuesta-parejas", "tier": "999"},
    {"player": "ana", "amount": -5, "reference": "x"},
    {"player": "ana", "amount": 10**30, "reference": "x"},
    {"seq": -1, "action": {"type": "play", "tile": "9-9"}},
    {"username": "a" * 500, "password": "b"},
    {"kind": "phrase", "code": "<script>"},
    {"days": 10**9},
    {"invite_code": "!!"},
]
PATH_VALUES = ["x", "0", "..%2F..%2Finternal", "a" * 300, "%00", "m-1/1.d"]
QUERIES = [
    "",
    "?after=-1",
    "?after=abc",
    "?limit=100000",
    "?by=evil",
    "?first=5&second=1",
    "?leaf_index=99999999&tree_size=1",
    "?status=nope",
    "?since=yesterday",
    "?wait_ms=999999",
]


@pytest.fixture(scope="module")
def fuzz_db(database_url: str) -> str:
    upgrade(database_url, COMPONENTS)
    return database_url


async def test_api_no_5xx_on_bad_input_for_any_role(fuzz_db, internal_secret, tmp_path):
    roles = {"fz_player": "player", "fz_aud": "auditor", "fz_fin": "finance", "fz_adm": "admin"}
    for name, role in roles.items():
        await make_user(fuzz_db, name, role)
    async with platform(fuzz_db, internal_secret, tmp_path) as p:
        async with p.client() as anon:
            schema = (await anon.get("/schema/openapi.json")).json()
        routes = [(path, method.upper()) for path, ops in schema["paths"].items() for method in ops]
        assert len(routes) >= 40
        failures: list[str] = []
        sent = 0
        for name in [None, *roles]:
            async with p.client() as client:
                if name is not None:
                    await sign_in(client, name)
                for path, method in routes:
                    if path.startswith("/api/auth/"):
                        continue  # sign-in limits are covered in test_api_auth
                    concrete = [re.sub(r"\{[^}]+\}", v, path) for v in PATH_VALUES[:2]]
                    for url in concrete:
                        if method == "GET":
                            for q in QUERIES:
                                r = await client.get(url + q)
                                sent += 1
                                if r.status_code >= 500 or not r.headers.get("content-type"):
                                    failures.append(f"{name} GET {url}{q} -> {r.status_code}")
                        else:
                            for body in BODIES:
                                kwargs: dict[str, Any] = {} if body is None else {"json": body}
                                r = await client.request(method, url, **kwargs)
                                sent += 1
                                if r.status_code >= 500:
                                    failures.append(
                                        f"{name} {method} {url} {body!r:.60} -> {r.status_code} {r.text[:120]}"
                                    )
                                elif r.status_code >= 400 and "error" not in r.json():
                                    failures.append(f"{name} {method} {url}: no error code")
        assert sent > 1000
        assert not failures, failures[:20]
