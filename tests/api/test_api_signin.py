"""Sign-in hardening: the limiter (no lockout by others, guessing still stopped), client
addresses behind proxies, same-origin JSON only, the password policy and Argon2id."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from litestar.datastructures import Headers, State
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from api import accounts, passwords
from api.app import create_app
from api.security import (
    ACCOUNT_FAILURES,
    ADDRESS_ATTEMPTS,
    ADDRESS_FAILURES,
    PAIR_FREE_FAILURES,
    PAIR_MAX_DELAY_S,
    LeakyCounter,
    SignInLimits,
    client_address,
    parse_networks,
)
from launcher.demo import DEMO_PASSWORD
from services.common.config import ConfigError, load_settings
from services.common.db import create_engine
from services.common.errors import ServiceError
from services.common.migrate import upgrade
from services.common.serve import uvicorn_options
from tests.api.api_helpers import PASSWORD, make_user
from tests.conftest import make_settings
from tests.uvicorn_server import UvicornServer


@pytest.fixture(scope="module")
def gateway_db(database_url: str) -> Iterator[str]:
    upgrade(database_url, ["gateway"])
    yield database_url


@pytest.fixture
def app(gateway_db, internal_secret):
    return create_app(make_settings(gateway_db, internal_secret))


def allowed(limits: SignInLimits, account: str, address: str, now: float) -> bool:
    try:
        limits.check(account, address, now)
    except ServiceError as exc:
        assert exc.status == 429 and exc.code == "rate_limited"
        return False
    return True


def fail(limits: SignInLimits, account: str, address: str, now: float) -> bool:
    """One wrong-password attempt; whether the limiter let it through."""
    if not allowed(limits, account, address, now):
        return False
    limits.failed(account, address, now)
    return True


# --- the limiter ---------------------------------------------------------------------------


def test_failures_from_one_address_do_not_stop_the_owner_from_another():
    limits = SignInLimits()
    now = 1000.0
    attacker, owner = "203.0.113.7", "198.51.100.20"
    for _ in range(PAIR_FREE_FAILURES):
        assert fail(limits, "ana", attacker, now)
    assert not allowed(limits, "ana", attacker, now)  # the guesser waits
    # Hours of guessing at the pace the waits allow, still from that one address.
    for _ in range(200):
        now += PAIR_MAX_DELAY_S
        fail(limits, "ana", attacker, now)
    assert allowed(limits, "ana", owner, now)  # the owner is not locked out
    limits.succeeded("ana", owner, now)


def test_waits_of_one_pair_double_up_to_the_cap_and_a_success_resets_them():
    limits = SignInLimits()
    now = 0.0
    for _ in range(PAIR_FREE_FAILURES):
        assert fail(limits, "bo", "192.0.2.1", now)
    waits = []
    for _ in range(14):
        wait = limits.pair_blocked_for("bo", "192.0.2.1", now)
        waits.append(wait)
        assert not allowed(limits, "bo", "192.0.2.1", now + wait - 0.01)
        now += wait
        assert fail(limits, "bo", "192.0.2.1", now)
    assert waits[:5] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert max(waits) == PAIR_MAX_DELAY_S
    now += PAIR_MAX_DELAY_S
    assert allowed(limits, "bo", "192.0.2.1", now)
    limits.succeeded("bo", "192.0.2.1", now)
    assert limits.pair_blocked_for("bo", "192.0.2.1", now) == 0.0


def test_one_address_guessing_across_many_accounts_is_stopped():
    limits = SignInLimits()
    now = 0.0
    # A burst: the per-address attempt limit.
    results = [fail(limits, f"user{i}", "203.0.113.9", now) for i in range(ADDRESS_ATTEMPTS + 5)]
    assert results.count(True) == ADDRESS_ATTEMPTS and not results[-1]
    # Slow and steady (within the attempt limit): the per-address failure limit an hour.
    limits = SignInLimits()
    passed = 0
    last = []
    for i in range(3 * ADDRESS_FAILURES):
        now += 2.0  # 30 a minute
        last.append(fail(limits, f"user{i}", "203.0.113.9", now))
    passed = last.count(True)
    # 10 minutes: an hour's allowance and what drained meanwhile, then one in a while.
    assert passed <= ADDRESS_FAILURES + now * ADDRESS_FAILURES / 3600 + 1
    assert last[-30:].count(True) <= 2
    # An IPv6 guesser does not get a fresh address per guess: the /64 is the unit.
    limits = SignInLimits()
    v6 = [fail(limits, f"u{i}", f"2001:db8:1:2::{i:x}", 0.0) for i in range(ADDRESS_ATTEMPTS + 1)]
    assert not v6[-1]


def test_many_addresses_guessing_one_account_are_stopped_but_not_its_known_address():
    limits = SignInLimits()
    now = 0.0
    assert allowed(limits, "cy", "198.51.100.5", now)
    limits.succeeded("cy", "198.51.100.5", now)  # the owner's usual address
    passed = 0
    for i in range(1000):  # a botnet: every guess from a new address
        passed += fail(limits, "cy", f"10.{i // 250}.{i % 250}.1", now)
    assert passed == ACCOUNT_FAILURES  # then the account's ceiling stops them all
    assert not allowed(limits, "cy", "10.200.0.1", now)
    assert allowed(limits, "cy", "198.51.100.5", now)  # the owner still gets in
    assert allowed(limits, "cy", "10.200.0.1", now + 3600.0)  # and newcomers after the hour


def test_limiter_memory_is_bounded():
    limits = SignInLimits(max_keys=100)
    for i in range(5000):
        limits.failed(f"user{i}", f"10.0.{i // 250}.{i % 250}", float(i))
        limits.succeeded(f"user{i}", f"10.1.{i // 250}.{i % 250}", float(i))
    assert max(limits.sizes()) <= 100


# --- client addresses ----------------------------------------------------------------------


def connection(peer: str, forwarded: list[str], proxies: tuple[str, ...]) -> Any:
    raw = [(b"x-forwarded-for", v.encode()) for v in forwarded]
    state = State({"trusted_proxies": parse_networks(proxies)})
    return SimpleNamespace(
        scope={"client": (peer, 5000)}, headers=Headers(raw), app=SimpleNamespace(state=state)
    )


def test_x_forwarded_for_counts_only_from_a_configured_proxy():
    # No proxies configured: the header is the client's word, ignored.
    assert client_address(connection("127.0.0.1", ["1.2.3.4"], ())) == "127.0.0.1"
    # From a proxy: the rightmost address that is not a proxy; what the client wrote to its
    # left is ignored.
    proxies = ("10.0.0.0/8", "127.0.0.1")
    assert client_address(connection("127.0.0.1", ["6.6.6.6, 1.2.3.4"], proxies)) == "1.2.3.4"
    assert client_address(connection("127.0.0.1", ["9.9.9.9", "1.2.3.4, 10.1.1.1"], proxies)) == (
        "1.2.3.4"
    )
    # From a peer that is not a proxy: ignored.
    assert client_address(connection("5.5.5.5", ["1.2.3.4"], proxies)) == "5.5.5.5"
    # Garbage: the last address a proxy vouched for.
    assert client_address(connection("127.0.0.1", ["junk, 10.2.2.2"], proxies)) == "10.2.2.2"
    assert client_address(connection("127.0.0.1", ["[2001:db8::1]"], proxies)) == "2001:db8::1"


def test_trusted_proxies_setting():
    settings = load_settings({"MESA_TRUSTED_PROXIES": "10.0.0.0/8, 127.0.0.1,::1"})
    assert settings.trusted_proxies == ("10.0.0.0/8", "127.0.0.1/32", "::1/128")
    assert load_settings({}).trusted_proxies == ()
    with pytest.raises(ConfigError, match="MESA_TRUSTED_PROXIES"):
        load_settings({"MESA_TRUSTED_PROXIES": "10.0.0.0/8,proxy.example"})


ATTEMPTS = 4


async def test_rotating_x_forwarded_for_does_not_escape_the_address_limit(gateway_db, app):
    """Served as `mesa serve` serves it (uvicorn's options included): a client on loopback
    rotating X-Forwarded-For is still one address."""
    limits = SignInLimits(clock=lambda: 0.0)  # time stands still: nothing drains
    limits.per_address = LeakyCounter(ATTEMPTS, 60.0)  # a smaller limit, for fewer hashes
    app.state.sign_in_limits = limits
    async with (
        UvicornServer(app, **uvicorn_options()) as served,
        httpx.AsyncClient(base_url=served.url) as client,
    ):
        codes = []
        for i in range(ATTEMPTS + 1):
            r = await client.post(
                "/api/auth/login",
                json={"username": f"nobody{i}", "password": "wrong password"},
                headers={"X-Forwarded-For": f"198.18.{i // 250}.{i % 250 + 1}"},
            )
            codes.append(r.status_code)
    assert codes == [401] * ATTEMPTS + [429]


# --- same-origin JSON only -----------------------------------------------------------------

SIGN_IN_BODIES = {
    "/api/auth/login": {"username": "dee", "password": PASSWORD},
    "/api/auth/tokens": {"username": "dee", "password": PASSWORD},
    "/api/auth/register": {"username": "deenew", "password": "a fine long passphrase"},
}


@pytest.mark.parametrize("path", list(SIGN_IN_BODIES))
async def test_sign_in_takes_only_same_origin_json(app, gateway_db, path):
    await make_user(gateway_db, "dee") if path == "/api/auth/login" else None
    body = SIGN_IN_BODIES[path]
    async with AsyncTestClient(app) as client:
        form = await client.post(path, data=body)  # what a cross-site <form> can send
        assert form.status_code == 403 and form.json()["error"] == "json_required"
        as_text = await client.post(
            path, content=httpx.Request("POST", "/", json=body).content,
            headers={"Content-Type": "text/plain"},
        )  # fmt: skip
        assert as_text.status_code == 403 and as_text.json()["error"] == "json_required"
        other = await client.post(path, json=body, headers={"Origin": "https://evil.example"})
        assert other.status_code == 403 and other.json()["error"] == "cross_origin"
        site = await client.post(path, json=body, headers={"Sec-Fetch-Site": "cross-site"})
        assert site.status_code == 403 and site.json()["error"] == "cross_origin"
        ok = await client.post(
            path,
            json=body,
            headers={"Origin": "http://testserver.local", "Sec-Fetch-Site": "same-origin"},
        )
        assert ok.status_code in (200, 201), ok.text


# --- passwords -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("username", "password", "why"),
    [
        ("erin", "short1234", "10 to 200"),  # 9 characters
        ("erin", "QwertyUiop", "too common"),  # listed, any case
        ("erin", "password1234", "too common"),  # listed
        ("erin", "Dragon2026!!", "too common"),  # a listed word and a few digits or marks
        ("longusername", "LongUserName", "user name"),
    ],
)
async def test_weak_passwords_are_refused(app, username, password, why):
    async with AsyncTestClient(app) as client:
        r = await client.post(
            "/api/auth/register", json={"username": username, "password": password}
        )
    assert r.status_code == 400 and r.json()["error"] == "weak_password"
    assert why in r.json()["detail"]


def test_the_shipped_list_and_the_demo_password():
    common = passwords.common_passwords()
    assert len(common) > 5000 and "123456" in common and "qwertyuiop" in common
    passwords.check_new_password(DEMO_PASSWORD, "ana")  # the demo's own password passes
    passwords.check_new_password(PASSWORD, "ana")


def legacy_scrypt_hash(password: str) -> str:
    """A hash as the gateway stored them before Argon2id."""
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=2**14, r=8, p=1, dklen=32)
    return f"scrypt${2**14}$8$1${salt.hex()}${digest.hex()}"


async def stored_hash(db: Any, user: str) -> str:
    async with db.connect() as conn:
        value: str = (
            await conn.execute(
                text("SELECT password_hash FROM gateway.users WHERE id = :id"), {"id": user}
            )
        ).scalar_one()
    return value


async def test_argon2id_for_new_hashes_and_scrypt_upgraded_at_sign_in(app, gateway_db):
    db = create_engine(gateway_db)
    try:
        await accounts.create_user(db, "fay", PASSWORD)
        assert (await stored_hash(db, "fay")).startswith("$argon2id$")
        old = legacy_scrypt_hash(PASSWORD)
        async with db.begin() as conn:
            await conn.execute(
                text("UPDATE gateway.users SET password_hash = :h WHERE id = 'fay'"), {"h": old}
            )
        async with AsyncTestClient(app) as client:
            wrong = await client.post(
                "/api/auth/login", json={"username": "fay", "password": "not the password"}
            )
            assert wrong.status_code == 401
            assert await stored_hash(db, "fay") == old  # nothing upgraded on a failure
            r = await client.post("/api/auth/login", json={"username": "fay", "password": PASSWORD})
            assert r.status_code == 200, r.text
        upgraded = await stored_hash(db, "fay")
        assert upgraded.startswith("$argon2id$") and not passwords.needs_rehash(upgraded)
        assert await accounts.authenticate(db, "fay", PASSWORD) is not None
        assert await accounts.authenticate(db, "fay", PASSWORD + "x") is None
    finally:
        await db.dispose()


def test_argon2_hashes_with_other_parameters_are_rehashed():
    from argon2 import PasswordHasher

    other = PasswordHasher(time_cost=1, memory_cost=8 * 1024, parallelism=1).hash(PASSWORD)
    assert passwords.check_password(PASSWORD, other)
    assert passwords.needs_rehash(other)
    assert not passwords.needs_rehash(passwords.hash_password(PASSWORD))
    assert not passwords.check_password(PASSWORD, "not a hash")
