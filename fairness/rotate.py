"""`mesa audit rotate-key --new-key FILE`: the operator rotates the log's signing key.

The current key signs a key_rotation record naming the new key and the log appends it; only
then is the new key published and the key file switched to it (the old key kept beside it as
`<file>.retired-<key id>`). Verifiers follow the chain of rotation records from the first key
they pinned (docs/fairness.md 4.6), so a key the log never announced is never trusted. Running
engines sign with the key they loaded at start: restart them after a rotation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from fairness.keys import OperatorKey, private_key_pem, rotation_entry
from fairness.log_store import LogError, LogStore


@dataclass(frozen=True, slots=True)
class Rotated:
    old_key_id: str
    new_key_id: str
    leaf_index: int
    retired_file: Path


def _write_private(path: Path, data: bytes) -> None:
    """Write a 0600 file atomically (a crash leaves the old file or the new one, never half)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


async def rotate_key(
    store: LogStore, new: OperatorKey, key_file: Path, now: datetime | None = None
) -> Rotated:
    """Announce `new` with the store's current key, then switch `key_file` to it."""
    old = store.key
    if new.key_id == old.key_id:
        raise LogError("the new key is the current key")
    if not await store.register_key():
        raise LogError("the current key is not announced in the log: it cannot announce another")
    retired = key_file.with_name(f"{key_file.name}.retired-{old.key_id[:16]}")
    # the old key first, so the operator never holds only a key the log does not know yet
    _write_private(retired, private_key_pem(old.private_key))
    appended = await store.append(rotation_entry(old, new, now or datetime.now(UTC)))
    if not await LogStore(store.pool, new, store.origin).register_key():
        raise LogError("the log does not trust the new key after its announcement")
    _write_private(key_file, private_key_pem(new.private_key))
    return Rotated(old.key_id, new.key_id, appended.index, retired)
