"""Generated secrets kept in files under var/: readable by their owner only, from the first byte.

A secret is written to a temporary file opened with O_CREAT|O_EXCL and mode 0600 in the same
folder, fsynced, then linked into place: no reader ever sees a partial or world-readable file,
and when two first starts race, the first link wins and both use its value.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

SECRET_FILE_MODE = 0o600
_MAX_SECRET_BYTES = 4096


class SecretFileError(Exception):
    pass


def read_secret(path: Path) -> str:
    """The secret in `path`; refuses a file that others may read or write."""
    st = path.stat()
    if st.st_mode & 0o077:
        raise SecretFileError(
            f"{path} may be read by others (mode {stat.S_IMODE(st.st_mode):o}); "
            f"chmod 600 it, or delete it to have a new one generated"
        )
    if st.st_size > _MAX_SECRET_BYTES:
        raise SecretFileError(f"{path} is larger than {_MAX_SECRET_BYTES} bytes")
    value = path.read_text().strip()
    if not value:
        raise SecretFileError(f"{path} is empty; delete it to have a new one generated")
    return value


def write_secret_file(path: Path, value: str, uid: int | None = None) -> None:
    """Write `value` to `path` (which must not exist yet) atomically, mode 0600, owned by `uid`
    when given (e.g. a file another system user must read). Raises FileExistsError when it does."""
    folder = path.parent
    for _ in range(100):
        tmp = folder / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, SECRET_FILE_MODE)
            break
        except FileExistsError:
            continue
    else:
        raise SecretFileError(f"could not create a temporary file in {folder}")
    try:
        with os.fdopen(fd, "w") as f:
            if uid is not None:
                os.fchown(f.fileno(), uid, -1)
            f.write(value + "\n")
            f.flush()
            os.fsync(f.fileno())
        # link, not replace: a value another process wrote first is never overwritten.
        os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_folder(folder)


def ensure_secret(path: Path, nbytes: int = 32) -> tuple[str, bool]:
    """The secret in `path`, generated (hex, `nbytes` random bytes) if the file does not exist.
    Returns (value, created)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            write_secret_file(path, secrets.token_hex(nbytes))
            return read_secret(path), True
        except FileExistsError:
            pass
    return read_secret(path), False


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems (and macOS for folders) do not support it
    finally:
        os.close(fd)
