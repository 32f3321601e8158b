"""Service credentials: short-lived HMAC tokens naming the caller and the callee."""

from __future__ import annotations

import secrets

import pytest

from services.common.auth import (
    AuthError,
    Forbidden,
    check_audience,
    check_caller,
    header_value,
    mint_token,
    token_from_header,
    verify_token,
)

SECRET = secrets.token_bytes(32)


def test_round_trip_names_the_caller_and_the_audience():
    token = verify_token(SECRET, mint_token(SECRET, "matchmaking", "ledger"))
    assert (token.caller, token.audience) == ("matchmaking", "ledger")
    assert token_from_header(SECRET, header_value(SECRET, "engine", "ledger")).caller == "engine"


def test_expired_token_is_refused():
    token = mint_token(SECRET, "engine", "ledger", ttl_s=60, now_ms=1_000_000)
    with pytest.raises(AuthError, match="expired"):
        verify_token(SECRET, token, now_ms=1_000_000 + 61_000)


def test_token_from_another_secret_is_refused():
    token = mint_token(secrets.token_bytes(32), "engine", "ledger")
    with pytest.raises(AuthError, match="signature"):
        verify_token(SECRET, token)


@pytest.mark.parametrize(("old", "new"), [("v2.engine.", "v2.gateway."), (".ledger.", ".engine.")])
def test_tampered_caller_or_audience_is_refused(old, new):
    token = mint_token(SECRET, "engine", "ledger")
    forged = token.replace(old, new, 1)
    assert forged != token
    with pytest.raises(AuthError, match="signature"):
        verify_token(SECRET, forged)


def test_a_token_for_another_service_or_caller_is_forbidden():
    token = verify_token(SECRET, mint_token(SECRET, "gateway", "engine"))
    check_audience(token, "engine")
    with pytest.raises(Forbidden, match="for engine, not ledger"):
        check_audience(token, "ledger")
    check_caller("gateway", frozenset({"gateway"}), "/x")
    with pytest.raises(Forbidden, match="may not call"):
        check_caller("engine", frozenset({"gateway"}), "/x")
    with pytest.raises(Forbidden, match="declares no callers"):
        check_caller("gateway", None, "/x")


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "Bearer x",
        "MesaService nonsense",
        "MesaService v1.a.b.c",  # the old format: no audience
        "MesaService v2.a.b.c",
        "MesaService v2.a.b.99999999999999999999.c",
    ],
)
def test_missing_or_malformed_header_is_refused(value):
    with pytest.raises(AuthError):
        token_from_header(SECRET, value)


def test_overlong_lifetime_is_refused():
    token = mint_token(SECRET, "engine", "ledger", ttl_s=3600)
    with pytest.raises(AuthError, match="lifetime"):
        verify_token(SECRET, token)
