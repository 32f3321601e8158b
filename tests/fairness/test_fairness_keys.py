"""Operator keys: env, files (PEM and hex), development key, rotation records."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fairness.commitments import SignatureError, key_id, record_type, verify_signed
from fairness.keys import (
    ENV_KEY,
    ENV_KEY_FILE,
    OperatorKeyError,
    ensure_dev_key,
    load_operator_key,
    private_key_pem,
    public_key_from_text,
    rotation_entry,
)

SEED_HEX = "8d405a0d7487d0e0ede671b748066f747bb6e4145b5af924daba9d338f8306d4"
PUB_HEX = "dd3a98ff95923d2bb18ecd69712414a0304e512267cc3814cbb640721f8ffc67"


def test_env_hex_key() -> None:
    key = load_operator_key(env={ENV_KEY: SEED_HEX})
    assert key.public_hex() == PUB_HEX
    assert key.key_id == key_id(bytes.fromhex(PUB_HEX))
    assert set(key.published()) == {"key_id", "public_key", "pem"}


def test_key_files_pem_and_hex(tmp_path: Path) -> None:
    key = load_operator_key(env={ENV_KEY: SEED_HEX})
    pem = tmp_path / "k.pem"
    pem.write_bytes(private_key_pem(key.private_key))
    assert load_operator_key(env={ENV_KEY_FILE: str(pem)}).key_id == key.key_id
    hexfile = tmp_path / "k.hex"
    hexfile.write_text(SEED_HEX + "\n")
    assert load_operator_key(hexfile, env={}).key_id == key.key_id
    pub = public_key_from_text(key.public_pem())
    assert pub.public_bytes_raw().hex() == PUB_HEX


@pytest.mark.parametrize("value", ["zz", "00" * 31, "-----BEGIN PRIVATE KEY-----\nxx\n"])
def test_bad_keys(value: str) -> None:
    with pytest.raises(OperatorKeyError):
        load_operator_key(env={ENV_KEY: value})


def test_missing_key() -> None:
    with pytest.raises(OperatorKeyError):
        load_operator_key(env={})
    with pytest.raises(OperatorKeyError):
        load_operator_key("/nonexistent/key", env={})


def test_dev_key_created_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_KEY, raising=False)
    monkeypatch.delenv(ENV_KEY_FILE, raising=False)
    path = tmp_path / "var" / "operator_key.pem"
    first = ensure_dev_key(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert ensure_dev_key(path).key_id == first.key_id
    monkeypatch.setenv(ENV_KEY, SEED_HEX)
    assert ensure_dev_key(path).public_hex() == PUB_HEX


def test_rotation_record_signed_by_old_key(tmp_path: Path) -> None:
    old = load_operator_key(env={ENV_KEY: SEED_HEX})
    new = load_operator_key(env={ENV_KEY: "11" * 32})
    entry = rotation_entry(old, new, datetime(2026, 5, 1, tzinfo=UTC))
    assert record_type(entry) == "key_rotation"
    record = verify_signed(entry, {old.key_id: old.public_raw})
    assert record["new_public_key"] == new.public_hex()
    assert record["new_key_id"] == new.key_id
    with pytest.raises(SignatureError):
        verify_signed(entry, {new.key_id: new.public_raw})
