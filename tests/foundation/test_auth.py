"""Service credentials: short-lived HMAC tokens."""

from __future__ import annotations

import secrets

import pytest

from services.common.auth import (
    AuthError,
    caller_from_header,
    header_value,
    mint_token,
    verify_token,
)

SECRET = secrets.token_bytes(32)


def test_round_trip_names_the_caller():
    assert verify_token(SECRET, mint_token(SECRET, "matchmaking")) == "matchmaking"
    assert caller_from_header(SECRET, header_value(SECRET, "engine")) == "engine"


def test_expired_token_is_refused():
    token = mint_token(SECRET, "engine", ttl_s=60, now_ms=1_000_000)
    with pytest.raises(AuthError, match="expired"):
        verify_token(SECRET, token, now_ms=1_000_000 + 61_000)


def test_token_from_another_secret_is_refused():
    token = mint_token(secrets.token_bytes(32), "engine")
    with pytest.raises(AuthError, match="signature"):
        verify_token(SECRET, token)


def test_tampered_caller_is_refused():
    token = mint_token(SECRET, "engine")
    forged = token.replace("v1.engine.", "v1.gateway.")
    with pytest.raises(AuthError):
        verify_token(SECRET, forged)


@pytest.mark.parametrize(
    "value", [None, "", "Bearer x", "MesaService nonsense", "MesaService v1.a.b.c"]
)
def test_missing_or_malformed_header_is_refused(value):
    with pytest.raises(AuthError):
        caller_from_header(SECRET, value)


def test_overlong_lifetime_is_refused():
    token = mint_token(SECRET, "engine", ttl_s=3600)
    with pytest.raises(AuthError, match="lifetime"):
        verify_token(SECRET, token)
