"""Operator Ed25519 key: load from env or file, create a development key, publish public keys.

Sources, in order: `MESA_OPERATOR_KEY` (hex of the 32-byte private seed),
`MESA_OPERATOR_KEY_FILE` (a file holding a PKCS#8 PEM private key or the 64-hex seed),
else an explicit path (`mesa up` passes `var/operator_key.pem` through `ensure_dev_key`).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
    load_pem_public_key,
)

from fairness.commitments import key_id, key_rotation_record, raw_public_key, sign_record

ENV_KEY = "MESA_OPERATOR_KEY"
ENV_KEY_FILE = "MESA_OPERATOR_KEY_FILE"
DEV_KEY_PATH = Path("var") / "operator_key.pem"
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")


class OperatorKeyError(ValueError):
    """A key that cannot be loaded (bad hex, not Ed25519, missing file)."""


@dataclass(frozen=True, slots=True)
class OperatorKey:
    private_key: Ed25519PrivateKey

    @property
    def public_key(self) -> Ed25519PublicKey:
        return self.private_key.public_key()

    @property
    def public_raw(self) -> bytes:
        return raw_public_key(self.public_key)

    @property
    def key_id(self) -> str:
        return key_id(self.public_raw)

    def public_pem(self) -> str:
        return self.public_key.public_bytes(
            Encoding.PEM, PublicFormat.SubjectPublicKeyInfo
        ).decode()

    def public_hex(self) -> str:
        return self.public_raw.hex()

    def seat_label(self, match_id: str, player_id: str | None) -> str | None:
        """A player's pseudonym in one match's public records: stable within the match,
        unlinkable across matches without the operator's key (None stays None: a CPU seat)."""
        if player_id is None:
            return None
        label_key = hashlib.sha256(b"mesa-seat-label-v1|" + self.private_raw).digest()
        mac = hmac.new(label_key, f"{match_id}|{player_id}".encode(), hashlib.sha256)
        return "p-" + mac.hexdigest()[:20]

    @property
    def private_raw(self) -> bytes:
        return self.private_key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())

    def published(self) -> dict[str, str]:
        """What the gateway serves for this key."""
        return {"key_id": self.key_id, "public_key": self.public_hex(), "pem": self.public_pem()}


def private_key_from_text(text: str | bytes) -> Ed25519PrivateKey:
    """Parse a PKCS#8 PEM Ed25519 private key, or the hex of its 32-byte seed."""
    data = text.encode() if isinstance(text, str) else text
    stripped = data.strip()
    if stripped.startswith(b"-----BEGIN"):
        try:
            key = load_pem_private_key(stripped, password=None)
        except (ValueError, TypeError) as exc:
            raise OperatorKeyError(f"cannot read PEM private key: {exc}") from exc
        if not isinstance(key, Ed25519PrivateKey):
            raise OperatorKeyError("PEM private key is not Ed25519")
        return key
    hex_text = stripped.decode("ascii", errors="replace")
    if _HEX64.fullmatch(hex_text) is None:
        raise OperatorKeyError("operator key must be PEM or 64 hex digits (32-byte seed)")
    return Ed25519PrivateKey.from_private_bytes(bytes.fromhex(hex_text))


def public_key_from_text(text: str | bytes) -> Ed25519PublicKey:
    """Parse a SubjectPublicKeyInfo PEM public key, or 64 hex digits of the raw key."""
    data = text.encode() if isinstance(text, str) else text
    stripped = data.strip()
    if stripped.startswith(b"-----BEGIN"):
        try:
            key = load_pem_public_key(stripped)
        except (ValueError, TypeError) as exc:
            raise OperatorKeyError(f"cannot read PEM public key: {exc}") from exc
        if not isinstance(key, Ed25519PublicKey):
            raise OperatorKeyError("PEM public key is not Ed25519")
        return key
    hex_text = stripped.decode("ascii", errors="replace")
    if _HEX64.fullmatch(hex_text) is None:
        raise OperatorKeyError("public key must be PEM or 64 hex digits")
    return Ed25519PublicKey.from_public_bytes(bytes.fromhex(hex_text))


def private_key_pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())


def load_operator_key(
    path: str | Path | None = None, env: Mapping[str, str] | None = None
) -> OperatorKey:
    env = os.environ if env is None else env
    if env.get(ENV_KEY):
        return OperatorKey(private_key_from_text(env[ENV_KEY]))
    file_name = env.get(ENV_KEY_FILE) or (str(path) if path is not None else None)
    if not file_name:
        raise OperatorKeyError(f"no operator key: set {ENV_KEY} or {ENV_KEY_FILE}")
    try:
        data = Path(file_name).read_bytes()
    except OSError as exc:
        raise OperatorKeyError(f"cannot read operator key file {file_name}: {exc}") from exc
    return OperatorKey(private_key_from_text(data))


def ensure_dev_key(path: str | Path = DEV_KEY_PATH) -> OperatorKey:
    """Load the development key at `path`, creating it (mode 0600) on first start.

    Environment variables still take precedence, so production never uses this file.
    """
    if os.environ.get(ENV_KEY) or os.environ.get(ENV_KEY_FILE):
        return load_operator_key()
    p = Path(path)
    if not p.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
        key = Ed25519PrivateKey.generate()
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(private_key_pem(key))
        return OperatorKey(key)
    return load_operator_key(p, env={})


def rotation_entry(old: OperatorKey, new: OperatorKey, time: datetime) -> dict[str, object]:
    """Signed key-rotation log record: the old key names the new public key."""
    record = key_rotation_record(old_key_id=old.key_id, new_public_key=new.public_raw, time=time)
    return sign_record(old.private_key, record)
