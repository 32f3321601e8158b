"""`mesa audit witness serve`: a C2SP tlog-witness on loopback, driven over HTTP exactly as the
spec's add-checkpoint says (200 cosignature, 409 text/x.tlog.size, 403, 404, 422, 400), its
state kept in a file across restarts and never rolled back."""

from __future__ import annotations

import asyncio
import base64
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fairness.commitments import raw_public_key
from fairness.keys import private_key_pem
from fairness.merkle import MemoryTree
from fairness.tlog import (
    ALG_COSIGNATURE_V1,
    checkpoint_body,
    parse_verifier_key,
    sign_note,
    verifier_key,
    verify_note,
)
from fairness.witness_server import SIZE_MEDIA_TYPE, Witness, origin_hash, serve
from services.cli import main as mesa

ORIGIN = "mesa.test/witnessed"
W_NAME = "witness.test/w1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def running_witness(
    key: Ed25519PrivateKey, log_vkeys: list[str], state: Path, port: int = 0, name: str = W_NAME
) -> AsyncIterator[str]:
    """A witness server on loopback; yields its submission prefix."""
    logs: dict[str, list[Any]] = {}
    for vk in log_vkeys:
        v = parse_verifier_key(vk)
        logs.setdefault(v.name, []).append(v)
    witness = Witness(name, key, logs, state)
    listening: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve(witness, "127.0.0.1", port, listening.set_result))
    try:
        bound = await asyncio.wait_for(asyncio.shield(listening), 30)
        yield f"http://127.0.0.1:{bound}"
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


class Log:
    """A log in memory, signing checkpoints with its note key."""

    def __init__(self, origin: str = ORIGIN) -> None:
        self.origin = origin
        self.key = Ed25519PrivateKey.generate()
        self.tree = MemoryTree()
        self.vkey = verifier_key(origin, raw_public_key(self.key.public_key()))

    def grow(self, size: int) -> None:
        while self.tree.size < size:
            self.tree.append(f"entry {self.tree.size}".encode())

    def note(self, size: int | None = None, root: bytes | None = None) -> str:
        n = self.tree.size if size is None else size
        r = self.tree.root(n) if root is None else root
        return sign_note(checkpoint_body(self.origin, n, r), self.origin, self.key)

    def body(self, old: int, note: str, proof: list[bytes] | None = None) -> bytes:
        size = int(note.split("\n")[1])
        hashes = self.tree.consistency(old, size) if proof is None else proof
        lines = "".join(base64.b64encode(h).decode() + "\n" for h in hashes)
        return f"old {old}\n{lines}\n{note}".encode()


async def _post(url: str, body: bytes) -> tuple[int, str, str]:
    async with aiohttp.ClientSession() as http, http.post(url + "/add-checkpoint", data=body) as r:
        return r.status, r.content_type, await r.text()


def _wvkey(key: Ed25519PrivateKey, name: str = W_NAME) -> str:
    return verifier_key(name, raw_public_key(key.public_key()), ALG_COSIGNATURE_V1)


