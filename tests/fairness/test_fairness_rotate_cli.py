"""`mesa audit rotate-key`: the operator rotates twice; each new key is announced in the log by
the key before it, verifiers follow the chain from the pinned first key, and a key the log
never announced is refused (never "verified")."""

from __future__ import annotations

import asyncio
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fairness.keys import OperatorKey, load_operator_key, private_key_pem, rotation_entry
from fairness.log_store import LogStore
from fairness.tlog import verifier_key
from fairness.transcript import SignedRecord, encode_transcript
from fairness.verify import key_chain, verify_transcript
from services.cli import main as mesa
from services.common.db import create_pool
from tests.fairness.fairness_helpers import fake_replayer, make_transcript, opened_deal
from tests.fairness.test_fairness_witness import ORIGIN as WITNESSED_ORIGIN
from tests.fairness.test_fairness_witness import _forged_mirror

T = datetime(2026, 6, 1, tzinfo=UTC)


def _new_key(folder: Path, name: str) -> tuple[OperatorKey, Path]:
    key = OperatorKey(Ed25519PrivateKey.generate())
    path = folder / name
    path.write_bytes(private_key_pem(key.private_key))
    return key, path


def _verify_cli(tmp_path: Path, t: Any, first: OperatorKey, capsys: Any) -> tuple[int, str]:
    doc = tmp_path / "hand.json"
    doc.write_bytes(encode_transcript(t))
    pinned = tmp_path / "first.pem"
    pinned.write_text(first.public_pem())
    capsys.readouterr()
    status = mesa(["audit", "verify", str(doc), "--public-key", str(pinned)])
    return status, capsys.readouterr().out


async def _rotate(new_file: Path) -> int:
    """The operator's command, in its own thread (it runs its own event loop)."""
    return await asyncio.to_thread(mesa, ["audit", "rotate-key", "--new-key", str(new_file)])


async def test_rotate_twice_and_verifiers_follow_the_chain(
    migrated: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    first, key_file = _new_key(tmp_path, "operator_key.pem")
    for name in [k for k in os.environ if k.startswith("MESA_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("MESA_DATABASE_URL", migrated)
    monkeypatch.setenv("MESA_OPERATOR_KEY_FILE", str(key_file))
    monkeypatch.setattr("fairness.cli.load_replayer", lambda: fake_replayer)
    pool = await create_pool(migrated, application_name="rotate-test", max_size=4)
    try:
        assert await LogStore(pool, first).register_key() is True  # the log's first key
        await LogStore(pool, first).append(opened_deal(first, "rot/0").commitment)

        second, second_file = _new_key(tmp_path, "second.pem")
        third, third_file = _new_key(tmp_path, "third.pem")
        for new, new_file in ((second, second_file), (third, third_file)):
            capsys.readouterr()
            assert await _rotate(new_file) == 0
            out = capsys.readouterr().out
            assert f"key {new.key_id} announced" in out
            # the key file now holds the new key: the engine signs with it after a restart
            assert load_operator_key(key_file, env={}).key_id == new.key_id
            await LogStore(pool, new).append(opened_deal(new, f"rot/{new.key_id[:6]}").commitment)

        # a third rotation from a key file the log never announced is refused
        stranger, stranger_file = _new_key(tmp_path, "stranger.pem")
        monkeypatch.setenv("MESA_OPERATOR_KEY_FILE", str(stranger_file))
        other, other_file = _new_key(tmp_path, "other.pem")
        assert await _rotate(other_file) == 1
        assert "not announced" in capsys.readouterr().err

        pinned, rotations = await LogStore(pool, third).key_chain()
        assert pinned == first.public_raw
        chain = key_chain([first.public_raw], [SignedRecord(**r) for r in rotations])
        assert set(chain) == {first.key_id, second.key_id, third.key_id}
    finally:
        await pool.close()

    # A hand signed by the third key verifies from the pinned first key through both links.
    t = make_transcript(third)
    t.public_keys = [first.public_hex(), second.public_hex(), third.public_hex()]
    t.key_rotations = [SignedRecord(**r) for r in rotations]
    assert verify_transcript(t, public_keys=[first.public_raw], replayer=fake_replayer).ok
    assert _verify_cli(tmp_path, t, first, capsys) == (0, "verified\n")
    # without the first link the chain breaks: refused
    t.key_rotations = t.key_rotations[1:]
    status, out = _verify_cli(tmp_path, t, first, capsys)
    assert status == 1 and "verified" not in out.splitlines()
    # a hand signed by the key the log never announced: refused
    u = make_transcript(stranger)
    u.public_keys = [first.public_hex(), stranger.public_hex()]
    u.key_rotations = [SignedRecord(**r) for r in rotations]
    status, out = _verify_cli(tmp_path, u, first, capsys)
    assert status == 1 and "verified" not in out.splitlines()
    assert not verify_transcript(u, public_keys=[first.public_raw], replayer=fake_replayer).ok


def test_checkpoint_cli_follows_the_log_key_chain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`mesa audit checkpoint` pinned to the first key accepts a checkpoint signed by a later
    key only through `/log/keys`' rotation records, each signed by a key already trusted."""
    first, second, stranger = (OperatorKey(Ed25519PrivateKey.generate()) for _ in range(3))
    folder = tmp_path / "log"
    _forged_mirror(folder, second.private_key, [b"entry"] * 3)  # signed by the rotated key
    args = ["audit", "checkpoint", "--log", str(folder), "--quorum", "0"]
    args += ["--log-key", verifier_key(WITNESSED_ORIGIN, first.public_raw)]
    args += ["--state", str(tmp_path / "state")]

    def run(rotations: list[dict[str, Any]] | None) -> tuple[int, str]:
        if rotations is not None:
            listing = {"keys": [], "key_rotations": rotations}
            (folder / "keys").write_text(json.dumps(listing, default=str))
        capsys.readouterr()
        return mesa(args), capsys.readouterr().out

    status, out = run(None)  # no rotation known: the new key is not trusted
    assert status == 1 and "refused" in out
    status, out = run([rotation_entry(stranger, second, T)])  # announced by a stranger
    assert status == 1 and "key chain" in out
    status, out = run([rotation_entry(first, second, T)])
    assert status == 0 and "accepted" in out, out
