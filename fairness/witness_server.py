"""`mesa audit witness serve`: a C2SP tlog-witness (https://c2sp.org/tlog-witness) anyone can run.

The log pushes each new checkpoint with `POST /add-checkpoint` (an `old <size>` line, the
RFC 6962 consistency proof from that size, a blank line, the checkpoint note). The witness
checks the log's signature, that `old` is the size it cosigned last for that origin and the
proof, then records the checkpoint and answers its Ed25519 cosignature (C2SP
tlog-cosignature/v1, timestamped). It never cosigns a smaller tree or another root for a size
it has seen: that is what makes a split view visible.

State: one JSON file (the latest cosigned checkpoint per origin), replaced atomically (write,
fsync, rename) before the answer is sent; the check and the update happen under one lock, so
two concurrent requests cannot roll the state back (tlog-witness's race). A lock file keeps a
second server off the same state folder.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import fcntl
import hashlib
import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fairness.merkle import EMPTY_ROOT, HASH_SIZE, ProofError, verify_consistency
from fairness.tlog import (
    ALG_COSIGNATURE_V1,
    Checkpoint,
    NoteError,
    Verifier,
    cosign,
    parse_checkpoint,
    split_note,
    verifier_key,
    verify_note,
)

SIZE_MEDIA_TYPE = "text/x.tlog.size"
MAX_BODY_BYTES = 64 * 1024  # 63 proof lines and a checkpoint with a few signatures fit easily
MAX_PROOF_LINES = 63  # tlog-witness: a client MUST NOT send more
MAX_LOGS = 1000
STATE_FILE = "witness-state.json"
LOCK_FILE = "witness.lock"
_OLD_RE = re.compile(r"old (0|[1-9][0-9]{0,19})")


class WitnessError(Exception):
    """A refusal with its HTTP status (tlog-witness assigns one to each)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class Conflict(WitnessError):
    def __init__(self, latest_size: int) -> None:
        super().__init__(409, f"{latest_size}\n")
        self.latest_size = latest_size


@dataclass(frozen=True, slots=True)
class AddCheckpoint:
    old_size: int
    proof: list[bytes]
    note: str