async def test_add_checkpoint_per_tlog_witness(tmp_path: Path) -> None:
    log, wkey = Log(), Ed25519PrivateKey.generate()
    wv = parse_verifier_key(_wvkey(wkey))
    state = tmp_path / "state"
    async with running_witness(wkey, [log.vkey], state) as url:
        log.grow(5)
        first = log.note()
        status, _, line = await _post(url, log.body(0, first))
        assert status == 200, line
        assert line.startswith("\u2014 " + W_NAME + " ") and line.endswith("\n")
        _, signed = verify_note(first + line, [wv])  # a cosignature/v1 over the checkpoint
        assert signed == [wv]
        stamp = int.from_bytes(base64.b64decode(line.split(" ")[2])[4:12], "big")
        assert stamp > 1_700_000_000  # timestamped (never zero)

        log.grow(300)
        # a client without the witness's size: 409 with the size it cosigned last
        status, ctype, text = await _post(url, log.body(0, log.note()))
        assert (status, ctype, text) == (409, SIZE_MEDIA_TYPE, "5\n")
        status, _, line = await _post(url, log.body(5, log.note()))
        assert status == 200, line

        # a rollback to 5 entries: `old` must be what it cosigned (300), and old <= size
        assert (await _post(url, log.body(5, first)))[0] == 409
        assert (await _post(url, log.body(300, first, [])))[0] == 400
        # a fork: another tree of more entries whose proof cannot match the cosigned root
        fork = Log()
        fork.key, fork.vkey = log.key, log.vkey
        fork.grow(301)
        fork.tree.hashes[0] = b"\x00" * 32
        bad_proof = fork.tree.consistency(300, 301)
        assert (await _post(url, log.body(300, log.note(301, fork.tree.root()), bad_proof)))[
            0
        ] == 422
        # the same size with another root
        assert (await _post(url, log.body(300, log.note(300, b"\x01" * 32), [])))[0] == 422

        # unknown origin, unknown key, bad signature by the known key, malformed bodies
        other = Log("another.example/log")
        other.grow(3)
        assert (await _post(url, other.body(0, other.note())))[0] == 404
        stranger = Log()
        stranger.grow(301)
        assert (await _post(url, stranger.body(300, stranger.note())))[0] == 403
        good = log.note()
        tampered = good.replace(good.split("\n")[1], "301", 1)
        assert (await _post(url, log.body(300, tampered, [])))[0] == 403
        assert (await _post(url, b"old 01\n\n" + good.encode()))[0] == 400
        assert (await _post(url, b"old 300\nnot base64!\n\n" + good.encode()))[0] == 400
        assert (await _post(url, b"old 300\n" + good.encode()))[0] == 400
        assert (await _post(url, b"old 300\n" + b"A" * 100_000))[0] == 413

        # monitors read the latest cosigned checkpoint
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"{url}/{origin_hash(ORIGIN)}/checkpoint") as r,
        ):
            served = await r.text()
        assert r.status == 200 and served.startswith(checkpoint_body(ORIGIN, 300, log.tree.root()))
        verify_note(served, [wv])
        verify_note(served, [parse_verifier_key(log.vkey)])

    # the state survived the restart: still 300, a second server may not share the folder
    async with running_witness(wkey, [log.vkey], state) as url:
        with pytest.raises(ValueError, match="another witness"):
            Witness(W_NAME, wkey, {}, state)
        status, ctype, text = await _post(url, log.body(0, log.note()))
        assert (status, text) == (409, "300\n")


async def test_proof_from_zero_must_be_empty_and_empty_tree_has_the_empty_root(
    tmp_path: Path,
) -> None:
    log, wkey = Log(), Ed25519PrivateKey.generate()
    async with running_witness(wkey, [log.vkey], tmp_path) as url:
        log.grow(4)
        assert (await _post(url, log.body(0, log.note(), [b"\x02" * 32])))[0] == 422
        assert (await _post(url, log.body(0, log.note(0, b"\x03" * 32), [])))[0] == 422
        assert (await _post(url, log.body(0, log.note(), [])))[0] == 200


async def test_concurrent_submissions_never_roll_back(tmp_path: Path) -> None:
    """tlog-witness's race: of two requests from the same old size only one is cosigned."""
    log, wkey = Log(), Ed25519PrivateKey.generate()
    async with running_witness(wkey, [log.vkey], tmp_path) as url:
        log.grow(10)
        small = log.body(0, log.note(6))
        big = log.body(0, log.note(10))
        results = await asyncio.gather(*(_post(url, b) for b in (small, big) * 4))
        assert sorted(r[0] for r in results).count(200) == 1


def test_cli_serve_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = tmp_path / "w.pem"
    key.write_bytes(private_key_pem(Ed25519PrivateKey.generate()))
    base = ["audit", "witness", "serve", "--key", str(key), "--name", W_NAME]
    assert mesa([*base, "--log-key", "nonsense", "--state", str(tmp_path / "s")]) == 2
    assert "verifier key" in capsys.readouterr().err
    log = Log()
    args = [*base, "--log-key", log.vkey, "--state", str(tmp_path / "s"), "--listen", "nope"]
    assert mesa(args) == 2
    assert "HOST:PORT" in capsys.readouterr().err
