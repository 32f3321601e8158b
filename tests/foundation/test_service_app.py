"""Every service: /health, 401 without a service credential, request ids, 4xx error bodies."""

from __future__ import annotations

import os

import httpx
import msgspec
from litestar import Request, get, post
from litestar.params import JSONBody
from litestar.testing import AsyncTestClient

from services.common.app import create_service_app
from services.common.auth import callers_opt, header_value
from services.common.errors import conflict
from services.common.http import InternalClient, RemoteError
from services.common.logging import current_request_id, new_request_id
from tests.conftest import make_settings


class Echo(msgspec.Struct, forbid_unknown_fields=True):
    amount_cents: int


class Seen(msgspec.Struct):
    request_id: str | None
    caller: str | None


@get("/internal/seen", opt=callers_opt("gateway", "matchmaking"))
async def seen(request: Request) -> Seen:  # type: ignore[type-arg]
    return Seen(request_id=current_request_id(), caller=request.scope["state"].get("caller"))


@post("/internal/echo", opt=callers_opt("gateway", "matchmaking"))
async def echo(data: JSONBody[Echo]) -> Echo:
    if data.amount_cents == 409:
        raise conflict("already_done", "that was done before")
    return data


@post("/internal/echo-once", opt=callers_opt("gateway"))
async def echo_once(request: Request, data: JSONBody[Echo]) -> bool:  # type: ignore[type-arg]
    # True when the handler got the very value the strict check decoded: one decode a body.
    from services.common.strict_json import decoded_body

    done, value = decoded_body(request)
    return done and value is data


def _app(database_url, secret, **kw):
    settings = make_settings(database_url, secret)
    return create_service_app("ledger", settings, [seen, echo, echo_once], **kw), settings


async def test_a_body_is_decoded_once_strictly(database_url, internal_secret):
    app, settings = _app(database_url, internal_secret)
    auth = {"Authorization": header_value(settings.internal_secret, "gateway", "ledger")}
    async with AsyncTestClient(app) as client:
        once = await client.post("/internal/echo-once", json={"amount_cents": 5}, headers=auth)
        lax = await client.post("/internal/echo-once", json={"amount_cents": 5.0}, headers=auth)
        deep = await client.post(
            "/internal/echo-once", content=b'{"amount_cents":' + b"[" * 5000, headers=auth
        )
    assert once.status_code == 201 and once.json() is True
    assert lax.status_code == 400 and lax.json()["error"] == "invalid_request"
    assert deep.status_code == 400 and deep.json()["error"] == "invalid_request"


async def test_health_reports_service_version_and_database(database_url, internal_secret):
    app, _ = _app(database_url, internal_secret)
    async with AsyncTestClient(app) as client:
        response = await client.get("/health")
    assert response.status_code == 200
    assert response.json() == {"service": "ledger", "version": "0.1.0", "database": "ok"}


async def test_health_is_503_when_database_is_unreachable(internal_secret):
    from services.common.ports import free_port

    unreachable = f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere"
    app, _ = _app(unreachable, internal_secret)
    async with AsyncTestClient(app) as client:
        response = await client.get("/health")
    assert response.status_code == 503
    assert response.json()["database"] == "unavailable"


async def test_internal_route_without_credential_is_401(database_url, internal_secret):
    app, _ = _app(database_url, internal_secret)
    async with AsyncTestClient(app) as client:
        response = await client.get("/internal/seen")
        forged = await client.get(
            "/internal/seen",
            headers={"Authorization": header_value(b"x" * 32, "gateway", "ledger")},
        )
    assert response.status_code == 401
    assert response.json()["error"] == "unauthorized"
    assert response.headers["x-request-id"]
    assert forged.status_code == 401


async def test_request_id_is_accepted_echoed_and_bound(database_url, internal_secret):
    app, _ = _app(database_url, internal_secret)
    headers = {
        "Authorization": header_value(internal_secret, "gateway", "ledger"),
        "X-Request-ID": "req-42",
    }
    async with AsyncTestClient(app) as client:
        response = await client.get("/internal/seen", headers=headers)
        created = await client.get(
            "/internal/seen", headers={"Authorization": headers["Authorization"]}
        )
    assert response.status_code == 200
    assert response.headers["x-request-id"] == "req-42"
    assert response.json() == {"request_id": "req-42", "caller": "gateway"}
    assert len(created.headers["x-request-id"]) == 32


async def test_service_errors_and_bad_bodies_are_4xx_with_reason(database_url, internal_secret):
    app, _ = _app(database_url, internal_secret)
    auth = {"Authorization": header_value(internal_secret, "gateway", "ledger")}
    async with AsyncTestClient(app) as client:
        refused = await client.post("/internal/echo", json={"amount_cents": 409}, headers=auth)
        unknown_field = await client.post(
            "/internal/echo", json={"amount_cents": 1, "extra": 2}, headers=auth
        )
        wrong_type = await client.post("/internal/echo", json={"amount_cents": [1]}, headers=auth)
        not_json = await client.post("/internal/echo", content=b"{", headers=auth)
    assert refused.status_code == 409
    assert refused.json() == {"error": "already_done", "detail": "that was done before"}
    for response in (unknown_field, wrong_type, not_json):
        assert response.status_code == 400, response.text
        assert response.json()["error"] == "invalid_request"


async def test_internal_client_carries_credential_and_request_id(database_url, internal_secret):
    from structlog.contextvars import bind_contextvars, unbind_contextvars

    app, settings = _app(database_url, internal_secret)
    async with AsyncTestClient(app) as test_client:
        client = InternalClient(
            "http://testserver",
            settings,
            caller="matchmaking",
            audience="ledger",
            transport=httpx.ASGITransport(app=test_client.app),
        )
        bind_contextvars(request_id="carried-7")
        try:
            result = await client.get("/internal/seen", Seen)
            try:
                await client.post("/internal/echo", Echo(amount_cents=409), Echo)
            except RemoteError as exc:
                error = exc
        finally:
            unbind_contextvars("request_id")
            await client.aclose()
    assert result == Seen(request_id="carried-7", caller="matchmaking")
    assert (error.status, error.code) == (409, "already_done")


async def test_metrics_are_exposed_with_bounded_labels(database_url, internal_secret):
    app, _ = _app(database_url, internal_secret)
    auth = {"Authorization": header_value(internal_secret, "gateway", "ledger")}
    async with AsyncTestClient(app) as client:
        await client.get("/internal/seen", headers=auth)
        response = await client.get("/metrics")
    assert response.status_code == 200
    assert 'route="/internal/seen"' in response.text
    assert "mesa_http_request_duration_seconds_bucket" in response.text


def test_request_ids_are_random_distinct_and_not_shared_with_a_fork() -> None:
    ids = [new_request_id() for _ in range(3 * 512 + 7)]  # across refills of the supply
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, then exit without running the test session's code
        os.write(write, "".join(new_request_id() for _ in range(4)).encode())
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    child = os.read(read, 4 * 32).decode()
    os.close(read)
    assert status == 0
    mine = "".join(new_request_id() for _ in range(4))
    assert child != mine  # the child did not inherit the parent's unused supply