def parse_request(body: bytes) -> AddCheckpoint:
    """The add-checkpoint body; WitnessError(400) when it is not well formed."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise WitnessError(400, "body is not UTF-8") from None
    head, sep, note = text.partition("\n\n")
    if not sep:
        raise WitnessError(400, "no blank line between the proof and the checkpoint")
    lines = head.split("\n")
    m = _OLD_RE.fullmatch(lines[0])
    if m is None:
        raise WitnessError(400, "first line must be `old <size>`")
    if len(lines) - 1 > MAX_PROOF_LINES:
        raise WitnessError(400, f"more than {MAX_PROOF_LINES} consistency proof lines")
    proof = []
    for line in lines[1:]:
        try:
            h = base64.b64decode(line, validate=True)
        except binascii.Error:
            raise WitnessError(400, "a proof line is not base64") from None
        if len(h) != HASH_SIZE:
            raise WitnessError(400, "a proof line is not a 32-byte hash")
        proof.append(h)
    return AddCheckpoint(int(m.group(1)), proof, note)


@dataclass
class WitnessState:
    """The latest cosigned checkpoint per origin, kept in `folder`/witness-state.json."""

    folder: Path
    logs: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, folder: Path) -> WitnessState:
        path = folder / STATE_FILE
        if not path.exists():
            return cls(folder)
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict) or not isinstance(doc.get("logs"), dict):
            raise ValueError(f"{path} is not a witness state file")
        return cls(folder, dict(doc["logs"]))

    def latest(self, origin: str) -> tuple[int, bytes] | None:
        entry = self.logs.get(origin)
        if entry is None:
            return None
        return int(entry["size"]), base64.b64decode(entry["root"])

    def note(self, origin: str) -> str | None:
        entry = self.logs.get(origin)
        return None if entry is None else str(entry["note"])

    def record(self, cp: Checkpoint, cosigned_note: str) -> None:
        logs = dict(self.logs)
        logs[cp.origin] = {
            "size": cp.size,
            "root": base64.b64encode(cp.root).decode(),
            "note": cosigned_note,
        }
        tmp = self.folder / (STATE_FILE + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"logs": logs}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.folder / STATE_FILE)
        dir_fd = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename itself survives a crash
        finally:
            os.close(dir_fd)
        self.logs = logs  # only once it is on disk


class Witness:
    """The witness's checks and state, independent of HTTP."""

    def __init__(
        self,
        name: str,
        key: Ed25519PrivateKey,
        log_keys: Mapping[str, Sequence[Verifier]],
        state_dir: Path,
        clock: Any = time.time,
    ) -> None:
        if len(log_keys) > MAX_LOGS:
            raise ValueError(f"a witness follows at most {MAX_LOGS} logs")
        self.name = name
        self.key = key
        self.log_keys = {origin: list(keys) for origin, keys in log_keys.items()}
        state_dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            raise ValueError(f"another witness uses the state folder {state_dir}") from None
        self.state = WitnessState.load(state_dir)
        self.clock = clock
        self._lock = asyncio.Lock()

    def close(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = -1

    def verifier_key(self) -> str:
        from fairness.commitments import raw_public_key

        return verifier_key(self.name, raw_public_key(self.key.public_key()), ALG_COSIGNATURE_V1)

    async def add_checkpoint(self, req: AddCheckpoint) -> str:
        """The cosignature line for the request's checkpoint, or WitnessError."""
        try:
            body, _ = split_note(req.note)
            cp = parse_checkpoint(body)
        except NoteError as exc:
            raise WitnessError(400, f"not a checkpoint note: {exc}") from None
        keys = self.log_keys.get(cp.origin)
        if keys is None:
            raise WitnessError(404, "unknown log origin")
        try:
            verify_note(req.note, keys)
        except NoteError as exc:
            raise WitnessError(403, f"the log's signature does not verify: {exc}") from None
        if req.old_size > cp.size:
            raise WitnessError(400, "old size is larger than the checkpoint size")
        async with self._lock:  # check and record as one step: no rollback by a race
            latest = self.state.latest(cp.origin)
            latest_size, latest_root = latest if latest is not None else (0, EMPTY_ROOT)
            if req.old_size != latest_size:
                raise Conflict(latest_size)
            if cp.size == 0 and cp.root != EMPTY_ROOT:
                raise WitnessError(422, "an empty tree has the empty root")
            if req.old_size == 0:
                if req.proof:
                    raise WitnessError(422, "a proof from size 0 must be empty")
            else:
                try:
                    verify_consistency(req.old_size, cp.size, latest_root, cp.root, req.proof)
                except ProofError as exc:
                    raise WitnessError(422, f"inconsistent: {exc}") from None
            line = cosign(body, self.name, self.key, int(self.clock()))
            trusted = {(k.name, k.hash) for k in keys}
            log_lines = "".join(
                s.line() for s in split_note(req.note)[1] if (s.name, s.key_hash) in trusted
            )
            # served to monitors: the log's verified signature(s) and this cosignature
            self.state.record(cp, body + "\n" + log_lines + line)
        return line


def origin_hash(origin: str) -> str:
    return hashlib.sha256(origin.encode()).hexdigest()


def make_app(witness: Witness) -> web.Application:
    """The HTTP face: POST /add-checkpoint, GET /<sha256(origin) hex>/checkpoint."""

    async def add_checkpoint(request: web.Request) -> web.Response:
        try:
            body = await request.content.read(MAX_BODY_BYTES + 1)
            if len(body) > MAX_BODY_BYTES:
                raise WitnessError(413, "body too large")
            line = await witness.add_checkpoint(parse_request(body))
        except Conflict as exc:
            return web.Response(
                status=409, text=f"{exc.latest_size}\n", content_type=SIZE_MEDIA_TYPE
            )
        except WitnessError as exc:
            return web.Response(status=exc.status, text=exc.detail + "\n")
        return web.Response(text=line)

    async def checkpoint(request: web.Request) -> web.Response:
        wanted = request.match_info["origin_hash"]
        for origin in witness.log_keys:
            if origin_hash(origin) == wanted and (note := witness.state.note(origin)):
                return web.Response(text=note)
        return web.Response(status=404, text="no checkpoint cosigned for that log\n")

    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_post("/add-checkpoint", add_checkpoint)
    app.router.add_get("/{origin_hash:[0-9a-f]{64}}/checkpoint", checkpoint)
    return app


async def serve(witness: Witness, host: str, port: int, ready: Any = None) -> None:
    """Run until cancelled; `ready(port)` is called once it listens."""
    runner = web.AppRunner(make_app(witness), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
        if ready is not None:
            ready(int(runner.addresses[0][1]))
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
        witness.close()
