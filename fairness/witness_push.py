"""The operator's side of C2SP tlog-witness: push the latest checkpoint to every configured
witness and publish the cosignatures they return.

For each witness the pusher remembers the size it last cosigned (in memory only: after a
restart the first request says `old 0` and the witness's 409 answer gives the size, which is
tried once). A witness that is down or refuses leaves nothing behind: the checkpoint is
published with the cosignatures of the others, and the next round tries again.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import structlog

from fairness.tlog import ALG_COSIGNATURE_V1, NoteError, Verifier, parse_verifier_key, verify_note
from fairness.witness_server import SIZE_MEDIA_TYPE

log = structlog.get_logger("fairness.witness_push")

TIMEOUT_S = 10.0
MAX_ANSWER_BYTES = 16 * 1024
# a cosignature dated further ahead than this is refused (tlog-cosignature lets verifiers)
MAX_CLOCK_SKEW_S = 300


@dataclass(frozen=True, slots=True)
class WitnessEndpoint:
    verifier: Verifier
    url: str  # the submission prefix: POST <url>/add-checkpoint

    @classmethod
    def parse(cls, vkey: str, url: str) -> WitnessEndpoint:
        v = parse_verifier_key(vkey)
        if v.alg != ALG_COSIGNATURE_V1:
            raise NoteError("a witness key must be a cosignature/v1 key (type 0x04)")
        if not url.startswith(("http://", "https://")):
            raise NoteError("a witness URL must be http(s)")
        return cls(v, url.rstrip("/"))


class CheckpointStore(Protocol):
    async def checkpoint_notes(
        self, after_id: int = 0, limit: int = 100, latest: bool = False
    ) -> Sequence[Any]: ...

    async def consistency_proof(
        self, old_size: int, new_size: int | None = None
    ) -> list[bytes]: ...

    async def add_cosignature(self, checkpoint_id: int, witness: str, line: str) -> bool: ...


class Refused(Exception):
    pass


class WitnessPusher:
    def __init__(self, store: CheckpointStore, witnesses: Sequence[WitnessEndpoint]) -> None:
        self.store = store
        self.witnesses = list(witnesses)
        self._sizes: dict[str, int] = {}  # witness key -> the size it cosigned last
        self._lock = asyncio.Lock()

    def cosigned_sizes(self) -> dict[str, int]:
        """Witness key -> the tree size it last cosigned for this process."""
        return dict(self._sizes)

    async def push_latest(self) -> int:
        """Submit the latest checkpoint to every witness that has not cosigned it; returns the
        number of cosignatures it now carries from configured witnesses."""
        if not self.witnesses:
            return 0
        async with self._lock:
            found = await self.store.checkpoint_notes(latest=True)
            if not found:
                return 0
            cp = found[0]
            have = {line.split(" ", 2)[1] for line in cp.cosignatures if line.count(" ") >= 2}
            todo = [w for w in self.witnesses if not self._signed(w, cp, have)]
            if not todo:
                return len(self.witnesses)
            timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
            async with aiohttp.ClientSession(timeout=timeout) as http:
                results = await asyncio.gather(
                    *(self._submit(http, w, cp) for w in todo), return_exceptions=True
                )
            for w, res in zip(todo, results, strict=True):
                if isinstance(res, BaseException):
                    log.warning(
                        "witness_refused",
                        witness=w.verifier.name,
                        url=w.url,
                        tree_size=cp.tree_size,
                        error=str(res)[:200],
                    )
            return len(self.witnesses) - len(todo) + sum(1 for r in results if r is True)

    def _signed(self, w: WitnessEndpoint, cp: Any, have: set[str]) -> bool:
        return w.verifier.name in have and self._sizes.get(w.verifier.key()) == cp.tree_size

    async def _submit(self, http: aiohttp.ClientSession, w: WitnessEndpoint, cp: Any) -> bool:
        key = w.verifier.key()
        old = self._sizes.get(key, 0)
        for attempt in range(2):
            if old > cp.tree_size:
                raise Refused(f"the witness has size {old}, beyond checkpoint {cp.tree_size}")
            proof = await self.store.consistency_proof(old, cp.tree_size) if old else []
            body = f"old {old}\n" + "".join(base64.b64encode(h).decode() + "\n" for h in proof)
            async with http.post(
                w.url + "/add-checkpoint",
                data=(body + "\n" + cp.note).encode(),
                headers={"content-type": "text/plain; charset=utf-8"},
            ) as r:
                answer = await r.content.read(MAX_ANSWER_BYTES)
                if r.status == 409 and attempt == 0 and r.content_type == SIZE_MEDIA_TYPE:
                    text = answer.decode("ascii", "replace").strip()
                    if not text.isdigit():
                        raise Refused("409 without a size")
                    old = int(text)
                    continue
                if r.status != 200:
                    raise Refused(f"HTTP {r.status}: {answer[:200].decode('utf-8', 'replace')}")
            line = self._cosignature(w, cp.note, answer.decode("utf-8", "replace"))
            await self.store.add_cosignature(cp.id, key, line)
            self._sizes[key] = cp.tree_size
            return True
        raise Refused("the witness's size changed twice")

    @staticmethod
    def _cosignature(w: WitnessEndpoint, note: str, answer: str) -> str:
        """The witness's own cosignature line in its answer, checked; other lines ignored."""
        for line in answer.splitlines(keepends=True):
            if not line.endswith("\n"):
                continue
            try:
                _, signed = verify_note(note + line, [w.verifier])
            except NoteError:
                continue
            if signed:
                stamp = int.from_bytes(base64.b64decode(line.split(" ", 2)[2])[4:12], "big")
                if stamp > time.time() + MAX_CLOCK_SKEW_S:
                    raise Refused("the cosignature is dated in the future")
                return line
        raise Refused("no valid cosignature by this witness in its answer")
