"""Fresh server seeds from the operating system's CSPRNG (never reused, one per deal)."""

from __future__ import annotations

import secrets

from fairness.shuffle import SERVER_SEED_BYTES


def new_server_seed() -> bytes:
    """32 fresh bytes from `secrets` (os.urandom); call once per deal, redeals included."""
    return secrets.token_bytes(SERVER_SEED_BYTES)
