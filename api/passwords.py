"""Password policy and hashing for gateway accounts.

Policy (new passwords only; existing ones keep working): 10 to 200 characters, not the user
name, not in the shipped list of common and breached passwords (`api/data/common_passwords.txt`,
case-insensitive), and not such a password with digits or punctuation added at its end
(`dragon2026!` is as weak as `dragon`).

Hashing: Argon2id through argon2-cffi's `PasswordHasher` with OWASP's recommended minimum
(19 MiB, 2 passes, 1 lane): about the CPU of the scrypt it replaces. argon2-cffi's own defaults
(RFC 9106's 64 MiB, 3 passes, 4 lanes) measured about ten times that per sign-in here (800 ms
against 85 ms on the shared test machine under load), and 64 MiB for each concurrent one: on a
small gateway that would make sign-in a cheap way to exhaust CPU and memory. Accounts from before it carry scrypt hashes
(`scrypt$n$r$p$salt_hex$hash_hex`); those still verify, and `needs_rehash` tells the caller
to store an Argon2id hash at that successful sign-in.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from functools import cache
from pathlib import Path

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

MIN_PASSWORD = 10
MAX_PASSWORD = 200
# A stripped stem shorter than this is not looked up: `ab` + digits is not a known password.
MIN_STEM = 4
COMMON_PASSWORDS_FILE = Path(__file__).resolve().parent / "data" / "common_passwords.txt"

_SCRYPT_LEN = 32
_SCRYPT_MAXMEM = 64 * 1024 * 1024
_TRAILING_NOISE = re.compile(r"[\d\W_]+$")

ARGON2_MEMORY_KIB = 19 * 1024
ARGON2_TIME_COST = 2
ARGON2_PARALLELISM = 1
_hasher = PasswordHasher(
    time_cost=ARGON2_TIME_COST, memory_cost=ARGON2_MEMORY_KIB, parallelism=ARGON2_PARALLELISM
)


class PasswordRefused(Exception):
    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


@cache
def common_passwords() -> frozenset[str]:
    lines = COMMON_PASSWORDS_FILE.read_text(encoding="utf-8").splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def check_new_password(password: str, username: str) -> None:
    """Raise PasswordRefused (with a reason a person can act on) for a weak new password."""
    if not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
        raise PasswordRefused(f"password must have {MIN_PASSWORD} to {MAX_PASSWORD} characters")
    folded = password.casefold()
    if folded == username.casefold():
        raise PasswordRefused("password must not be your user name")
    common = common_passwords()
    stem = _TRAILING_NOISE.sub("", folded)
    if folded in common or (len(stem) >= MIN_STEM and stem in common):
        raise PasswordRefused("that password is too common; choose another")


def hash_password(password: str) -> str:
    """An Argon2id hash string (about 100 characters)."""
    return _hasher.hash(password)


def _scrypt_matches(password: str, stored: str) -> bool:
    parts = stored.split("$")
    if len(parts) != 6:
        return False
    try:
        n, r, p = int(parts[1]), int(parts[2]), int(parts[3])
        salt, expected = bytes.fromhex(parts[4]), bytes.fromhex(parts[5])
    except ValueError:
        return False
    if n > 2**17 or r > 16 or p > 4:
        return False
    digest = hashlib.scrypt(
        password.encode("utf-8"),
        salt=salt,
        n=n,
        r=r,
        p=p,
        dklen=_SCRYPT_LEN,
        maxmem=_SCRYPT_MAXMEM,
    )
    return hmac.compare_digest(digest, expected)


def check_password(password: str, stored: str) -> bool:
    """Whether `password` matches `stored` (Argon2id or a legacy scrypt hash)."""
    if stored.startswith("scrypt$"):
        return _scrypt_matches(password, stored)
    try:
        return _hasher.verify(stored, password)
    except (VerificationError, InvalidHashError):
        return False


def needs_rehash(stored: str) -> bool:
    """True for a legacy scrypt hash and for Argon2 with parameters other than today's."""
    if stored.startswith("scrypt$"):
        return True
    try:
        return _hasher.check_needs_rehash(stored)
    except InvalidHashError:
        return True


# A hash of a random password, checked when the user does not exist, so the time an answer
# takes does not tell which user names exist.
DUMMY_HASH = hash_password(secrets.token_hex(16))
